package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
)

// StoredChunks returns, in order, the numbers of at most limit chunks of
// ino stored from chunk from on. Search is near-realtime: refresh with
// Refresh(SearchedData) first when the answer must include the latest writes.
func (s *Store) StoredChunks(ctx context.Context, ino uint64, from int64, limit int) ([]int64, error) {
	return s.storedChunks(ctx, ino, from, limit)
}

func (s *Store) storedChunks(ctx context.Context, ino uint64, from int64, limit int) ([]int64, error) {
	req := map[string]any{
		"size": limit,
		"query": map[string]any{"bool": map[string]any{"filter": []any{
			map[string]any{"term": map[string]any{"ino": ino}},
			map[string]any{"range": map[string]any{"chunk": map[string]any{"gte": from}}},
		}}},
		// The sort value is the chunk number: no _source, so the
		// megabytes of a chunk are never sent back to learn its number.
		"_source": false, "sort": []any{map[string]any{"chunk": "asc"}}, "track_total_hits": false,
	}
	what := fmt.Sprintf("listing the stored chunks of inode %d from %d", ino, from)
	var out struct {
		Hits struct {
			Hits []struct {
				Sort []json.Number `json:"sort"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := s.search(ctx, what, s.idx.Data, req, &out); err != nil {
		return nil, err
	}
	nums := make([]int64, 0, len(out.Hits.Hits))
	for _, h := range out.Hits.Hits {
		if len(h.Sort) != 1 {
			return nil, fmt.Errorf("%s: a hit without its chunk number: %w", what, ErrCorrupt)
		}
		n, err := strconv.ParseInt(string(h.Sort[0]), 10, 64)
		if err != nil || n < from {
			return nil, fmt.Errorf("%s: chunk number %q: %w", what, h.Sort[0], ErrCorrupt)
		}
		nums = append(nums, n)
	}
	return nums, nil
}

// ChunkRef is one stored chunk without its bytes, as fsck lists them.
type ChunkRef struct {
	Ino   uint64
	Chunk int64
	// Sess is the session of the chunk's writer ("" for chunks written
	// before esfs recorded it).
	Sess string
	Ver  Version
	// ID is the document's id, which a damaged document may hold apart
	// from "<Ino>.<Chunk>" (readers find chunks by that id).
	ID string
}

// Consistent reports whether the chunk is at the id its inode and number
// make, with a number a file can have: readers find no other.
func (r ChunkRef) Consistent() bool {
	return r.Chunk >= 0 && (r.ID == "" || r.ID == chunkID(r.Ino, r.Chunk))
}

// ChunkScanner pages through every chunk of the data index in (inode,
// chunk) order, reading doc values only: it never loads chunk bytes.
// Near-realtime: refresh first (Refresh(SearchedAll)).
type ChunkScanner struct {
	s     *Store
	after []json.Number
	done  bool
}

// ScanChunks starts a scan of all data chunks.
func (s *Store) ScanChunks() *ChunkScanner { return &ChunkScanner{s: s} }

// Next returns the next page of chunks, or nil at the end.
func (sc *ChunkScanner) Next(ctx context.Context) ([]ChunkRef, error) {
	if sc.done {
		return nil, nil
	}
	req := map[string]any{
		"size": DefaultPageSize, "query": map[string]any{"match_all": map[string]any{}},
		"_source": false, "docvalue_fields": []string{"sess"}, "seq_no_primary_term": true,
		"sort":             []any{map[string]any{"ino": "asc"}, map[string]any{"chunk": "asc"}},
		"track_total_hits": false,
	}
	if sc.after != nil {
		req["search_after"] = sc.after
	}
	what := "scanning data chunks"
	var out struct {
		Hits struct {
			Hits []struct {
				ID          string              `json:"_id"`
				SeqNo       int64               `json:"_seq_no"`
				PrimaryTerm int64               `json:"_primary_term"`
				Sort        []json.Number       `json:"sort"`
				Fields      map[string][]string `json:"fields"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := sc.s.search(ctx, what, sc.s.idx.Data, req, &out); err != nil {
		return nil, err
	}
	hits := out.Hits.Hits
	if len(hits) < DefaultPageSize {
		sc.done = true
	}
	page := make([]ChunkRef, 0, len(hits))
	for _, h := range hits {
		if len(h.Sort) != 2 {
			return nil, fmt.Errorf("%s: a hit without its sort values: %w", what, ErrCorrupt)
		}
		ino, err1 := strconv.ParseUint(string(h.Sort[0]), 10, 64)
		n, err2 := strconv.ParseInt(string(h.Sort[1]), 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s: sort values %v: %w", what, h.Sort, ErrCorrupt)
		}
		r := ChunkRef{Ino: ino, Chunk: n, Ver: Version{SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm}, ID: h.ID}
		if v := h.Fields["sess"]; len(v) > 0 {
			r.Sess = v[0]
		}
		page = append(page, r)
	}
	if len(hits) > 0 {
		sc.after = hits[len(hits)-1].Sort
	}
	return page, nil
}

// DeleteChunkRef deletes the chunk ref names if it is still as listed
// (fsck's repair: a chunk written since is someone's data; ErrConflict).
func DeleteChunkRef(r ChunkRef) BulkOp {
	if !r.Ver.Known() {
		return refused(fmt.Errorf("deleting chunk %d of inode %d without a version: %w", r.Chunk, r.Ino, ErrInvalid))
	}
	id := r.ID
	if id == "" {
		id = chunkID(r.Ino, r.Chunk)
	}
	return newOp("delete", dataIndex, id, r.Ver, nil, fmt.Sprintf("deleting chunk %d of inode %d", r.Chunk, r.Ino))
}
