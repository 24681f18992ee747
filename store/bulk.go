package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
)

// BulkOp is one item of a Bulk: build it with the Op* constructors.
type BulkOp struct {
	action string // "create", "index" or "delete"
	index  string
	id     string
	ifVer  Version
	// extVersion, if set, makes the item apply only if it is greater
	// than the stored document's version (version_type=external): data
	// chunks, see DataVersion.
	extVersion int64
	doc        []byte // the source line, nil for delete
	// encode, if set, writes the source line instead of doc, and docLen
	// is its size: a data chunk is encoded straight into the request
	// body, not kept as a second, base64 copy until its batch is sent.
	encode func(*bytes.Buffer)
	docLen int
	what   string // names the item in errors
	// retryOnConflict lets Elasticsearch re-apply a partial update itself.
	retryOnConflict int
}

// BulkResult is what happened to one BulkOp. Err wraps ErrExists, ErrConflict,
// ErrNotFound (delete of a missing document) or ErrUnavailable (429 or 5xx:
// not applied, or unknown; the caller decides whether to re-read and retry).
type BulkResult struct {
	Ver Version
	Err error
	// Created: an index item made a new document (rather than replacing
	// one); Deleted: a delete item removed one.
	Created, Deleted bool
}

// Bulk limits: one request carries at most maxBulkBytes (Elasticsearch's
// default http.max_content_length is 100 MB; smaller requests keep latency and
// memory low) and at most bulkWorkers requests are in flight per call.
const (
	maxBulkBytes = 8 << 20
	maxBulkItems = 5000
	bulkWorkers  = 4
)

func (o BulkOp) size() int {
	if o.encode != nil {
		return o.docLen
	}
	return len(o.doc)
}

func (s *Store) op(action, index, id string, ifVer Version, doc any, what string) (BulkOp, error) {
	o := BulkOp{action: action, index: index, id: id, ifVer: ifVer, what: what}
	if doc != nil {
		b, err := json.Marshal(doc)
		if err != nil {
			return BulkOp{}, fmt.Errorf("%s: %w: %v", what, ErrInvalid, err)
		}
		o.doc = b
	}
	return o, nil
}

// OpCreateDentry: create the path document if the path is free.
func (s *Store) OpCreateDentry(d Dentry) (BulkOp, error) {
	if err := s.fillDentry(&d); err != nil {
		return BulkOp{}, err
	}
	return s.op("create", s.idx.Paths, DocID(d.Path), Version{}, encodeDentry(d), fmt.Sprintf("creating path %q", d.Path))
}

// OpPutDentry: overwrite the path document if it is still at ifVer.
func (s *Store) OpPutDentry(d Dentry, ifVer Version) (BulkOp, error) {
	if err := s.fillDentry(&d); err != nil {
		return BulkOp{}, err
	}
	if !ifVer.Known() {
		return BulkOp{}, fmt.Errorf("overwriting path %q without a version: %w", d.Path, ErrInvalid)
	}
	return s.op("index", s.idx.Paths, DocID(d.Path), ifVer, encodeDentry(d), fmt.Sprintf("updating path %q", d.Path))
}

// OpDeleteDentry: delete the path document if it is still at ifVer.
func (s *Store) OpDeleteDentry(path string, ifVer Version) (BulkOp, error) {
	if !ifVer.Known() {
		return BulkOp{}, fmt.Errorf("deleting path %q without a version: %w", path, ErrInvalid)
	}
	return s.op("delete", s.idx.Paths, DocID(path), ifVer, nil, fmt.Sprintf("deleting path %q", path))
}

// OpCreateInode: create the inode document if the number is free.
func (s *Store) OpCreateInode(n Inode) (BulkOp, error) {
	if n.Ino == 0 || n.Type == 0 {
		return BulkOp{}, fmt.Errorf("inode without number or type: %w", ErrInvalid)
	}
	return s.op("create", s.idx.Inodes, inodeID(n.Ino), Version{}, encodeInode(n), fmt.Sprintf("creating inode %d", n.Ino))
}

// OpPutInode: overwrite the inode document if it is still at ifVer.
func (s *Store) OpPutInode(n Inode, ifVer Version) (BulkOp, error) {
	if !ifVer.Known() {
		return BulkOp{}, fmt.Errorf("overwriting inode %d without a version: %w", n.Ino, ErrInvalid)
	}
	return s.op("index", s.idx.Inodes, inodeID(n.Ino), ifVer, encodeInode(n), fmt.Sprintf("updating inode %d", n.Ino))
}

// OpDeleteInode: delete the inode document if it is still at ifVer.
func (s *Store) OpDeleteInode(ino uint64, ifVer Version) (BulkOp, error) {
	if !ifVer.Known() {
		return BulkOp{}, fmt.Errorf("deleting inode %d without a version: %w", ino, ErrInvalid)
	}
	return s.op("delete", s.idx.Inodes, inodeID(ino), ifVer, nil, fmt.Sprintf("deleting inode %d", ino))
}

