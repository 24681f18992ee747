package store

import (
	"context"
	"encoding/json"
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
	if err := json.Unmarshal(res.body, &out); err != nil {
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
