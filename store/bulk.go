package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"sync"
)

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

// Bulk sends ops in as few _bulk requests as the size limits allow and checks
// every item: Elasticsearch answers 200 even when items fail. Items are not
// ordered relative to each other (different requests, different shards); a
// caller that needs "A before B" makes two calls. The error is non-nil only
// when a whole request failed, and then the outcome of its items is unknown.
func (s *Store) Bulk(ctx context.Context, ops []BulkOp) ([]BulkResult, error) {
	for _, o := range ops {
		if err := s.check(o); err != nil {
			return nil, err
		}
	}
	results := make([]BulkResult, len(ops))
	type batch struct{ from, to int }
	var batches []batch
	size, from := 0, 0
	for i, o := range ops {
		n := o.size(s.encoding()) + len(o.id) + len(s.idx.alias(o.index)) + 80
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
		size += o.size(s.encoding()) + len(o.id) + len(s.idx.alias(o.index)) + 96
	}
	buf.Grow(size)
	s.metrics.countItems(ops)
	for _, o := range ops {
		buf.WriteString(`{"`)
		buf.WriteString(o.action)
		buf.WriteString(`":{"_index":`)
		writeJSONString(&buf, s.idx.alias(o.index)) // see WriteAliasSuffix
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
		if o.hasSource() {
			o.writeSource(&buf, s.encoding())
			buf.WriteByte('\n')
		}
	}
	what := fmt.Sprintf("bulk of %d items", len(ops))
	var items []string
	if s.log.Enabled(ctx, slog.LevelDebug) {
		for _, o := range ops {
			items = append(items, o.what)
		}
	}
	res, err := s.do(ctx, what, request{method: "POST", path: "/_bulk", query: url.Values{"timeout": {s.writeTimeout()}}, body: buf.Bytes(), ndjson: true, items: items})
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

// Write sends one op alone, as the single-document request of its action
// (PUT /index/_doc/id, with op_type=create for a create; DELETE of the same;
// POST /index/_update/id), and returns the document's new version. Its
// error is the one Bulk gives the op's item (ErrExists, ErrConflict,
// ErrNotFound, ErrUnavailable, ...), or the failure of the request.
func (s *Store) Write(ctx context.Context, o BulkOp) (Version, error) {
	if err := s.check(o); err != nil {
		return Version{}, err
	}
	index, q := s.idx.alias(o.index), url.Values{"timeout": {s.writeTimeout()}} // see WriteAliasSuffix
	r := request{method: "PUT", path: "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(o.id), query: q}
	switch o.action {
	case "create":
		q.Set("op_type", "create")
	case "delete":
		r.method = "DELETE"
	case "update":
		r.method, r.path = "POST", "/"+url.PathEscape(index)+"/_update/"+url.PathEscape(o.id)
		if o.retryOnConflict > 0 {
			q.Set("retry_on_conflict", strconv.Itoa(o.retryOnConflict))
		}
	}
	if o.ifVer.Known() {
		q.Set("if_seq_no", strconv.FormatInt(o.ifVer.SeqNo, 10))
		q.Set("if_primary_term", strconv.FormatInt(o.ifVer.PrimaryTerm, 10))
	}
	if o.extVersion > 0 {
		q.Set("version", strconv.FormatInt(o.extVersion, 10))
		q.Set("version_type", "external")
	}
	if o.hasSource() {
		var buf bytes.Buffer
		buf.Grow(o.size(s.encoding()))
		o.writeSource(&buf, s.encoding())
		r.body = buf.Bytes()
	}
	res, err := s.do(ctx, o.what, r)
	if err != nil {
		return Version{}, err
	}
	if res.status != 200 && (res.status != 201 || o.action == "delete") {
		return Version{}, failure(o.what, res)
	}
	var w struct {
		SeqNo       int64 `json:"_seq_no"`
		PrimaryTerm int64 `json:"_primary_term"`
	}
	if err := json.Unmarshal(res.body, &w); err != nil {
		return Version{}, fmt.Errorf("%s: %w: %v", o.what, ErrCorrupt, err)
	}
	return Version{SeqNo: w.SeqNo, PrimaryTerm: w.PrimaryTerm}, nil
}

// check refuses an op before anything is sent: its builder's refusal, an op
// no builder made, or a chunk larger than this filesystem's chunks.
func (s *Store) check(o BulkOp) error {
	switch {
	case o.err != nil:
		return o.err
	case o.action == "" || o.index == 0:
		return fmt.Errorf("a BulkOp not made by a builder: %w", ErrInvalid)
	case o.chunk != nil && s.chunkSize > 0 && int64(len(o.chunk.data)) > s.chunkSize:
		c := o.chunk
		return fmt.Errorf("chunk %d of inode %d has %d bytes, more than the chunk size %d: %w", c.chunk, c.ino, len(c.data), s.chunkSize, ErrInvalid)
	}
	return nil
}
