package store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.PrintVersion("store")
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dentry(path string, ino uint64, typ store.FileType) store.Dentry {
	return store.Dentry{Path: path, Ino: ino, Type: typ}
}

func TestVersionReported(t *testing.T) {
	s := testenv.Unformatted(t)
	v, err := s.Version(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "8.") {
		t.Fatalf("version %q: want an Elasticsearch 8.x", v)
	}
	t.Logf("Elasticsearch %s", v)
}

func TestMkfsIdempotentStrictAndRoot(t *testing.T) {
	s := testenv.Store(t) // first mkfs
	ctx := ctxT(t)
	if err := s.Mkfs(ctx, store.MkfsOptions{}); err != nil {
		t.Fatalf("second mkfs: %v", err)
	}
	for _, which := range []string{"paths", "inodes", "data", "locks", "sessions"} {
		dyn, props, err := s.RawMapping(ctx, which)
		if err != nil {
			t.Fatal(err)
		}
		if dyn != "strict" {
			t.Errorf("%s: dynamic=%q, want strict", which, dyn)
		}
		if len(props) == 0 {
			t.Errorf("%s: no properties", which)
		}
	}
	_, props, _ := s.RawMapping(ctx, "paths")
	if props["path"]["type"] != "keyword" || props["path"]["ignore_above"] != nil {
		t.Errorf("path field: %v, want a keyword without ignore_above", props["path"])
	}
	// Strict: a document with an unknown field is refused.
	err := s.RawPut(ctx, "paths", "x", map[string]any{"path": "/x", "surprise": 1})
	if !errors.Is(err, store.ErrRejected) {
		t.Errorf("unknown field: got %v, want ErrRejected", err)
	}
	root, err := s.GetDentry(ctx, "/")
	if err != nil || root.Ino != store.RootIno || root.Type != store.TypeDir {
		t.Fatalf("root dentry: %+v, %v", root, err)
	}
	ri, err := s.GetInode(ctx, store.RootIno)
	if err != nil || ri.Type != store.TypeDir || ri.Mode != 0o755 {
		t.Fatalf("root inode: %+v, %v", ri, err)
	}
	if s.ChunkSize() != store.DefaultChunkSize {
		t.Errorf("chunk size %d", s.ChunkSize())
	}
}

func TestMkfsRefusesConflictingMapping(t *testing.T) {
	s := testenv.Unformatted(t)
	ctx := ctxT(t)
	err := s.RawCreateIndex(ctx, "paths", map[string]any{"mappings": map[string]any{
		"dynamic": "strict", "_meta": map[string]any{"esfs_format": store.FormatVersion},
		"properties": map[string]any{"path": map[string]any{"type": "text"}}}})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Mkfs(ctx, store.MkfsOptions{})
	if !errors.Is(err, store.ErrMapping) || !strings.Contains(err.Error(), "path is text, want keyword") {
		t.Fatalf("got %v, want ErrMapping naming the path field", err)
	}
}

