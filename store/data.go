package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
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
	Sess  string  `json:"sess,omitempty"`
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

// MaxFileSize is the largest file size (and write end) esfs accepts; the
// kernel lets offsets up to 2^63-1 through, and fs/ answers EFBIG past
// this. 1 PiB: chunk numbers stay below 2^30, and a file of that size
// costs what is stored in it, never what its size says.
const MaxFileSize int64 = 1 << 50

// Data writes are fenced with external versions. Every chunk write and
// delete carries one (version_type=external: Elasticsearch applies it
// only if it is greater than the stored document's, or than a deleted
// one's while its tombstone lives, see DataGCDeletes). A version is a
// writer's data generation shifted left by DataCounterBits, plus a
// counter the writer advances with every request. Generations are
// allocated by compare-and-set on the inode document (Inode.Dgen), so a
// writer that starts later outranks every earlier one, and a request
// that its sender gave up on can never overwrite what was written after
// it, by that writer's retry or by anyone else.
const DataCounterBits = 20

// MaxDataGen is the largest generation a version can carry.
const MaxDataGen uint64 = 1<<(63-DataCounterBits) - 1

// DataVersion is the external version of request counter of a writer of
// generation gen (counter below 1<<DataCounterBits).
func DataVersion(gen, counter uint64) int64 {
	return int64(gen<<DataCounterBits | counter&(1<<DataCounterBits-1))
}

// Stamp is what every chunk written by one request carries: the
// writer's version, and its session, so that fsck tells a dead writer's
// leftovers from the unflushed data of a live one.
type Stamp struct {
	Version int64
	Session string
}

// DataGCDeletes is index.gc_deletes of the data index: how long a
// deleted chunk's version is remembered, so that a late write of an older
// version cannot bring the chunk back (past a truncation, which growing
// the file later would expose). Elasticsearch's default is 60s; every
// tombstone costs a little heap on the data nodes for that long.
const DataGCDeletes = "10m"

// Written is what a WriteChunks did: Refused lists the chunks that a
// write of a higher version already holds (the caller decides whether it
// is the later writer); Created counts the chunks that did not exist
// before (for Inode.Chunks).
type Written struct {
	Refused []int64
	Created int64
}

// WriteChunks stores whole chunks of ino (each at most ChunkSize bytes; a
// shorter chunk reads as zeros beyond its end), all with stamp st. Writes
// of different chunks are independent: a failure leaves the others
// written. err is a failure other than a refusal, after which the outcome
// of every chunk is unknown.
func (s *Store) WriteChunks(ctx context.Context, ino uint64, chunks map[int64][]byte, st Stamp) (w Written, err error) {
	if len(chunks) == 0 {
		return w, nil
	}
	ops := make([]BulkOp, 0, len(chunks))
	nums := make([]int64, 0, len(chunks))
	for n, data := range chunks {
		o, err := s.OpWriteChunk(ino, n, data, st)
		if err != nil {
			return w, err
		}
		ops = append(ops, o)
		nums = append(nums, n)
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return w, err
	}
	for i, r := range res {
		switch {
		case r.Err == nil:
			if r.Created {
				w.Created++
			}
		case errors.Is(r.Err, ErrConflict):
			w.Refused = append(w.Refused, nums[i])
		default:
			return Written{}, r.Err
		}
	}
	return w, nil
}

