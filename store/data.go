package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// chunkDoc is the JSON of one data chunk. encoding/json writes []byte as
// base64, which is what a "binary" field takes.
//
// A chunk that is text (valid UTF-8 without NUL bytes) is stored as a
// string in "text" instead, which Elasticsearch analyses: that is what
// `esfs search` finds, at no cost in space (base64 would be a third
// larger). Either way the bytes read back are the bytes written.
type chunkDoc struct {
	Ino   uint64  `json:"ino"`
	Chunk int64   `json:"chunk"`
	Data  []byte  `json:"data,omitempty"`
	Text  *string `json:"text,omitempty"`
}

func (c chunkDoc) bytes() []byte {
	if c.Text != nil {
		return []byte(*c.Text)
	}
	return c.Data
}

// isText: bytes that can travel as a JSON string unchanged and are worth
// indexing. A text file whose chunk boundary splits a multi-byte character
// has that chunk stored as binary (and not searchable).
func isText(b []byte) bool {
	return len(b) > 0 && bytes.IndexByte(b, 0) < 0 && utf8.Valid(b)
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
		c, ok := decodeChunkFast(g.Source)
		if !ok {
			if err := json.Unmarshal(g.Source, &c); err != nil {
				return nil, fmt.Errorf("%s: chunk %d: %w: %v", what, first+int64(i), ErrCorrupt, err)
			}
		}
		data := c.bytes()
		if c.Ino != ino || c.Chunk != first+int64(i) || (s.chunkSize > 0 && int64(len(data)) > s.chunkSize) {
			return nil, fmt.Errorf("%s: chunk %d holds inode %d chunk %d of %d bytes: %w", what, first+int64(i), c.Ino, c.Chunk, len(data), ErrCorrupt)
		}
		out[c.Chunk] = data
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
		o, err := s.OpWriteChunk(ino, n, data)
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

// OpWriteChunk stores chunk n of ino (at most ChunkSize bytes).
func (s *Store) OpWriteChunk(ino uint64, n int64, data []byte) (BulkOp, error) {
	if s.chunkSize > 0 && int64(len(data)) > s.chunkSize {
		return BulkOp{}, fmt.Errorf("chunk %d of inode %d has %d bytes, more than the chunk size %d: %w", n, ino, len(data), s.chunkSize, ErrInvalid)
	}
	o := BulkOp{action: "index", index: s.idx.Data, id: chunkID(ino, n), what: fmt.Sprintf("writing chunk %d of inode %d", n, ino)}
	head := `{"ino":` + strconv.FormatUint(ino, 10) + `,"chunk":` + strconv.FormatInt(n, 10)
	if s.textChunks && isText(data) {
		o.docLen = len(head) + len(data)*6/5 + 16 // escapes are rare in text
		o.encode = func(b *bytes.Buffer) {
			b.WriteString(head)
			b.WriteString(`,"text":`)
			writeJSONString(b, string(data))
			b.WriteByte('}')
		}
		return o, nil
	}
	o.docLen = len(head) + base64.StdEncoding.EncodedLen(len(data)) + 16
	o.encode = func(b *bytes.Buffer) {
		b.WriteString(head)
		b.WriteString(`,"data":"`)
		enc := base64.NewEncoder(base64.StdEncoding, b)
		_, _ = enc.Write(data)
		_ = enc.Close()
		b.WriteString(`"}`)
	}
	return o, nil
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

// decodeChunkFast decodes a chunk document in the exact form OpWriteChunk
// writes ({"ino":N,"chunk":N,"data":"BASE64"}), which Elasticsearch returns
// byte for byte: one base64 pass instead of encoding/json's validation and
// decoding passes over a megabyte. Anything else (a text chunk with
// escapes, a document written otherwise) is left to encoding/json (ok false).
func decodeChunkFast(src []byte) (chunkDoc, bool) {
	var c chunkDoc
	rest, ok := bytes.CutPrefix(src, []byte(`{"ino":`))
	if !ok {
		return c, false
	}
	num := func(b []byte, end byte) (uint64, []byte, bool) {
		i := bytes.IndexByte(b, end)
		if i <= 0 {
			return 0, nil, false
		}
		v, err := strconv.ParseUint(string(b[:i]), 10, 64)
		return v, b[i+1:], err == nil
	}
	ino, rest, ok := num(rest, ',')
	if !ok {
		return c, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`"chunk":`)); !ok {
		return c, false
	}
	chunk, rest, ok := num(rest, ',')
	if !ok || chunk > 1<<62 {
		return c, false
	}
	field := "data"
	if r, isText := bytes.CutPrefix(rest, []byte(`"text":"`)); isText {
		rest, field = r, "text"
	} else if rest, ok = bytes.CutPrefix(rest, []byte(`"data":"`)); !ok {
		return c, false
	}
	body, ok := bytes.CutSuffix(rest, []byte(`"}`))
	if !ok || bytes.IndexByte(body, '"') >= 0 || bytes.IndexByte(body, '\\') >= 0 {
		return c, false // escapes (text), or not our form
	}
	c.Ino, c.Chunk = ino, int64(chunk)
	if field == "text" {
		if !utf8.Valid(body) {
			return c, false
		}
		t := string(body)
		c.Text = &t
		return c, true
	}
	c.Data = make([]byte, base64.StdEncoding.DecodedLen(len(body)))
	n, err := base64.StdEncoding.Decode(c.Data, body)
	if err != nil {
		return c, false
	}
	c.Data = c.Data[:n]
	return c, true
}
