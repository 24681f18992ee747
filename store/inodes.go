package store

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
)

// InodeScanner pages through every inode document in inode number order
// (for fsck). Near-realtime: refresh the inode index first via RefreshAll.
type InodeScanner struct {
	s     *Store
	after []any
	done  bool
}

// ScanInodes starts a scan of all inodes.
func (s *Store) ScanInodes() *InodeScanner { return &InodeScanner{s: s} }

// Next returns the next page of inodes, or nil at the end; undecodable
// documents come back as errors in bad.
func (sc *InodeScanner) Next(ctx context.Context) (page []Inode, bad []error, err error) {
	if sc.done {
		return nil, nil, nil
	}
	req := map[string]any{"size": DefaultPageSize, "query": map[string]any{"match_all": map[string]any{}},
		"sort": []any{map[string]any{"ino": "asc"}}, "seq_no_primary_term": true, "track_total_hits": false}
	if sc.after != nil {
		req["search_after"] = sc.after
	}
	body, _ := json.Marshal(req)
	what := "scanning inodes"
	res, err := sc.s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(sc.s.idx.Inodes) + "/_search", body: body})
	if err != nil {
		return nil, nil, err
	}
	if res.status != 200 {
		return nil, nil, failure(what, res)
	}
	var out struct {
		Hits struct {
			Hits []searchHit `json:"hits"`
		} `json:"hits"`
	}
	// Sort values as json.Number: inode numbers use 63 bits, and a
	// float64 search_after would round the last one, skipping or
	// repeating its neighbours.
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	hits := out.Hits.Hits
	if len(hits) < DefaultPageSize {
		sc.done = true
	}
	if len(hits) > 0 {
		sc.after = hits[len(hits)-1].Sort
	}
	for _, h := range hits {
		n, err := decodeInode(h.Source, h.version())
		if err != nil {
			bad = append(bad, fmt.Errorf("inode document %s: %w", h.ID, err))
			continue
		}
		page = append(page, n)
	}
	return page, bad, nil
}

// RefreshAll refreshes every index of the filesystem (fsck, tests).
func (s *Store) RefreshAll(ctx context.Context) error {
	return s.refresh(ctx, "refreshing the filesystem's indices", s.allIndices()...)
}

// AddDirLinks adds delta to the link count of directory ino, for a
// subdirectory made, removed, or moved in or out, with compare-and-set,
// reading again on conflict (there are no scripts to add atomically). When
// t is not 0 it also sets the directory's mtime and ctime, as the change of
// its entries. A count not kept (see DirLinksCounted) stays as it is, and
// a count never goes below 2: a drift is fsck's to repair, not a reason to
// make a directory look uncounted.
func (s *Store) AddDirLinks(ctx context.Context, ino uint64, delta int, t int64) (Inode, error) {
	for attempt := 0; ; attempt++ {
		n, err := s.GetInode(ctx, ino)
		if err != nil {
			return Inode{}, err
		}
		changed, ok := WithDirLinks(n, delta, t)
		if !ok {
			return n, nil
		}
		v, err := s.PutInode(ctx, changed, n.Ver)
		if errors.Is(err, ErrConflict) && attempt < 100 {
			Backoff(ctx, attempt, InodeBackoff)
			continue
		}
		if err != nil {
			return Inode{}, err
		}
		changed.Ver = v
		return changed, nil
	}
}

// WithDirLinks returns directory n with delta more links (none below 2,
// and a count not kept left alone) and, when t is not 0, its mtime and
// ctime set to t. ok is false when nothing changes.
func WithDirLinks(n Inode, delta int, t int64) (Inode, bool) {
	if n.Type != TypeDir {
		return n, false
	}
	ok := false
	if n.DirLinksCounted() && delta != 0 {
		n.Nlink = uint32(max(2, int64(n.Nlink)+int64(delta)))
		ok = true
	}
	if t != 0 {
		n.Mtime, n.Ctime = t, t
		ok = true
	}
	return n, ok
}
