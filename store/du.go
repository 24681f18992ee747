package store

// What esfs du asks of the indices: the shape of a tree from the path
// index (its directories, how many entries each lists), and sums over
// the inode index by directory, so that a tree's disk usage costs a few
// requests whatever the number of its files. Near-realtime: refresh the
// path and inode indices first (SearchedPaths|SearchedInodes).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
)

// duPage is how many hits, or composite buckets, one request of du's
// reads.
const duPage = 10000

// duTermsBatch bounds the terms of one terms query (index.max_terms_count
// is 65,536).
const duTermsBatch = 10000

// TreeShape is what the path index says of the tree at a root.
type TreeShape struct {
	// Dirs are the root (if a directory) and every directory below it,
	// in path order.
	Dirs []Dentry
	// Entries counts the path documents at or below the root by their
	// directory (the root's own in its parent's): what a listing of each
	// directory holds, but for renames in flight.
	Entries map[string]int64
	// Intents counts the path documents at or below the root that carry
	// an intent: renames in flight, which only a View resolves.
	Intents int64
}

// TreeShape reads the shape of the tree at root: its directories and its
// counts, side by side. Apart: the counts are an aggregation alone
// (size 0), which the shards' request cache keeps until the index
// changes.
func (s *Store) TreeShape(ctx context.Context, root string) (TreeShape, error) {
	var sh TreeShape
	var dirsErr, countErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sh.Dirs, dirsErr = s.treeDirs(ctx, root)
	}()
	sh.Entries, sh.Intents, countErr = s.treeCounts(ctx, root)
	wg.Wait()
	return sh, errors.Join(dirsErr, countErr)
}

// treeDirs lists root, if a directory, and every directory below it.
func (s *Store) treeDirs(ctx context.Context, root string) ([]Dentry, error) {
	var dirs []Dentry
	q := map[string]any{"bool": map[string]any{"filter": []any{treeQuery(root), map[string]any{"term": map[string]any{"type": typeNames[TypeDir]}}}}}
	var after []any
	for {
		req := map[string]any{"size": duPage, "query": q, "sort": []any{map[string]any{"path": "asc"}}, "track_total_hits": false}
		if after != nil {
			req["search_after"] = after
		}
		var out struct {
			Hits struct {
				Hits []searchHit `json:"hits"`
			} `json:"hits"`
		}
		what := "listing the directories of " + root
		if err := s.search(ctx, what, s.idx.Paths, req, &out); err != nil {
			return nil, err
		}
		for _, h := range out.Hits.Hits {
			d, err := decodeDentry(h.Source, h.version())
			if err != nil {
				return nil, fmt.Errorf("%s: document %s: %w", what, h.ID, err)
			}
			dirs = append(dirs, d)
		}
		if len(out.Hits.Hits) < duPage {
			return dirs, nil
		}
		after = out.Hits.Hits[len(out.Hits.Hits)-1].Sort
	}
}

// treeCounts counts the path documents at or below root by directory,
// and those of them that carry an intent.
func (s *Store) treeCounts(ctx context.Context, root string) (entries map[string]int64, intents int64, err error) {
	entries = map[string]int64{}
	var afterKey map[string]any
	for first := true; ; first = false {
		comp := map[string]any{"size": duPage, "sources": []any{
			map[string]any{"parent": map[string]any{"terms": map[string]any{"field": "parent"}}},
		}}
		if afterKey != nil {
			comp["after"] = afterKey
		}
		aggs := map[string]any{"parents": map[string]any{"composite": comp}}
		if first {
			aggs["intents"] = map[string]any{"filter": map[string]any{"exists": map[string]any{"field": "op"}}}
		}
		req := map[string]any{"size": 0, "query": treeQuery(root), "aggs": aggs, "track_total_hits": false}
		var out struct {
			Aggregations struct {
				Parents struct {
					AfterKey map[string]any `json:"after_key"`
					Buckets  []struct {
						Key struct {
							Parent string `json:"parent"`
						} `json:"key"`
						DocCount int64 `json:"doc_count"`
					} `json:"buckets"`
				} `json:"parents"`
				Intents struct {
					DocCount int64 `json:"doc_count"`
				} `json:"intents"`
			} `json:"aggregations"`
		}
		what := "counting the entries of the directories of " + root
		if err := s.search(ctx, what, s.idx.Paths, req, &out); err != nil {
			return nil, 0, err
		}
		if first {
			intents = out.Aggregations.Intents.DocCount
		}
		for _, b := range out.Aggregations.Parents.Buckets {
			p, err := decodeText(b.Key.Parent)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", what, err)
			}
			entries[p] = b.DocCount
		}
		afterKey = out.Aggregations.Parents.AfterKey
		if len(out.Aggregations.Parents.Buckets) < duPage || afterKey == nil {
			return entries, intents, nil
		}
	}
}

