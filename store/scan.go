package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
)

// Scanner pages through path documents in a stable order with search_after.
// Searches are near-realtime: refresh first when the result must include
// every acknowledged write. A Scanner holds O(page) memory whatever the
// number of documents, and must be closed (it may hold a point-in-time).
type Scanner struct {
	s        *Store
	query    map[string]any
	sortKey  string
	pageSize int
	usePIT   bool
	pit      string
	// closeCtx is what the point-in-time is closed under: no deadline
	// (the caller's may be spent), the origin of the scan that opened it.
	closeCtx context.Context
	after    []any
	done     bool
}

// DefaultPageSize is the number of hits per search request.
const DefaultPageSize = 1000

// ListDir scans the children of dir in name order. It needs no point-in-time:
// names are unique within a directory, so search_after on the name alone
// returns each entry at most once, and entries that exist throughout are
// returned, which is all POSIX asks of readdir.
func (s *Store) ListDir(dir string, pageSize int) *Scanner {
	return &Scanner{s: s, query: map[string]any{"term": map[string]any{"parent": encodeText(dir)}},
		sortKey: "name", pageSize: pageSize}
}

// ScanTree scans root and every path below it in path order, over a
// point-in-time, so that the scan sees one consistent snapshot of the index
// however long it takes.
func (s *Store) ScanTree(root string, pageSize int) *Scanner {
	return &Scanner{s: s, query: treeQuery(root), sortKey: "path", pageSize: pageSize, usePIT: true}
}

// treeQuery matches root's path document and every one below it.
func treeQuery(root string) map[string]any {
	if root == "/" {
		return map[string]any{"match_all": map[string]any{}}
	}
	enc := encodeText(root)
	return map[string]any{"bool": map[string]any{"should": []any{
		map[string]any{"term": map[string]any{"path": enc}},
		map[string]any{"prefix": map[string]any{"path": enc + "/"}},
	}, "minimum_should_match": 1}}
}

// Unsnapshotted makes a scan that has not begun read without a
// point-in-time (two round trips fewer): for a subtree that the caller's
// locks keep from changing, whose paths, unique and sorted, search_after
// then returns each once, all of them.
func (sc *Scanner) Unsnapshotted() *Scanner {
	sc.usePIT = false
	return sc
}

// ScanOp scans the path documents that carry the intent of operation op.
func (s *Store) ScanOp(op string, pageSize int) *Scanner {
	return &Scanner{s: s, query: map[string]any{"term": map[string]any{"op": op}},
		sortKey: "path", pageSize: pageSize, usePIT: true}
}

// ScanIntents scans every path document that carries an intent: those of
// renames in flight, and strays (late writes of a fenced or timed-out
// request) that the sweeper resolves. Without a point-in-time: a document
// changed meanwhile is looked at again on the next sweep.
func (s *Store) ScanIntents(pageSize int) *Scanner {
	return &Scanner{s: s, query: map[string]any{"exists": map[string]any{"field": "op"}},
		sortKey: "path", pageSize: pageSize}
}

