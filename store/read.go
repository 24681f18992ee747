package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// getResult is one document of a GET or an mget.
type getResult struct {
	Index       string `json:"_index"`
	ID          string `json:"_id"`
	Found       bool   `json:"found"`
	SeqNo       int64  `json:"_seq_no"`
	PrimaryTerm int64  `json:"_primary_term"`
	// Ext is _version: a data chunk's external version (DataVersion).
	Ext    int64           `json:"_version"`
	Source json.RawMessage `json:"_source"`
	Error  *esError        `json:"error"`
}

func (g getResult) version() Version { return Version{SeqNo: g.SeqNo, PrimaryTerm: g.PrimaryTerm} }

// get reads one document in real time (GET by _id sees every acknowledged
// write, unlike search).
func (s *Store) get(ctx context.Context, index, id, what string) (getResult, error) {
	res, err := s.do(ctx, what, request{method: "GET", path: "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(id)})
	if err != nil {
		return getResult{}, err
	}
	if res.status != 200 {
		return getResult{}, failure(what, res)
	}
	var g getResult
	if err := json.Unmarshal(res.body, &g); err != nil {
		return getResult{}, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	if !g.Found {
		return getResult{}, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return g, nil
}

// mget reads many documents of one index in one round trip, in order.
// A missing document has Found == false.
func (s *Store) mget(ctx context.Context, index string, ids []string, what string) ([]getResult, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	body, _ := json.Marshal(map[string]any{"ids": ids})
	return s.mgetBody(ctx, "/"+url.PathEscape(index)+"/_mget", body, len(ids), what)
}

// mgetBody sends an _mget of n documents to path and returns them in
// order.
func (s *Store) mgetBody(ctx context.Context, path string, body []byte, n int, what string) ([]getResult, error) {
	res, err := s.do(ctx, what, request{method: "POST", path: path, body: body})
	if err != nil {
		return nil, err
	}
	if res.status != 200 {
		return nil, failure(what, res)
	}
	var out struct {
		Docs []getResult `json:"docs"`
	}
	var ok bool
	if out.Docs, ok = decodeMget(res.body); !ok {
		if err := json.Unmarshal(res.body, &out); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
		}
	}
	if len(out.Docs) != n {
		return nil, fmt.Errorf("%s: asked %d documents, got %d: %w", what, n, len(out.Docs), ErrCorrupt)
	}
	for _, d := range out.Docs {
		if d.Error != nil && d.Error.Type == "index_not_found_exception" {
			return nil, statusError(404, what, d.Error) // ErrNoIndex: gone, not unavailable
		}
		if d.Error != nil {
			return nil, statusError(503, what, d.Error)
		}
	}
	return out.Docs, nil
}

// docKind is one kind of document: the index it lives in and how its
// source decodes. getDoc and getDocs read every kind through it.
type docKind[T any] struct {
	index  indexRole
	decode func(src []byte, v Version) (T, error)
}

var (
	dentryKind  = docKind[Dentry]{index: pathsIndex, decode: decodeDentry}
	inodeKind   = docKind[Inode]{index: inodesIndex, decode: decodeInode}
	lockKind    = docKind[LockDoc]{index: locksIndex, decode: decodeLock}
	opKind      = docKind[OpRecord]{index: locksIndex, decode: decodeOp}
	sessionKind = docKind[SessionDoc]{index: sessionsIndex, decode: decodeSession}
	chunkKind   = docKind[chunkDoc]{index: dataIndex, decode: decodeChunk}
)

// getDoc reads and decodes one document in real time. Its errors say
// what: ErrNotFound, ErrUnavailable, ... or the decoder's ErrCorrupt.
func getDoc[T any](ctx context.Context, s *Store, k docKind[T], id, what string) (T, error) {
	var zero T
	g, err := s.get(ctx, s.idx.name(k.index), id, what)
	if err != nil {
		return zero, err
	}
	v, err := k.decode(g.Source, g.version())
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, damaged(g.Index, g.ID, err))
	}
	return v, nil
}

// getDocs reads and decodes many documents of one kind in one round trip,
// in order. Each has its value or an error of its own: a bare ErrNotFound
// when it is absent, or the decoder's error.
func getDocs[T any](ctx context.Context, s *Store, k docKind[T], ids []string, what string) ([]T, []error, error) {
	docs, err := s.mget(ctx, s.idx.name(k.index), ids, what)
	if err != nil {
		return nil, nil, err
	}
	vals, errs := make([]T, len(docs)), make([]error, len(docs))
	for i, g := range docs {
		if !g.Found {
			errs[i] = ErrNotFound
			continue
		}
		vals[i], errs[i] = k.decode(g.Source, g.version())
		errs[i] = damaged(g.Index, g.ID, errs[i])
	}
	return vals, errs, nil
}

type searchHit struct {
	ID          string          `json:"_id"`
	SeqNo       int64           `json:"_seq_no"`
	PrimaryTerm int64           `json:"_primary_term"`
	Source      json.RawMessage `json:"_source"`
	Sort        []any           `json:"sort"`
}

func (h searchHit) version() Version { return Version{SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm} }

// searchAll refreshes index and returns every hit of query, paging with
// search_after on sortKey, which must be unique among the hits. For small
// indices (locks, sessions), whose documents are few at any time.
func (s *Store) searchAll(ctx context.Context, index string, query map[string]any, sortKey string) ([]searchHit, error) {
	what := "refreshing " + index
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(index) + "/_refresh"})
	if err != nil {
		return nil, err
	}
	if res.status != 200 {
		return nil, failure(what, res)
	}
	var out []searchHit
	var after []any
	for {
		req := map[string]any{"size": 1000, "query": query, "seq_no_primary_term": true, "track_total_hits": false,
			"sort": []any{map[string]any{sortKey: "asc"}}}
		if after != nil {
			req["search_after"] = after
		}
		body, _ := json.Marshal(req)
		what := "searching " + index
		res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(index) + "/_search", body: body})
		if err != nil {
			return nil, err
		}
		if res.status != 200 {
			return nil, failure(what, res)
		}
		var page struct {
			Hits struct {
				Hits []searchHit `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(res.body, &page); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
		}
		out = append(out, page.Hits.Hits...)
		if len(page.Hits.Hits) < 1000 {
			return out, nil
		}
		after = page.Hits.Hits[len(page.Hits.Hits)-1].Sort
	}
}

// Searched names the indices Refresh makes current for search.
type Searched int

const (
	// SearchedPaths: the path index, for listings and scans of a tree.
	SearchedPaths Searched = 1 << iota
	// SearchedData: the data index, for the chunks a file has stored and
	// searches of contents.
	SearchedData
	// SearchedInodes: the inode index, for searches and sums of attributes
	// (esfs find, esfs du).
	SearchedInodes
	// SearchedAll: every index of the filesystem (fsck, tests).
	SearchedAll
)

// Refresh makes every acknowledged write to the indices which names
// visible to search. Callers refresh before a search that must be
// complete, never per write.
func (s *Store) Refresh(ctx context.Context, which Searched) error {
	if which&SearchedAll != 0 {
		return s.refresh(ctx, "refreshing the filesystem's indices", s.allIndices()...)
	}
	var names []string
	if which&SearchedPaths != 0 {
		names = append(names, s.idx.Paths)
	}
	if which&SearchedData != 0 {
		names = append(names, s.idx.Data)
	}
	if which&SearchedInodes != 0 {
		names = append(names, s.idx.Inodes)
	}
	if len(names) == 0 {
		return nil
	}
	return s.refresh(ctx, "refreshing "+strings.Join(names, ", "), names...)
}

// refresh makes every acknowledged write to indices visible to search.
func (s *Store) refresh(ctx context.Context, what string, indices ...string) error {
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + strings.Join(indices, ",") + "/_refresh"})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}

// search sends one _search request to index and decodes its answer into
// out, numbers as json.Number: sort values carry inode numbers, which use
// 63 bits and would be rounded by float64 (a search_after from a rounded
// value skips or repeats the hits beside it).
func (s *Store) search(ctx context.Context, what, index string, req map[string]any, out any) error {
	body, _ := json.Marshal(req)
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(index) + "/_search", body: body})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.UseNumber()
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	return nil
}