// FileSum sums the files of one directory.
type FileSum struct {
	Count  int64 // files
	Blocks int64 // their st_blocks (see Inode.Blocks)
	Bytes  int64 // their sizes
}

// FileSums sums, for each directory of dirs, the inodes that are not
// directories, have one link, and name the directory in their Parents:
// the files a listing of it holds, but for those whose Parents are not
// kept (see Inode.Parents), which the caller tells by counting its
// entries. Inodes without the blocks field (written by an esfs before
// it) are left out, for the caller to read (Unsummed).
func (s *Store) FileSums(ctx context.Context, dirs []uint64) (map[uint64]FileSum, error) {
	sums := make(map[uint64]FileSum, len(dirs))
	for from := 0; from < len(dirs); from += duTermsBatch {
		batch := dirs[from:min(from+duTermsBatch, len(dirs))]
		in := make(map[uint64]bool, len(batch))
		for _, d := range batch {
			in[d] = true
		}
		q := map[string]any{"bool": map[string]any{
			"filter": []any{
				map[string]any{"terms": map[string]any{"parents": batch}},
				map[string]any{"term": map[string]any{"nlink": 1}},
				map[string]any{"exists": map[string]any{"field": "blocks"}},
			},
			"must_not": []any{map[string]any{"term": map[string]any{"type": typeNames[TypeDir]}}},
		}}
		var afterKey map[string]any
		for {
			comp := map[string]any{"size": duPage, "sources": []any{
				map[string]any{"dir": map[string]any{"terms": map[string]any{"field": "parents"}}},
			}}
			if afterKey != nil {
				comp["after"] = afterKey
			}
			req := map[string]any{"size": 0, "query": q, "track_total_hits": false, "aggs": map[string]any{
				"dirs": map[string]any{"composite": comp, "aggs": map[string]any{
					"blocks": map[string]any{"sum": map[string]any{"field": "blocks"}},
					"bytes":  map[string]any{"sum": map[string]any{"field": "size"}},
				}},
			}}
			var out struct {
				Aggregations struct {
					Dirs struct {
						AfterKey map[string]any `json:"after_key"`
						Buckets  []struct {
							Key struct {
								Dir json.Number `json:"dir"`
							} `json:"key"`
							DocCount int64 `json:"doc_count"`
							Blocks   struct {
								Value json.Number `json:"value"`
							} `json:"blocks"`
							Bytes struct {
								Value json.Number `json:"value"`
							} `json:"bytes"`
						} `json:"buckets"`
					} `json:"dirs"`
				} `json:"aggregations"`
			}
			what := fmt.Sprintf("summing the files of %d directories", len(batch))
			if err := s.search(ctx, what, s.idx.Inodes, req, &out); err != nil {
				return nil, err
			}
			for _, b := range out.Aggregations.Dirs.Buckets {
				dir, err := strconv.ParseUint(string(b.Key.Dir), 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: directory %q: %w", what, b.Key.Dir, ErrCorrupt)
				}
				if !in[dir] {
					continue // another directory of a file's Parents: its own batch sums it
				}
				blocks, err := exactSum(b.Blocks.Value)
				if err != nil {
					return nil, fmt.Errorf("%s: blocks of directory %d: %w", what, dir, err)
				}
				bytes, err := exactSum(b.Bytes.Value)
				if err != nil {
					return nil, fmt.Errorf("%s: bytes of directory %d: %w", what, dir, err)
				}
				sums[dir] = FileSum{Count: b.DocCount, Blocks: blocks, Bytes: bytes}
			}
			afterKey = out.Aggregations.Dirs.AfterKey
			if len(out.Aggregations.Dirs.Buckets) < duPage || afterKey == nil {
				break
			}
		}
	}
	return sums, nil
}

