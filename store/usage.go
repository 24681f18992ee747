package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
)

// Usage is what statfs reports: the cluster's disk space and the number of
// inodes of this filesystem.
type Usage struct {
	TotalBytes int64
	FreeBytes  int64
	Inodes     int64
}

// Usage asks the data nodes for their disk space and counts the inodes.
func (s *Store) Usage(ctx context.Context) (Usage, error) {
	var u Usage
	what := "reading disk usage"
	res, err := s.do(ctx, what, request{method: "GET", path: "/_nodes/stats/fs", query: url.Values{"filter_path": {"nodes.*.fs.total"}}})
	if err != nil {
		return u, err
	}
	if res.status != 200 {
		return u, failure(what, res)
	}
	var fsStats struct {
		Nodes map[string]struct {
			FS struct {
				Total struct {
					Total     int64 `json:"total_in_bytes"`
					Available int64 `json:"available_in_bytes"`
				} `json:"total"`
			} `json:"fs"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(res.body, &fsStats); err != nil {
		return u, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	for _, n := range fsStats.Nodes {
		u.TotalBytes += n.FS.Total.Total
		u.FreeBytes += n.FS.Total.Available
	}
	what = "counting inodes"
	res, err = s.do(ctx, what, request{method: "GET", path: "/" + url.PathEscape(s.idx.Inodes) + "/_count"})
	if err != nil {
		return u, err
	}
	if res.status != 200 {
		return u, failure(what, res)
	}
	var cnt struct {
		Count int64 `json:"count"`
	}
	if err := json.Unmarshal(res.body, &cnt); err != nil {
		return u, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	u.Inodes = cnt.Count
	return u, nil
}