// OpWriteChunk stores chunk n of ino (at most ChunkSize bytes) with
// stamp st.
func (s *Store) OpWriteChunk(ino uint64, n int64, data []byte, st Stamp) (BulkOp, error) {
	if s.chunkSize > 0 && int64(len(data)) > s.chunkSize {
		return BulkOp{}, fmt.Errorf("chunk %d of inode %d has %d bytes, more than the chunk size %d: %w", n, ino, len(data), s.chunkSize, ErrInvalid)
	}
	if st.Version <= 0 {
		return BulkOp{}, fmt.Errorf("writing chunk %d of inode %d without a data version: %w", n, ino, ErrInvalid)
	}
	o := BulkOp{action: "index", index: s.idx.Data, id: chunkID(ino, n), extVersion: st.Version,
		what: fmt.Sprintf("writing chunk %d of inode %d", n, ino)}
	var hb bytes.Buffer
	hb.WriteString(`{"ino":` + strconv.FormatUint(ino, 10) + `,"chunk":` + strconv.FormatInt(n, 10))
	if st.Session != "" {
		hb.WriteString(`,"sess":`)
		writeJSONString(&hb, st.Session)
	}
	head := hb.String()
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

// deleteByIDLimit: a range of at most this many chunks is deleted by id,
// one bulk item each whether stored or not (which also leaves a
// tombstone against late writes of every one of them); a larger range is
// deleted by finding the stored chunks, so that its cost follows what is
// stored and not the size.
const deleteByIDLimit = 256

// DeleteChunks removes chunks first..last of ino with data version
// version, and returns how many it removed; absent ones are fine, and so
// are chunks a write of a higher version holds (that write is later, and
// stays). A range of more than deleteByIDLimit chunks is found by search
// after a refresh of the data index, and then every stored chunk from
// first on goes, past last too.
func (s *Store) DeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (deleted int64, err error) {
	if last < first {
		return 0, nil
	}
	if version <= 0 {
		return 0, fmt.Errorf("deleting chunks of inode %d without a data version: %w", ino, ErrInvalid)
	}
	if last-first < deleteByIDLimit {
		nums := make([]int64, 0, last-first+1)
		for n := first; n <= last; n++ {
			nums = append(nums, n)
		}
		return s.deleteChunkNums(ctx, ino, nums, version)
	}
	if err := s.RefreshData(ctx); err != nil {
		return 0, err
	}
	from := first
	for {
		nums, err := s.storedChunks(ctx, ino, from, DefaultPageSize)
		if err != nil {
			return deleted, err
		}
		if len(nums) == 0 {
			return deleted, nil
		}
		n, err := s.deleteChunkNums(ctx, ino, nums, version)
		deleted += n
		if err != nil || len(nums) < DefaultPageSize {
			return deleted, err
		}
		from = nums[len(nums)-1] + 1
	}
}

func (s *Store) deleteChunkNums(ctx context.Context, ino uint64, nums []int64, version int64) (deleted int64, err error) {
	ops := make([]BulkOp, 0, len(nums))
	for _, n := range nums {
		ops = append(ops, BulkOp{action: "delete", index: s.idx.Data, id: chunkID(ino, n), extVersion: version,
			what: fmt.Sprintf("deleting chunk %d of inode %d", n, ino)})
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return 0, err
	}
	for _, r := range res {
		switch {
		case r.Deleted:
			deleted++
		case r.Err != nil && !isNotFound(r.Err) && !errors.Is(r.Err, ErrConflict):
			return deleted, r.Err
		}
	}
	return deleted, nil
}

// StoredChunks returns, in order, the numbers of at most limit chunks of
// ino stored from chunk from on. Search is near-realtime: refresh with
// RefreshData first when the answer must include the latest writes.
func (s *Store) StoredChunks(ctx context.Context, ino uint64, from int64, limit int) ([]int64, error) {
	return s.storedChunks(ctx, ino, from, limit)
}

// RefreshData makes every acknowledged chunk write visible to search.
func (s *Store) RefreshData(ctx context.Context) error {
	return s.refresh(ctx, "refreshing "+s.idx.Data, s.idx.Data)
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
	body, _ := json.Marshal(req)
	what := fmt.Sprintf("listing the stored chunks of inode %d from %d", ino, from)
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(s.idx.Data) + "/_search", body: body})
	if err != nil {
		return nil, err
	}
	if res.status != 200 {
		return nil, failure(what, res)
	}
	var out struct {
		Hits struct {
			Hits []struct {
				Sort []json.Number `json:"sort"`
			} `json:"hits"`
		} `json:"hits"`
	}
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
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

// decodeChunkFast decodes a chunk document in the exact form OpWriteChunk
// writes ({"ino":N,"chunk":N,"sess":"ID","data":"BASE64"}, sess optional), which Elasticsearch returns
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
	if r, hasSess := bytes.CutPrefix(rest, []byte(`"sess":"`)); hasSess {
		i := bytes.IndexByte(r, '"')
		if i < 0 || bytes.IndexByte(r[:i], '\\') >= 0 || !bytes.HasPrefix(r[i:], []byte(`",`)) {
			return c, false
		}
		c.Sess, rest = string(r[:i]), r[i+2:]
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

// ChunkRef is one stored chunk without its bytes, as fsck lists them.
type ChunkRef struct {
	Ino   uint64
	Chunk int64
	// Sess is the session of the chunk's writer ("" for chunks written
	// before esfs recorded it).
	Sess string
	Ver  Version
}

// ChunkScanner pages through every chunk of the data index in (inode,
// chunk) order, reading doc values only: it never loads chunk bytes.
// Near-realtime: refresh first (RefreshAll).
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
	body, _ := json.Marshal(req)
	what := "scanning data chunks"
	res, err := sc.s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(sc.s.idx.Data) + "/_search", body: body})
	if err != nil {
		return nil, err
	}
	if res.status != 200 {
		return nil, failure(what, res)
	}
	var out struct {
		Hits struct {
			Hits []struct {
				SeqNo       int64               `json:"_seq_no"`
				PrimaryTerm int64               `json:"_primary_term"`
				Sort        []json.Number       `json:"sort"`
				Fields      map[string][]string `json:"fields"`
			} `json:"hits"`
		} `json:"hits"`
	}
	// Numbers stay numbers: inode numbers do not survive float64.
	dec := json.NewDecoder(bytes.NewReader(res.body))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
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
		r := ChunkRef{Ino: ino, Chunk: n, Ver: Version{SeqNo: h.SeqNo, PrimaryTerm: h.PrimaryTerm}}
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

// DeleteChunkRefs deletes the chunks refs names, each only if it is still
// as listed (fsck's repair: a chunk written since is someone's data).
// errs holds each chunk's outcome (ErrConflict: changed since).
func (s *Store) DeleteChunkRefs(ctx context.Context, refs []ChunkRef) (errs []error, err error) {
	ops := make([]BulkOp, 0, len(refs))
	for _, r := range refs {
		if !r.Ver.Known() {
			return nil, fmt.Errorf("deleting chunk %d of inode %d without a version: %w", r.Chunk, r.Ino, ErrInvalid)
		}
		ops = append(ops, BulkOp{action: "delete", index: s.idx.Data, id: chunkID(r.Ino, r.Chunk), ifVer: r.Ver,
			what: fmt.Sprintf("deleting chunk %d of inode %d", r.Chunk, r.Ino)})
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return nil, err
	}
	errs = make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	return errs, nil
}