// Bulk sends ops in as few _bulk requests as the size limits allow and checks
// every item: Elasticsearch answers 200 even when items fail. Items are not
// ordered relative to each other (different requests, different shards); a
// caller that needs "A before B" makes two calls. The error is non-nil only
// when a whole request failed, and then the outcome of its items is unknown.
func (s *Store) Bulk(ctx context.Context, ops []BulkOp) ([]BulkResult, error) {
	results := make([]BulkResult, len(ops))
	type batch struct{ from, to int }
	var batches []batch
	size, from := 0, 0
	for i, o := range ops {
		n := o.size() + len(o.id) + len(o.index) + 80
		if i > from && (size+n > maxBulkBytes || i-from >= maxBulkItems) {
			batches = append(batches, batch{from, i})
			from, size = i, 0
		}
		size += n
	}
	if from < len(ops) {
		batches = append(batches, batch{from, len(ops)})
	}
	if len(batches) == 1 {
		return results, s.bulkOnce(ctx, ops, results)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		sem      = make(chan struct{}, bulkWorkers)
	)
	for _, b := range batches {
		wg.Add(1)
		sem <- struct{}{}
		go func(b batch) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := s.bulkOnce(ctx, ops[b.from:b.to], results[b.from:b.to]); err != nil {
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}(b)
	}
	wg.Wait()
	return results, firstErr
}

type bulkItem struct {
	Index       string   `json:"_index"`
	ID          string   `json:"_id"`
	Status      int      `json:"status"`
	SeqNo       int64    `json:"_seq_no"`
	PrimaryTerm int64    `json:"_primary_term"`
	Result      string   `json:"result"`
	Error       *esError `json:"error"`
}

func (s *Store) bulkOnce(ctx context.Context, ops []BulkOp, results []BulkResult) error {
	var buf bytes.Buffer
	// Sized once: a body of data chunks is megabytes, and growing it by
	// doubling would hold twice that for each request in flight.
	size := 0
	for _, o := range ops {
		size += o.size() + len(o.id) + len(o.index) + 96
	}
	buf.Grow(size)
	s.metrics.countItems(s.idx, ops)
	for _, o := range ops {
		buf.WriteString(`{"`)
		buf.WriteString(o.action)
		buf.WriteString(`":{"_index":`)
		writeJSONString(&buf, o.index)
		buf.WriteString(`,"_id":`)
		writeJSONString(&buf, o.id)
		if o.ifVer.Known() {
			buf.WriteString(`,"if_seq_no":`)
			buf.WriteString(strconv.FormatInt(o.ifVer.SeqNo, 10))
			buf.WriteString(`,"if_primary_term":`)
			buf.WriteString(strconv.FormatInt(o.ifVer.PrimaryTerm, 10))
		}
		if o.extVersion > 0 {
			buf.WriteString(`,"version":`)
			buf.WriteString(strconv.FormatInt(o.extVersion, 10))
			buf.WriteString(`,"version_type":"external"`)
		}
		if o.retryOnConflict > 0 {
			buf.WriteString(`,"retry_on_conflict":`)
			buf.WriteString(strconv.Itoa(o.retryOnConflict))
		}
		buf.WriteString("}}\n")
		if o.encode != nil {
			o.encode(&buf)
			buf.WriteByte('\n')
		} else if o.doc != nil {
			buf.Write(o.doc)
			buf.WriteByte('\n')
		}
	}
	what := fmt.Sprintf("bulk of %d items", len(ops))
	res, err := s.do(ctx, what, request{method: "POST", path: "/_bulk", body: buf.Bytes(), ndjson: true})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	var out struct {
		Errors bool                  `json:"errors"`
		Items  []map[string]bulkItem `json:"items"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	if len(out.Items) != len(ops) {
		return fmt.Errorf("%s: got %d answers: %w", what, len(out.Items), ErrCorrupt)
	}
	for i, m := range out.Items {
		it, ok := m[ops[i].action]
		if !ok || it.ID != ops[i].id {
			results[i].Err = fmt.Errorf("%s: answer does not match the request: %w", ops[i].what, ErrCorrupt)
			continue
		}
		if it.Status >= 200 && it.Status < 300 {
			results[i].Ver = Version{SeqNo: it.SeqNo, PrimaryTerm: it.PrimaryTerm}
			results[i].Created, results[i].Deleted = it.Result == "created", it.Result == "deleted"
			continue
		}
		results[i].Err = statusError(it.Status, ops[i].what, it.Error)
	}
	return nil
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}

// OpTouchInode sets the mtime and ctime of an inode with a partial update,
// which Elasticsearch applies atomically on the current document without a
// read on our side: directory timestamps change on every create and unlink
// in the directory, and a compare-and-set loop there would make siblings
// created in parallel conflict with each other.
func (s *Store) OpTouchInode(ino uint64, mtime, ctime int64) BulkOp {
	o, _ := s.op("update", s.idx.Inodes, inodeID(ino), Version{},
		map[string]any{"doc": map[string]int64{"mtime": mtime, "ctime": ctime}},
		fmt.Sprintf("touching inode %d", ino))
	o.retryOnConflict = 5
	return o
}

// OpSetCtime sets an inode's ctime with a partial update (a rename changes
// the ctime of what it moves).
func (s *Store) OpSetCtime(ino uint64, ctime int64) BulkOp {
	o, _ := s.op("update", s.idx.Inodes, inodeID(ino), Version{},
		map[string]any{"doc": map[string]int64{"ctime": ctime}},
		fmt.Sprintf("setting the ctime of inode %d", ino))
	o.retryOnConflict = 5
	return o
}
