package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
)

// The lock index holds two kinds of documents, told apart by "kind": lock
// documents (one per locked path, plus the global lock) and operation
// records (the rename journal). Their meaning belongs to locking/; this file
// only stores and reads them, always with sequence numbers.

// LockMode is shared or exclusive.
type LockMode string

const (
	Shared    LockMode = "S"
	Exclusive LockMode = "X"
)

// Holder is one entry of a lock document: who holds it, for which
// operation, in which mode. Entries are per holder, never a counter, so a
// dead holder's share can be removed without guessing.
type Holder struct {
	Session string   `json:"s"`
	Op      string   `json:"o"`
	Mode    LockMode `json:"m"`
	Since   int64    `json:"t"` // wall clock of the holder, for display only
}

// Waiter marks an exclusive request that was refused, so that shared
// requests younger than it yield (no starvation of renames).
type Waiter struct {
	Session string `json:"s"`
	Op      string `json:"o"`
	Ticket  string `json:"k"` // totally ordered: older tickets sort first
	Since   int64  `json:"t"`
}

// LockDoc is one lock document. Found is false for a lock nobody holds
// (no document); Ver is then zero.
type LockDoc struct {
	ID      string
	Path    string
	Holders []Holder
	Waiters []Waiter
	Found   bool
	Ver     Version
}

// GlobalLockID is the id of the single lock of the global strategy.
const GlobalLockID = "G"

// LockID is the id of the lock document of path.
func LockID(path string) string { return "L" + DocID(path) }

type lockJSON struct {
	Kind    string   `json:"kind"`
	Path    string   `json:"path"`
	Holders []Holder `json:"holders"`
	Waiters []Waiter `json:"waiters,omitempty"`
}

// GetLocks reads lock documents in one round trip, in order.
func (s *Store) GetLocks(ctx context.Context, ids []string) ([]LockDoc, error) {
	docs, err := s.mget(ctx, s.idx.Locks, ids, fmt.Sprintf("reading %d lock documents", len(ids)))
	if err != nil {
		return nil, err
	}
	out := make([]LockDoc, len(ids))
	for i, g := range docs {
		out[i].ID = ids[i]
		if !g.Found {
			continue
		}
		var j lockJSON
		if err := json.Unmarshal(g.Source, &j); err != nil || j.Kind != "lock" {
			return nil, fmt.Errorf("lock document %s: %w", ids[i], ErrCorrupt)
		}
		p, err := decodeText(j.Path)
		if err != nil {
			return nil, err
		}
		out[i] = LockDoc{ID: ids[i], Path: p, Holders: j.Holders, Waiters: j.Waiters, Found: true, Ver: g.version()}
	}
	return out, nil
}

// LockWrite is one conditional change of a lock document: create it (when
// it did not exist), overwrite it at IfVer, or delete it at IfVer (when it
// has no holders and no waiters left).
type LockWrite struct {
	Doc    LockDoc
	Delete bool
}

// WriteLocks applies lock writes in one bulk. A document that is not Found
// is created (op_type=create); others are written or deleted at Doc.Ver.
func (s *Store) WriteLocks(ctx context.Context, ws []LockWrite) ([]BulkResult, error) {
	ops, err := s.OpsWriteLocks(ws)
	if err != nil {
		return nil, err
	}
	return s.Bulk(ctx, ops)
}

// OpsWriteLocks are the bulk items of WriteLocks, for a caller that sends
// them with other items in one request.
func (s *Store) OpsWriteLocks(ws []LockWrite) ([]BulkOp, error) {
	ops := make([]BulkOp, 0, len(ws))
	for _, w := range ws {
		d := w.Doc
		what := fmt.Sprintf("lock %q", d.Path)
		var o BulkOp
		var err error
		switch {
		case w.Delete:
			if !d.Ver.Known() {
				return nil, fmt.Errorf("deleting %s without a version: %w", what, ErrInvalid)
			}
			o, err = s.op("delete", s.idx.Locks, d.ID, d.Ver, nil, "releasing "+what)
		case !d.Found:
			o, err = s.op("create", s.idx.Locks, d.ID, Version{}, lockJSON{Kind: "lock", Path: encodeText(d.Path), Holders: nonNil(d.Holders), Waiters: d.Waiters}, "taking "+what)
		default:
			o, err = s.op("index", s.idx.Locks, d.ID, d.Ver, lockJSON{Kind: "lock", Path: encodeText(d.Path), Holders: nonNil(d.Holders), Waiters: d.Waiters}, "updating "+what)
		}
		if err != nil {
			return nil, err
		}
		ops = append(ops, o)
	}
	return ops, nil
}