func TestMkfsRefusesForeignIndex(t *testing.T) {
	s := testenv.Unformatted(t)
	ctx := ctxT(t)
	if err := s.RawCreateIndex(ctx, "inodes", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Mkfs(ctx, store.MkfsOptions{}); !errors.Is(err, store.ErrMapping) {
		t.Fatalf("got %v, want ErrMapping for an index esfs did not make", err)
	}
}

func TestOpenWithoutMkfs(t *testing.T) {
	s := testenv.Unformatted(t)
	err := s.Open(ctxT(t))
	if !errors.Is(err, store.ErrNoIndex) || !strings.Contains(err.Error(), "esfs mkfs") {
		t.Fatalf("got %v, want ErrNoIndex telling to run mkfs", err)
	}
}

func TestDentryConditionalWrites(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	v1, err := s.CreateDentry(ctx, dentry("/a", 10, store.TypeFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateDentry(ctx, dentry("/a", 11, store.TypeFile)); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	d, err := s.GetDentry(ctx, "/a")
	if err != nil || d.Ino != 10 || d.Parent != "/" || d.Name != "a" || d.Ver != v1 {
		t.Fatalf("get: %+v %v (create gave %+v)", d, err, v1)
	}
	d.Intent = store.Intent{Op: "op1", Role: store.RoleSrc}
	v2, err := s.PutDentry(ctx, d, v1)
	if err != nil || v2.SeqNo <= v1.SeqNo {
		t.Fatalf("put at the read version: %v %v", v2, err)
	}
	if _, err := s.PutDentry(ctx, d, v1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("put at a stale version: %v, want ErrConflict", err)
	}
	if _, err := s.DeleteDentry(ctx, "/a", v1); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete at a stale version: %v, want ErrConflict", err)
	}
	got, _ := s.GetDentry(ctx, "/a")
	if got.Intent.Op != "op1" || got.Intent.Role != store.RoleSrc {
		t.Fatalf("intent not stored: %+v", got.Intent)
	}
	if _, err := s.DeleteDentry(ctx, "/a", v2); err != nil {
		t.Fatalf("delete at the current version: %v", err)
	}
	if _, err := s.GetDentry(ctx, "/a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.DeleteDentry(ctx, "/a", v2); !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.PutDentry(ctx, d, store.Version{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("unversioned put: %v, want ErrInvalid", err)
	}
}

func TestGetDentriesMixed(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	if _, err := s.CreateDentry(ctx, dentry("/x", 20, store.TypeDir)); err != nil {
		t.Fatal(err)
	}
	// A corrupt document: its fields disagree with its id and with each other.
	if err := s.RawPut(ctx, "paths", store.DocID("/bad"), map[string]any{"path": "/bad", "parent": "/elsewhere", "name": "bad", "ino": 5, "type": "file"}); err != nil {
		t.Fatal(err)
	}
	res, err := s.GetDentries(ctx, []string{"/x", "/missing", "/bad", "/"})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[0].Dentry.Ino != 20 {
		t.Errorf("/x: %+v", res[0])
	}
	if !errors.Is(res[1].Err, store.ErrNotFound) {
		t.Errorf("/missing: %v", res[1].Err)
	}
	if !errors.Is(res[2].Err, store.ErrCorrupt) {
		t.Errorf("/bad: %v, want ErrCorrupt", res[2].Err)
	}
	if res[3].Err != nil || res[3].Dentry.Ino != store.RootIno {
		t.Errorf("/: %+v", res[3])
	}
	if _, err := s.GetDentry(ctx, "/bad"); !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("GetDentry(/bad): %v, want ErrCorrupt", err)
	}
}

func TestInodeConditionalWritesAndXattrs(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	n := store.Inode{Ino: 77, Type: store.TypeFile, Mode: 0o4644, Uid: 1000, Gid: 1000, Size: 12345, Nlink: 1,
		Atime: 1, Mtime: 2, Ctime: 3, Btime: 4, Xattrs: map[string][]byte{"user.bin": {0, 0xff, 1}, "user.\xfe": []byte("v")}}
	v, err := s.CreateInode(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateInode(ctx, n); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v", err)
	}
	got, err := s.GetInode(ctx, 77)
	if err != nil {
		t.Fatal(err)
	}
	if got.Mode != 0o4644 || got.Size != 12345 || got.Mtime != 2 || !bytes.Equal(got.Xattrs["user.bin"], []byte{0, 0xff, 1}) || string(got.Xattrs["user.\xfe"]) != "v" {
		t.Fatalf("round trip: %+v", got)
	}
	got.Size = 1
	v2, err := s.PutInode(ctx, got, v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.PutInode(ctx, got, v); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale put: %v", err)
	}
	res, err := s.GetInodes(ctx, []uint64{77, 78, store.RootIno})
	if err != nil || res[0].Inode.Size != 1 || !errors.Is(res[1].Err, store.ErrNotFound) || res[2].Err != nil {
		t.Fatalf("mget: %+v %v", res, err)
	}
	if _, err := s.DeleteInode(ctx, 77, v2); err != nil {
		t.Fatal(err)
	}
	if err := s.RawPut(ctx, "inodes", "99", map[string]any{"ino": 99, "type": "fifo-of-doom", "mode": 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetInode(ctx, 99); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("corrupt inode: %v", err)
	}
}

func TestLongPathAndStrangeNames(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	// A 4096-byte path made of 255-byte components.
	comp := strings.Repeat("d", 255)
	path := ""
	for len(path)+1+len(comp) < store.MaxPath-2 {
		path += "/" + comp
	}
	path += "/" + strings.Repeat("f", store.MaxPath-len(path)-1)
	if len(path) != store.MaxPath {
		t.Fatalf("built a path of %d bytes", len(path))
	}
	if _, err := s.CreateDentry(ctx, dentry(path, 30, store.TypeFile)); err != nil {
		t.Fatalf("4096-byte path: %v", err)
	}
	if d, err := s.GetDentry(ctx, path); err != nil || d.Path != path {
		t.Fatalf("4096-byte path read back: %v", err)
	}
	if _, err := s.CreateDentry(ctx, dentry(path+"x", 31, store.TypeFile)); !errors.Is(err, store.ErrNameTooLong) {
		t.Fatalf("4097-byte path: %v, want ErrNameTooLong", err)
	}
	if _, err := s.CreateDentry(ctx, dentry("/"+strings.Repeat("n", 256), 31, store.TypeFile)); !errors.Is(err, store.ErrNameTooLong) {
		t.Fatalf("256-byte name: %v, want ErrNameTooLong", err)
	}
	// Names that are not UTF-8 must not collide with their U+FFFD lookalikes,
	// and names that look like query syntax are just names.
	names := []string{"a\xff", "a\ufffd", "a\xfe", "\U0010FF80", "\U0010FF00", "x\U0010FFFFy\xff", "sp ace\nnew%line#*?[a-z]", `{"json":1}`, "ü"}
	for i, n := range names {
		if _, err := s.CreateDentry(ctx, dentry("/"+n, uint64(100+i), store.TypeFile)); err != nil {
			t.Fatalf("create %q: %v", n, err)
		}
	}
	for i, n := range names {
		d, err := s.GetDentry(ctx, "/"+n)
		if err != nil || d.Name != n || d.Ino != uint64(100+i) {
			t.Fatalf("read %q: %+v %v", n, d, err)
		}
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	sc := s.ListDir("/", 3)
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil || len(bad) > 0 {
			t.Fatal(err, bad)
		}
		if page == nil {
			break
		}
		for _, d := range page {
			seen[d.Name] = true
		}
	}
	for _, n := range names {
		if !seen[n] {
			t.Errorf("listing misses %q", n)
		}
	}
	for _, n := range []string{"a\xffb", "\xff\xfe", "plain", "\U0010FF7F\U0010FFFF", "\U0010FF00\xff"} {
		enc := store.EncodeText(n)
		if dec, err := store.DecodeText(enc); err != nil || dec != n {
			t.Errorf("encode %q -> %q -> %q %v", n, enc, dec, err)
		}
	}
}

func TestBulkChecksEveryItem(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	v, err := s.CreateDentry(ctx, dentry("/taken", 40, store.TypeFile))
	if err != nil {
		t.Fatal(err)
	}
	var ops []store.BulkOp
	add := func(o store.BulkOp, err error) {
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o)
	}
	add(s.OpCreateDentry(dentry("/new1", 41, store.TypeFile)))
	add(s.OpCreateDentry(dentry("/taken", 42, store.TypeFile)))                                                               // fails: exists
	add(s.OpPutDentry(dentry("/taken", 40, store.TypeFile), store.Version{SeqNo: v.SeqNo + 100, PrimaryTerm: v.PrimaryTerm})) // fails: stale
	add(s.OpCreateDentry(dentry("/new2", 43, store.TypeDir)))
	add(s.OpCreateInode(store.Inode{Ino: 41, Type: store.TypeFile, Mode: 0o644}))
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !res[0].Ver.Known() {
		t.Errorf("item 0: %+v", res[0])
	}
	if !errors.Is(res[1].Err, store.ErrExists) {
		t.Errorf("item 1: %v, want ErrExists", res[1].Err)
	}
	if !errors.Is(res[2].Err, store.ErrConflict) {
		t.Errorf("item 2: %v, want ErrConflict", res[2].Err)
	}
	if res[3].Err != nil || res[4].Err != nil {
		t.Errorf("items 3, 4: %+v %+v", res[3], res[4])
	}
	// The versions a bulk returns are the ones conditional writes need.
	del, _ := s.OpDeleteDentry("/new1", res[0].Ver)
	r2, err := s.Bulk(ctx, []store.BulkOp{del})
	if err != nil || r2[0].Err != nil {
		t.Fatalf("delete with the bulk's version: %v %v", err, r2[0].Err)
	}
	if d, err := s.GetDentry(ctx, "/taken"); err != nil || d.Ino != 40 {
		t.Errorf("/taken changed: %+v %v", d, err)
	}
}

func TestScanMoreThan10000(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 12,000 documents")
	}
	s := testenv.Store(t)
	ctx := ctxT(t)
	const n = 12000
	var ops []store.BulkOp
	o, _ := s.OpCreateDentry(dentry("/big", 50, store.TypeDir))
	ops = append(ops, o)
	for i := 0; i < n; i++ {
		o, err := s.OpCreateDentry(dentry(fmt.Sprintf("/big/f%05d", i), uint64(1000+i), store.TypeFile))
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o)
	}
	o, _ = s.OpCreateDentry(dentry("/bigger", 51, store.TypeFile)) // a sibling sharing the prefix
	ops = append(ops, o)
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
	}
	if err := s.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	count := func(sc *store.Scanner) (int, string) {
		defer sc.Close()
		total, last := 0, ""
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil || len(bad) > 0 {
				t.Fatal(err, bad)
			}
			if page == nil {
				return total, last
			}
			for _, d := range page {
				if d.Path <= last {
					t.Fatalf("out of order or repeated: %q after %q", d.Path, last)
				}
				last = d.Path
				total++
			}
		}
	}
	if got, _ := count(s.ScanTree("/big", 1000)); got != n+1 {
		t.Errorf("ScanTree(/big) = %d documents, want %d (must exclude /bigger)", got, n+1)
	}
	if got, _ := count(s.ListDir("/big", 1000)); got != n {
		t.Errorf("ListDir(/big) = %d, want %d", got, n)
	}
	if got, _ := count(s.ScanTree("/", 5000)); got != n+3 {
		t.Errorf("ScanTree(/) = %d, want %d", got, n+3)
	}
}

