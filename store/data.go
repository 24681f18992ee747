package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// chunkDoc is the JSON of one data chunk. encoding/json writes []byte as
// base64, which is what a "binary" field takes.
type chunkDoc struct {
	Ino   uint64 `json:"ino"`
	Chunk int64  `json:"chunk"`
	Data  []byte `json:"data"`
}

// ReadChunks reads chunks first..last (inclusive) of ino in one round trip.
// Absent chunks (holes of a sparse file, or never written) are absent from
// the map; the caller reads them as zeros up to the file size.
func (s *Store) ReadChunks(ctx context.Context, ino uint64, first, last int64) (map[int64][]byte, error) {
	if last < first {
		return map[int64][]byte{}, nil
	}
	ids := make([]string, 0, last-first+1)
	for n := first; n <= last; n++ {
		ids = append(ids, chunkID(ino, n))
	}
	what := fmt.Sprintf("reading chunks %d-%d of inode %d", first, last, ino)
	docs, err := s.mget(ctx, s.idx.Data, ids, what)
	if err != nil {
		return nil, err
	}
	out := make(map[int64][]byte, len(docs))
	for i, g := range docs {
		if !g.Found {
			continue
		}
		var c chunkDoc
		if err := json.Unmarshal(g.Source, &c); err != nil {
			return nil, fmt.Errorf("%s: chunk %d: %w: %v", what, first+int64(i), ErrCorrupt, err)
		}
		if c.Ino != ino || c.Chunk != first+int64(i) || (s.chunkSize > 0 && int64(len(c.Data)) > s.chunkSize) {
			return nil, fmt.Errorf("%s: chunk %d holds inode %d chunk %d of %d bytes: %w", what, first+int64(i), c.Ino, c.Chunk, len(c.Data), ErrCorrupt)
		}
		out[c.Chunk] = c.Data
	}
	return out, nil
}

// WriteChunks stores whole chunks of ino (each at most ChunkSize bytes; a
// shorter chunk reads as zeros beyond its end). Writes of different chunks
// are independent: a failure leaves the others written.
func (s *Store) WriteChunks(ctx context.Context, ino uint64, chunks map[int64][]byte) error {
	if len(chunks) == 0 {
		return nil
	}
	ops := make([]BulkOp, 0, len(chunks))
	for n, data := range chunks {
		if s.chunkSize > 0 && int64(len(data)) > s.chunkSize {
			return fmt.Errorf("chunk %d of inode %d has %d bytes, more than the chunk size %d: %w", n, ino, len(data), s.chunkSize, ErrInvalid)
		}
		o, err := s.op("index", s.idx.Data, chunkID(ino, n), Version{}, chunkDoc{Ino: ino, Chunk: n, Data: data},
			fmt.Sprintf("writing chunk %d of inode %d", n, ino))
		if err != nil {
			return err
		}
		ops = append(ops, o)
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}

// DeleteChunks removes chunks first..last of ino; absent ones are fine.
func (s *Store) DeleteChunks(ctx context.Context, ino uint64, first, last int64) error {
	if last < first {
		return nil
	}
	ops := make([]BulkOp, 0, last-first+1)
	for n := first; n <= last; n++ {
		ops = append(ops, BulkOp{action: "delete", index: s.idx.Data, id: chunkID(ino, n),
			what: fmt.Sprintf("deleting chunk %d of inode %d", n, ino)})
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil && !isNotFound(r.Err) {
			return r.Err
		}
	}
	return nil
}
