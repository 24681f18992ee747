package store_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// recorder is a proxy in front of the cluster that notes the method, path
// and query of every request, with the filesystem's prefix written as P.
type recorder struct {
	mu     sync.Mutex
	prefix string
	seen   []string
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := r.seen
	r.seen = nil
	return seen
}

// recordedStore returns a Store on s's filesystem whose requests rec notes.
func recordedStore(t *testing.T, s *store.Store) (*store.Store, *recorder) {
	t.Helper()
	target, err := url.Parse(testenv.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{prefix: s.Prefix()}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		line := r.Method + " " + strings.ReplaceAll(r.URL.Path, rec.prefix, "P")
		if r.URL.RawQuery != "" {
			line += "?" + r.URL.Query().Encode()
		}
		rec.mu.Lock()
		rec.seen = append(rec.seen, line)
		rec.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	rs, err := store.New(store.Config{URLs: []string{srv.URL}, Prefix: s.Prefix(), RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	if err := rs.Open(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	rec.take()
	return rs, rec
}

// TestWriteRequests: Write sends each op as the single-document request of
// its action, the requests esfs has always made for single writes (now
// through the write alias of the index), and Bulk sends even one op as a
// _bulk; a refused op sends nothing.
func TestWriteRequests(t *testing.T) {
	s, rec := recordedStore(t, testenv.Store(t))
	ctx := ctxT(t)
	pathID := store.DocID("/w")
	// Every write bounds how long the cluster may wait for its shards
	// (see store.Store.Timeout): the store's own timeout.
	tq := "timeout=30000ms"
	expect := func(what string, want ...string) {
		t.Helper()
		got := rec.take()
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s sent\n\t%s\nwant\n\t%s", what, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
	}
	v, err := s.Write(ctx, store.CreateDentry(dentry("/w", 70, store.TypeFile)))
	if err != nil {
		t.Fatal(err)
	}
	expect("CreateDentry", "PUT /P-W/_doc/"+pathID+"?op_type=create&"+tq)
	cond := func(v store.Version) string {
		return url.Values{"if_seq_no": {itoa(v.SeqNo)}, "if_primary_term": {itoa(v.PrimaryTerm)}, "timeout": {"30000ms"}}.Encode()
	}
	v2, err := s.Write(ctx, store.PutDentry(dentry("/w", 71, store.TypeFile), v))
	if err != nil {
		t.Fatal(err)
	}
	expect("PutDentry", "PUT /P-W/_doc/"+pathID+"?"+cond(v))
	if _, err := s.Write(ctx, store.DeleteDentry("/w", v2)); err != nil {
		t.Fatal(err)
	}
	expect("DeleteDentry", "DELETE /P-W/_doc/"+pathID+"?"+cond(v2))

	if _, err := s.Write(ctx, store.CreateInode(store.Inode{Ino: 70, Type: store.TypeFile, Mode: 0o644, Nlink: 1})); err != nil {
		t.Fatal(err)
	}
	expect("CreateInode", "PUT /P-inodes-W/_doc/70?op_type=create&"+tq)
	if _, err := s.Write(ctx, store.TouchInode(70, 5, 6)); err != nil {
		t.Fatal(err)
	}
	expect("TouchInode", "POST /P-inodes-W/_update/70?retry_on_conflict=5&"+tq)
	if n, err := s.GetInode(ctx, 70); err != nil || n.Mtime != 5 || n.Ctime != 6 || n.Mode != 0o644 {
		t.Errorf("after the partial update: %+v %v", n, err)
	}
	rec.take()

	st := store.Stamp{Version: store.DataVersion(1, 1)}
	if _, err := s.Write(ctx, store.WriteChunk(70, 0, []byte("text"), st)); err != nil {
		t.Fatal(err)
	}
	expect("WriteChunk", "PUT /P-data-W/_doc/70.0?"+tq+"&version="+itoa(st.Version)+"&version_type=external")
	if got, _, err := s.ReadChunks(ctx, 70, 0, 0); err != nil || string(got[0]) != "text" {
		t.Errorf("chunk written alone: %q %v", got[0], err)
	}
	rec.take()

	res, err := s.Bulk(ctx, []store.BulkOp{store.CreateOp(store.OpRecord{ID: "w1", State: store.OpPrepared, SrcType: store.TypeFile})})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	expect("a Bulk of one op", "POST /_bulk?"+tq)

	if _, err := s.Write(ctx, store.PutInode(store.Inode{Ino: 70, Type: store.TypeFile}, store.Version{})); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Write of a refused op: %v, want ErrInvalid", err)
	}
	if _, err := s.Bulk(ctx, []store.BulkOp{store.CreateInode(store.Inode{Ino: 71, Type: store.TypeFile}), store.DeleteDentry("/w", store.Version{})}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Bulk with a refused op: %v, want ErrInvalid", err)
	}
	if _, err := s.Write(ctx, store.BulkOp{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Write of an op no builder made: %v, want ErrInvalid", err)
	}
	expect("refused ops")
}

// TestWriteAndBulkAgree: an op that fails fails the same way whether Write
// sends it alone or Bulk sends it as an item.
func TestWriteAndBulkAgree(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	v, err := s.Write(ctx, store.CreateDentry(dentry("/a", 80, store.TypeFile)))
	if err != nil {
		t.Fatal(err)
	}
	stale := store.Version{SeqNo: v.SeqNo + 100, PrimaryTerm: v.PrimaryTerm}
	if _, err := s.Write(ctx, store.WriteChunk(80, 0, []byte("new"), store.Stamp{Version: store.DataVersion(2, 1)})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		op   store.BulkOp
		want error
	}{
		{"create of a taken path", store.CreateDentry(dentry("/a", 81, store.TypeFile)), store.ErrExists},
		{"put at a stale version", store.PutDentry(dentry("/a", 81, store.TypeFile), stale), store.ErrConflict},
		{"delete at a stale version", store.DeleteDentry("/a", stale), store.ErrConflict},
		{"delete of a missing document", store.DeleteOp("missing", store.Version{}), store.ErrNotFound},
		{"partial update of a missing inode", store.TouchInode(999, 1, 1), store.ErrNotFound},
		{"chunk write of an older version", store.WriteChunk(80, 0, []byte("old"), store.Stamp{Version: store.DataVersion(1, 1)}), store.ErrConflict},
	} {
		_, werr := s.Write(ctx, c.op)
		res, err := s.Bulk(ctx, []store.BulkOp{c.op})
		if err != nil {
			t.Fatalf("%s: bulk: %v", c.name, err)
		}
		if !errors.Is(werr, c.want) || !errors.Is(res[0].Err, c.want) {
			t.Errorf("%s: Write: %v; Bulk: %v; want %v from both", c.name, werr, res[0].Err, c.want)
		}
	}
	if got, _, err := s.ReadChunks(ctx, 80, 0, 0); err != nil || string(got[0]) != "new" {
		t.Errorf("chunk after refused writes: %q %v", got[0], err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