// Next returns the next page, or (nil, nil) at the end. Documents that fail
// to decode are returned as errors in bad, the scan goes on: one corrupt
// document must not hide a whole directory.
func (sc *Scanner) Next(ctx context.Context) (page []Dentry, bad []error, err error) {
	if sc.done {
		return nil, nil, nil
	}
	if sc.pageSize <= 0 {
		sc.pageSize = DefaultPageSize
	}
	s := sc.s
	if err := sc.openPIT(ctx); err != nil {
		return nil, nil, err
	}
	req := map[string]any{
		"size":                sc.pageSize,
		"query":               sc.query,
		"sort":                []any{map[string]any{sc.sortKey: "asc"}},
		"seq_no_primary_term": true,
		"track_total_hits":    false,
	}
	path := "/" + url.PathEscape(s.idx.Paths) + "/_search"
	if sc.pit != "" {
		req["pit"] = map[string]any{"id": sc.pit, "keep_alive": "5m"}
		path = "/_search"
	}
	if sc.after != nil {
		req["search_after"] = sc.after
	}
	body, _ := json.Marshal(req)
	what := "searching " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "POST", path: path, body: body})
	if err != nil {
		return nil, nil, err
	}
	if res.status != 200 {
		return nil, nil, failure(what, res)
	}
	var out struct {
		PitID string `json:"pit_id"`
		Hits  struct {
			Hits []struct {
				ID          string          `json:"_id"`
				SeqNo       int64           `json:"_seq_no"`
				PrimaryTerm int64           `json:"_primary_term"`
				Source      json.RawMessage `json:"_source"`
				Sort        []any           `json:"sort"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return nil, nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	if out.PitID != "" {
		sc.pit = out.PitID // the id may change between pages
	}
	hits := out.Hits.Hits
	if len(hits) < sc.pageSize {
		sc.done = true
	}
	if len(hits) > 0 {
		sc.after = hits[len(hits)-1].Sort
	}
	page = make([]Dentry, 0, len(hits))
	for _, h := range hits {
		d, err := decodeDentry(h.Source, Version{SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm})
		if err == nil && h.ID != DocID(d.Path) {
			err = fmt.Errorf("holds path %q, whose id differs: %w", d.Path, ErrCorrupt)
		}
		if err != nil {
			bad = append(bad, damagedAt(s.idx.name(pathsIndex), h.ID, Version{SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm}, err))
			continue
		}
		page = append(page, d)
	}
	if sc.done {
		sc.closePIT()
	}
	return page, bad, nil
}

// openPIT takes the scan's snapshot, once, if it uses one.
func (sc *Scanner) openPIT(ctx context.Context) error {
	if !sc.usePIT || sc.pit != "" {
		return nil
	}
	s := sc.s
	what := "opening a point-in-time on " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(s.idx.Paths) + "/_pit", query: url.Values{"keep_alive": {"5m"}}})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	var pit struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(res.body, &pit); err != nil || pit.ID == "" {
		return fmt.Errorf("%s: %w", what, ErrCorrupt)
	}
	sc.pit = pit.ID
	sc.closeCtx = context.WithoutCancel(ctx)
	return nil
}

// IntentOps returns the operations named by the intents that documents of
// the scan's snapshot carry (taking the snapshot if Next has not yet):
// renames that were in flight when it was taken. A reader that resolves those documents
// later, against the operation's record as it is then, may judge a
// snapshot of one state by a record of a later one (staged new names the
// snapshot lacks, old names the rename has since removed); a reader that
// must be complete waits for these operations to end and takes a new
// snapshot. Call it before the first Next.
func (sc *Scanner) IntentOps(ctx context.Context) ([]string, error) {
	if !sc.usePIT {
		return nil, fmt.Errorf("intents of a scan without a snapshot: %w", ErrInvalid)
	}
	if err := sc.openPIT(ctx); err != nil {
		return nil, err
	}
	s := sc.s
	var ops []string
	var after any
	for {
		terms := map[string]any{"size": 1000, "sources": []any{
			map[string]any{"op": map[string]any{"terms": map[string]any{"field": "op"}}},
		}}
		if after != nil {
			terms["after"] = after
		}
		req := map[string]any{
			"size": 0, "track_total_hits": false,
			"query": map[string]any{"bool": map[string]any{"filter": []any{
				sc.query, map[string]any{"exists": map[string]any{"field": "op"}},
			}}},
			"pit":  map[string]any{"id": sc.pit, "keep_alive": "5m"},
			"aggs": map[string]any{"ops": map[string]any{"composite": terms}},
		}
		body, _ := json.Marshal(req)
		what := "listing the renames in flight in a snapshot of " + s.idx.Paths
		res, err := s.do(ctx, what, request{method: "POST", path: "/_search", body: body})
		if err != nil {
			return nil, err
		}
		if res.status != 200 {
			return nil, failure(what, res)
		}
		var out struct {
			PitID        string `json:"pit_id"`
			Aggregations struct {
				Ops struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							Op string `json:"op"`
						} `json:"key"`
					} `json:"buckets"`
				} `json:"ops"`
			} `json:"aggregations"`
		}
		if err := json.Unmarshal(res.body, &out); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
		}
		if out.PitID != "" {
			sc.pit = out.PitID
		}
		for _, b := range out.Aggregations.Ops.Buckets {
			ops = append(ops, b.Key.Op)
		}
		if len(out.Aggregations.Ops.Buckets) == 0 || out.Aggregations.Ops.AfterKey == nil {
			return ops, nil
		}
		after = out.Aggregations.Ops.AfterKey
	}
}

// Close releases the point-in-time, if any. Safe to call twice.
func (sc *Scanner) Close() {
	sc.done = true
	sc.closePIT()
}

func (sc *Scanner) closePIT() {
	if sc.pit == "" {
		return
	}
	body, _ := json.Marshal(map[string]any{"id": sc.pit})
	sc.pit = ""
	// Best effort without the caller's deadline, which may be spent: a PIT
	// left open only costs memory until its keep_alive ends.
	ctx := sc.closeCtx
	if ctx == nil {
		ctx = context.Background()
	}
	_, _ = sc.s.do(ctx, "closing a point-in-time", request{method: "DELETE", path: "/_pit", body: body})
}