func nonNil(h []Holder) []Holder {
	if h == nil {
		return []Holder{}
	}
	return h
}

// OpState is the state of a journaled operation. PREPARED -> COMMITTED ->
// DONE, or PREPARED -> ABORTED (-> DONE once cleaned, with Aborted set).
type OpState string

const (
	OpPrepared  OpState = "prepared"
	OpCommitted OpState = "committed"
	OpAborted   OpState = "aborted"
	OpDone      OpState = "done"
)

// LockRef names one lock an operation holds, so that whoever finishes the
// operation can release it.
type LockRef struct {
	ID   string   `json:"id"`
	Path string   `json:"p"`
	Mode LockMode `json:"m"`
}

// OpRecord is one journaled operation (a rename). Every change to it is a
// compare-and-set at Ver; Owner and Epoch fence a paused former owner.
type OpRecord struct {
	ID    string
	State OpState
	Owner string // session id
	Epoch int64
	// What the rename does.
	Src, Dst string
	SrcIno   uint64
	SrcType  FileType
	// Overwritten is the inode a rename over an existing target replaces
	// (0 when the target did not exist); it loses a link at the end.
	Overwritten     uint64
	OverwrittenType FileType
	Aborted         bool // a DONE record that was rolled back
	// LinkDropped: the overwritten inode's link was (being) dropped. Set by
	// compare-and-set before the drop, so that the drop happens at most
	// once; a crash in between leaves a count one too high, never too low.
	LinkDropped bool
	Locks       []LockRef // held under this operation
	Created     int64     // wall clock of the creator, for display only
	Ver         Version

	// SrcParent and DstParent are the inodes of the source's and the
	// destination's directories, whose link counts a directory rename
	// moves (0 in records of an esfs that did not count). DirLinksMoved,
	// set as LinkDropped is, makes that happen at most once.
	SrcParent, DstParent uint64
	DirLinksMoved        bool
}

type opBody struct {
	Src             string    `json:"src"`
	Dst             string    `json:"dst"`
	SrcIno          uint64    `json:"src_ino"`
	SrcType         string    `json:"src_type"`
	Overwritten     uint64    `json:"ovr_ino,omitempty"`
	OverwrittenType string    `json:"ovr_type,omitempty"`
	Aborted         bool      `json:"aborted,omitempty"`
	LinkDropped     bool      `json:"link_dropped,omitempty"`
	SrcParent       uint64    `json:"src_parent,omitempty"`
	DstParent       uint64    `json:"dst_parent,omitempty"`
	DirLinksMoved   bool      `json:"dir_links_moved,omitempty"`
	Locks           []LockRef `json:"locks"`
	Created         int64     `json:"created"`
}

type opJSON struct {
	Kind  string `json:"kind"`
	Op    string `json:"op"`
	State string `json:"state"`
	Owner string `json:"owner"`
	Epoch int64  `json:"epoch"`
	Body  opBody `json:"body"`
}

func opID(id string) string { return "O" + id }

func encodeOp(r OpRecord) opJSON {
	b := opBody{Src: encodeText(r.Src), Dst: encodeText(r.Dst), SrcIno: r.SrcIno, SrcType: r.SrcType.String(),
		Overwritten: r.Overwritten, Aborted: r.Aborted, LinkDropped: r.LinkDropped, Locks: r.Locks, Created: r.Created,
		SrcParent: r.SrcParent, DstParent: r.DstParent, DirLinksMoved: r.DirLinksMoved}
	if r.Overwritten != 0 {
		b.OverwrittenType = r.OverwrittenType.String()
	}
	return opJSON{Kind: "op", Op: r.ID, State: string(r.State), Owner: r.Owner, Epoch: r.Epoch, Body: b}
}