func TestScanOp(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	for i, p := range []string{"/o1", "/o2", "/o3"} {
		d := dentry(p, uint64(60+i), store.TypeFile)
		if i < 2 {
			d.Intent = store.Intent{Op: "rename-1", Role: store.RoleDst}
		}
		if _, err := s.CreateDentry(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Refresh(ctx)
	sc := s.ScanOp("rename-1", 10)
	defer sc.Close()
	page, _, err := sc.Next(ctx)
	if err != nil || len(page) != 2 || page[0].Path != "/o1" || page[1].Intent.Role != store.RoleDst {
		t.Fatalf("%+v %v", page, err)
	}
}

func TestChunks(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	cs := s.ChunkSize()
	st := store.Stamp{Version: store.DataVersion(1, 1), Session: "s1"}
	full := bytes.Repeat([]byte{0xab}, int(cs))
	if w, err := s.WriteChunks(ctx, 9, map[int64][]byte{0: full, 2: []byte("tail")}, st); err != nil || len(w.Refused) > 0 || w.Created != 2 {
		t.Fatal(w, err)
	}
	if w, err := s.WriteChunks(ctx, 9, map[int64][]byte{2: []byte("tail2")}, store.Stamp{Version: store.DataVersion(1, 2)}); err != nil || w.Created != 0 {
		t.Fatalf("rewriting a chunk: %+v, %v; want nothing created", w, err)
	}
	got, err := s.ReadChunks(ctx, 9, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0], full) || string(got[2]) != "tail2" {
		t.Fatalf("chunks read back wrong: %d %q", len(got[0]), got[2])
	}
	if _, ok := got[1]; ok {
		t.Fatal("hole read as a chunk")
	}
	if _, err := s.WriteChunks(ctx, 9, map[int64][]byte{1: make([]byte, cs+1)}, st); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("oversized chunk: %v", err)
	}
	if _, err := s.WriteChunks(ctx, 9, map[int64][]byte{1: []byte("x")}, store.Stamp{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("chunk without a data version: %v", err)
	}
	if n, err := s.DeleteChunks(ctx, 9, 1, 5, store.DataVersion(1, 3)); err != nil || n != 1 {
		t.Fatalf("deleting chunks 1-5 of 0 and 2: %d deleted, %v", n, err)
	}
	got, _ = s.ReadChunks(ctx, 9, 0, 3)
	if len(got) != 1 || got[0] == nil {
		t.Fatalf("after delete: %d chunks", len(got))
	}
	if err := s.RawPut(ctx, "data", "9.7", map[string]any{"ino": 8, "chunk": 7, "data": "AAAA"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadChunks(ctx, 9, 7, 7); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("chunk of another inode: %v, want ErrCorrupt", err)
	}
}

// TestChunkVersionsFence: a chunk write or delete whose data version is
// not above the stored one is refused, so a request that lands late can
// never overwrite a newer write, nor bring back a chunk deleted after it.
func TestChunkVersionsFence(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	write := func(gen, counter uint64, data string) []int64 {
		t.Helper()
		w, err := s.WriteChunks(ctx, 11, map[int64][]byte{0: []byte(data)}, store.Stamp{Version: store.DataVersion(gen, counter), Session: "w"})
		if err != nil {
			t.Fatal(err)
		}
		return w.Refused
	}
	read := func() string {
		t.Helper()
		got, err := s.ReadChunks(ctx, 11, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := got[0]
		if !ok {
			return "(absent)"
		}
		return string(b)
	}
	if r := write(2, 1, "newer"); len(r) != 0 {
		t.Fatalf("first write refused: %v", r)
	}
	if r := write(1, 9, "older generation"); len(r) != 1 || r[0] != 0 {
		t.Fatalf("a write of an older generation: refused %v, want [0]", r)
	}
	if r := write(2, 1, "same version again"); len(r) != 1 {
		t.Fatalf("a write of the same version: refused %v, want [0]", r)
	}
	if got := read(); got != "newer" {
		t.Fatalf("chunk holds %q after late writes, want %q", got, "newer")
	}
	if r := write(2, 2, "retry"); len(r) != 0 || read() != "retry" {
		t.Fatalf("the writer's next request: refused %v, chunk %q", r, read())
	}
	if _, err := s.DeleteChunks(ctx, 11, 0, 0, store.DataVersion(3, 1)); err != nil {
		t.Fatal(err)
	}
	if r := write(2, 3, "late, after the delete"); len(r) != 1 || read() != "(absent)" {
		t.Fatalf("a late write after a newer delete: refused %v, chunk %q", r, read())
	}
	// A delete older than the stored write leaves it (that write is later).
	if r := write(4, 1, "after the delete"); len(r) != 0 {
		t.Fatalf("a newer write after the delete refused: %v", r)
	}
	if _, err := s.DeleteChunks(ctx, 11, 0, 0, store.DataVersion(3, 2)); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "after the delete" {
		t.Fatalf("an older delete removed a newer write: %q", got)
	}
	// A delete of a chunk never written fences it too, while the
	// tombstone lives.
	if _, err := s.DeleteChunks(ctx, 11, 5, 5, store.DataVersion(5, 1)); err != nil {
		t.Fatal(err)
	}
	w, err := s.WriteChunks(ctx, 11, map[int64][]byte{5: []byte("late")}, store.Stamp{Version: store.DataVersion(4, 2)})
	if err != nil || len(w.Refused) != 1 {
		t.Fatalf("a late write into a range deleted before it was stored: refused %v, %v", w.Refused, err)
	}
}

// TestDeleteChunksCostsWhatIsStored: deleting a range of a billion chunks
// (a 1 PiB sparse file) finds the few stored ones by search, including one
// written a moment before (the delete refreshes), in a few requests and
// little memory; chunks before the range stay.
func TestDeleteChunksCostsWhatIsStored(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	last := store.MaxFileSize/s.ChunkSize() - 1
	st := store.Stamp{Version: store.DataVersion(1, 1)}
	nums := []int64{0, 3, 1000, 1 << 20, last - 1, last}
	for _, n := range nums {
		if _, err := s.WriteChunks(ctx, 12, map[int64][]byte{n: []byte(fmt.Sprint(n))}, st); err != nil {
			t.Fatal(err)
		}
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if n, err := s.DeleteChunks(ctx, 12, 1, last, store.DataVersion(1, 2)); err != nil || n != 5 {
		t.Fatalf("%d deleted, %v; want 5", n, err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("deleting chunks 1..%d (5 stored) took %s and allocated %d KiB", last, time.Since(start).Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("deleting a sparse range allocated %d MiB: its cost follows the range, not what is stored", grew>>20)
	}
	for _, n := range nums {
		got, err := s.ReadChunks(ctx, 12, n, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got[n]; ok != (n == 0) {
			t.Errorf("chunk %d stored: %v after deleting 1..%d", n, ok, last)
		}
	}
}

// TestChunkScan: fsck's scan lists every chunk with its writer's session
// and version, without the bytes; a delete at a listed version fails once
// the chunk was written again.
func TestChunkScan(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	big := uint64(1<<62 + 12345) // loses its last digits as a float64
	for _, w := range []struct {
		ino uint64
		n   int64
	}{{big, 0}, {big, 7}, {13, 2}} {
		if _, err := s.WriteChunks(ctx, w.ino, map[int64][]byte{w.n: []byte("x")}, store.Stamp{Version: store.DataVersion(1, 1), Session: "abc123"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	sc := s.ScanChunks()
	var refs []store.ChunkRef
	for {
		page, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if page == nil {
			break
		}
		refs = append(refs, page...)
	}
	if len(refs) != 3 || refs[0].Ino != 13 || refs[0].Chunk != 2 || refs[1].Ino != big || refs[2].Chunk != 7 || refs[2].Sess != "abc123" || !refs[2].Ver.Known() {
		t.Fatalf("scan: %+v", refs)
	}
	if _, err := s.WriteChunks(ctx, big, map[int64][]byte{7: []byte("y")}, store.Stamp{Version: store.DataVersion(1, 2)}); err != nil {
		t.Fatal(err)
	}
	errs, err := s.DeleteChunkRefs(ctx, refs[1:])
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || !errors.Is(errs[1], store.ErrConflict) {
		t.Fatalf("deletes at listed versions: %v", errs)
	}
}

// TestDataIndexKeepsTombstones: mkfs sets gc_deletes on the data index,
// and Open sets it again where it was changed (or made by an older esfs).
func TestDataIndexKeepsTombstones(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	get := func() string {
		t.Helper()
		v, err := s.RawSetting(ctx, "data", "index.gc_deletes")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := get(); got != store.DataGCDeletes {
		t.Fatalf("gc_deletes after mkfs: %q, want %q", got, store.DataGCDeletes)
	}
	if err := s.RawPutSetting(ctx, "data", "index.gc_deletes", "60s"); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != store.DataGCDeletes {
		t.Fatalf("gc_deletes after Open: %q, want %q", got, store.DataGCDeletes)
	}
}

func TestUnreachableClusterFailsFast(t *testing.T) {
	// Nothing listens: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://esfsuser:s3cr3t-pw@" + l.Addr().String()
	l.Close()
	// Something listens but never answers: a hung node.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, u := range []string{refused, "http://esfsuser:s3cr3t-pw@" + hung.Addr().String()} {
		s, err := store.New(store.Config{URLs: []string{u}, Prefix: "esfs-unreachable", RequestTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.GetDentry(context.Background(), "/")
		took := time.Since(start)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: got %v, want ErrUnavailable", u, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s: took %s with a 2s timeout", u, took)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "esfsuser")) {
			t.Errorf("credentials leak into the error: %v", err)
		}
		if err := s.Open(context.Background()); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("open: %v", err)
		}
	}
}

func TestNotElasticsearch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	s, err := store.New(store.Config{URLs: []string{srv.URL}, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Open(context.Background())
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("got %v, want a clear refusal of a non-Elasticsearch server", err)
	}
	t.Log(err)
}

func TestBadConfig(t *testing.T) {
	for _, c := range []store.Config{
		{URLs: []string{"localhost:9200"}},
		{URLs: []string{"ftp://x"}},
		{URLs: []string{"http://x"}, Prefix: "Upper"},
		{URLs: []string{"http://x"}, Prefix: "_hidden"},
		{URLs: []string{"http://x"}, Prefix: "a/b"},
		{URLs: []string{"http://x"}, CACertFile: "/nonexistent/ca.pem"},
	} {
		if _, err := store.New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