// ErrInexactSum: a sum of the inode index is past what Elasticsearch
// adds exactly (it sums in a double: exact up to 2^53); the caller adds
// the values itself.
var ErrInexactSum = errors.New("a sum past 2^53, which Elasticsearch does not add exactly")

// exactSum reads a sum aggregation's value.
func exactSum(v json.Number) (int64, error) {
	f, err := v.Float64()
	if err != nil || f < 0 || f != float64(int64(f)) {
		return 0, fmt.Errorf("sum %q: %w", v, ErrCorrupt)
	}
	if f >= 1<<53 {
		return 0, fmt.Errorf("sum %q: %w", v, ErrInexactSum)
	}
	return int64(f), nil
}

// Unsummed returns the inodes that are not directories, name one of dirs
// in their Parents, and that FileSums leaves out or cannot place: files
// with several links (which du counts once, where it meets them first),
// and inodes without the blocks field.
func (s *Store) Unsummed(ctx context.Context, dirs []uint64) ([]Inode, error) {
	return scanBatches(ctx, dirs, func(batch []uint64) pager[Inode] {
		return &InodeScanner{s: s, query: map[string]any{"bool": map[string]any{
			"filter": []any{map[string]any{"terms": map[string]any{"parents": batch}}},
			"should": []any{
				map[string]any{"range": map[string]any{"nlink": map[string]any{"gt": 1}}},
				map[string]any{"bool": map[string]any{"must_not": []any{map[string]any{"exists": map[string]any{"field": "blocks"}}}}},
			},
			"minimum_should_match": 1,
			"must_not":             []any{map[string]any{"term": map[string]any{"type": typeNames[TypeDir]}}},
		}}}
	})
}

// PathsOf returns the path documents at or below root that name one of
// inos, in path order.
func (s *Store) PathsOf(ctx context.Context, inos []uint64, root string) ([]Dentry, error) {
	return scanBatches(ctx, inos, func(batch []uint64) pager[Dentry] {
		q := map[string]any{"bool": map[string]any{"filter": []any{
			treeQuery(root), map[string]any{"terms": map[string]any{"ino": batch}},
		}}}
		return &Scanner{s: s, query: q, sortKey: "path", pageSize: duPage}
	})
}

// PathsIn returns the path documents in directories dirs (by path), in
// path order.
func (s *Store) PathsIn(ctx context.Context, dirs []string) ([]Dentry, error) {
	return scanBatches(ctx, dirs, func(batch []string) pager[Dentry] {
		enc := make([]string, len(batch))
		for i, d := range batch {
			enc[i] = encodeText(d)
		}
		return &Scanner{s: s, query: map[string]any{"terms": map[string]any{"parent": enc}}, sortKey: "path", pageSize: duPage}
	})
}

// pager is a scan read page by page (Scanner, InodeScanner).
type pager[T any] interface {
	Next(ctx context.Context) (page []T, bad []error, err error)
}

// scanBatches runs the scan that scan makes of each duTermsBatch of keys
// (a terms query takes that many at most) and returns all it finds. A
// damaged document fails it: du's sums must be whole or not be.
func scanBatches[K, T any](ctx context.Context, keys []K, scan func(batch []K) pager[T]) ([]T, error) {
	var out []T
	for from := 0; from < len(keys); from += duTermsBatch {
		sc := scan(keys[from:min(from+duTermsBatch, len(keys))])
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil {
				return nil, err
			}
			if len(bad) > 0 {
				return nil, bad[0]
			}
			if page == nil {
				break
			}
			out = append(out, page...)
		}
	}
	return out, nil
}