func decodeOp(src []byte, v Version) (OpRecord, error) {
	var j opJSON
	if err := json.Unmarshal(src, &j); err != nil || j.Kind != "op" {
		return OpRecord{}, fmt.Errorf("operation record: %w", ErrCorrupt)
	}
	r := OpRecord{ID: j.Op, State: OpState(j.State), Owner: j.Owner, Epoch: j.Epoch, SrcIno: j.Body.SrcIno,
		Overwritten: j.Body.Overwritten, Aborted: j.Body.Aborted, LinkDropped: j.Body.LinkDropped, Locks: j.Body.Locks, Created: j.Body.Created, Ver: v,
		SrcParent: j.Body.SrcParent, DstParent: j.Body.DstParent, DirLinksMoved: j.Body.DirLinksMoved}
	var err error
	if r.Src, err = decodeText(j.Body.Src); err != nil {
		return OpRecord{}, err
	}
	if r.Dst, err = decodeText(j.Body.Dst); err != nil {
		return OpRecord{}, err
	}
	if r.SrcType, err = parseFileType(j.Body.SrcType); err != nil {
		return OpRecord{}, fmt.Errorf("operation %s: %w", r.ID, ErrCorrupt)
	}
	if r.Overwritten != 0 {
		if r.OverwrittenType, err = parseFileType(j.Body.OverwrittenType); err != nil {
			return OpRecord{}, fmt.Errorf("operation %s: %w", r.ID, ErrCorrupt)
		}
	}
	switch r.State {
	case OpPrepared, OpCommitted, OpAborted, OpDone:
	default:
		return OpRecord{}, fmt.Errorf("operation %s has state %q: %w", r.ID, r.State, ErrCorrupt)
	}
	return r, nil
}

// GetOp reads an operation record in real time.
func (s *Store) GetOp(ctx context.Context, id string) (OpRecord, error) {
	g, err := s.get(ctx, s.idx.Locks, opID(id), "reading operation "+id)
	if err != nil {
		return OpRecord{}, err
	}
	return decodeOp(g.Source, g.version())
}

// CreateOp writes a new operation record (op_type=create).
func (s *Store) CreateOp(ctx context.Context, r OpRecord) (Version, error) {
	return s.write(ctx, s.idx.Locks, opID(r.ID), encodeOp(r), true, Version{}, "creating operation "+r.ID)
}

// PutOp overwrites an operation record if it is still at ifVer.
func (s *Store) PutOp(ctx context.Context, r OpRecord, ifVer Version) (Version, error) {
	if !ifVer.Known() {
		return Version{}, fmt.Errorf("operation %s without a version: %w", r.ID, ErrInvalid)
	}
	return s.write(ctx, s.idx.Locks, opID(r.ID), encodeOp(r), false, ifVer, "updating operation "+r.ID)
}

// OpPutOp is PutOp as a bulk item.
func (s *Store) OpPutOp(r OpRecord, ifVer Version) (BulkOp, error) {
	if !ifVer.Known() {
		return BulkOp{}, fmt.Errorf("operation %s without a version: %w", r.ID, ErrInvalid)
	}
	return s.op("index", s.idx.Locks, opID(r.ID), ifVer, encodeOp(r), "updating operation "+r.ID)
}

// DeleteOp removes a finished operation record if it is still at ifVer.
func (s *Store) DeleteOp(ctx context.Context, id string, ifVer Version) error {
	_, err := s.remove(ctx, s.idx.Locks, opID(id), ifVer, "deleting operation "+id)
	return err
}

// SearchOps lists operation records (all of them, or those in states),
// after a refresh: the sweeper and fsck must not miss a recent one.
func (s *Store) SearchOps(ctx context.Context, states ...OpState) ([]OpRecord, error) {
	q := []any{map[string]any{"term": map[string]any{"kind": "op"}}}
	if len(states) > 0 {
		ss := make([]string, len(states))
		for i, st := range states {
			ss[i] = string(st)
		}
		q = append(q, map[string]any{"terms": map[string]any{"state": ss}})
	}
	hits, err := s.searchAll(ctx, s.idx.Locks, map[string]any{"bool": map[string]any{"filter": q}}, "op")
	if err != nil {
		return nil, err
	}
	out := make([]OpRecord, 0, len(hits))
	for _, h := range hits {
		r, err := decodeOp(h.Source, h.version())
		if err != nil {
			s.log.Error("skipping a corrupt operation record", "id", h.ID, "err", err)
			continue
		}
		out = append(out, r)
	}
	return out, nil
}

// SearchLocks lists every lock document (for esfs locks, fsck, the sweeper).
func (s *Store) SearchLocks(ctx context.Context) ([]LockDoc, error) {
	hits, err := s.searchAll(ctx, s.idx.Locks, map[string]any{"term": map[string]any{"kind": "lock"}}, "path")
	if err != nil {
		return nil, err
	}
	out := make([]LockDoc, 0, len(hits))
	for _, h := range hits {
		var j lockJSON
		if err := json.Unmarshal(h.Source, &j); err != nil {
			s.log.Error("skipping a corrupt lock document", "id", h.ID, "err", err)
			continue
		}
		p, _ := decodeText(j.Path)
		out = append(out, LockDoc{ID: h.ID, Path: p, Holders: j.Holders, Waiters: j.Waiters, Found: true, Ver: h.version()})
	}
	return out, nil
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
