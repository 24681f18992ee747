package store_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestDentryConditionalWrites(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	v1, err := s.Write(ctx, store.CreateDentry(dentry("/a", 10, store.TypeFile)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, store.CreateDentry(dentry("/a", 11, store.TypeFile))); !errors.Is(err, store.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	d, err := s.GetDentry(ctx, "/a")
	if err != nil || d.Ino != 10 || d.Parent != "/" || d.Name != "a" || d.Ver != v1 {
		t.Fatalf("get: %+v %v (create gave %+v)", d, err, v1)
	}
	d.Intent = store.Intent{Op: "op1", Role: store.RoleSrc}
	v2, err := s.Write(ctx, store.PutDentry(d, v1))
	if err != nil || v2.SeqNo <= v1.SeqNo {
		t.Fatalf("put at the read version: %v %v", v2, err)
	}
	if _, err := s.Write(ctx, store.PutDentry(d, v1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("put at a stale version: %v, want ErrConflict", err)
	}
	if _, err := s.Write(ctx, store.DeleteDentry("/a", v1)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("delete at a stale version: %v, want ErrConflict", err)
	}
	got, _ := s.GetDentry(ctx, "/a")
	if got.Intent.Op != "op1" || got.Intent.Role != store.RoleSrc {
		t.Fatalf("intent not stored: %+v", got.Intent)
	}
	if _, err := s.Write(ctx, store.DeleteDentry("/a", v2)); err != nil {
		t.Fatalf("delete at the current version: %v", err)
	}
	if _, err := s.GetDentry(ctx, "/a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Write(ctx, store.DeleteDentry("/a", v2)); !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if _, err := s.Write(ctx, store.PutDentry(d, store.Version{})); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("unversioned put: %v, want ErrInvalid", err)
	}
}

func TestGetDentriesMixed(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	if _, err := s.Write(ctx, store.CreateDentry(dentry("/x", 20, store.TypeDir))); err != nil {
		t.Fatal(err)
	}
	// A corrupt document: its fields disagree with its id and with each other.
	if err := store.RawPut(s, ctx, "paths", store.DocID("/bad"), map[string]any{"path": "/bad", "parent": "/elsewhere", "name": "bad", "ino": 5, "type": "file"}); err != nil {
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
	v, err := s.Write(ctx, store.CreateInode(n))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, store.CreateInode(n)); !errors.Is(err, store.ErrExists) {
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
	v2, err := s.Write(ctx, store.PutInode(got, v))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, store.PutInode(got, v)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("stale put: %v", err)
	}
	res, err := s.GetInodes(ctx, []uint64{77, 78, store.RootIno})
	if err != nil || res[0].Inode.Size != 1 || !errors.Is(res[1].Err, store.ErrNotFound) || res[2].Err != nil {
		t.Fatalf("mget: %+v %v", res, err)
	}
	if _, err := s.Write(ctx, store.DeleteInode(77, v2)); err != nil {
		t.Fatal(err)
	}
	if err := store.RawPut(s, ctx, "inodes", "99", map[string]any{"ino": 99, "type": "fifo-of-doom", "mode": 0}); err != nil {
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
	if _, err := s.Write(ctx, store.CreateDentry(dentry(path, 30, store.TypeFile))); err != nil {
		t.Fatalf("4096-byte path: %v", err)
	}
	if d, err := s.GetDentry(ctx, path); err != nil || d.Path != path {
		t.Fatalf("4096-byte path read back: %v", err)
	}
	if _, err := s.Write(ctx, store.CreateDentry(dentry(path+"x", 31, store.TypeFile))); !errors.Is(err, store.ErrNameTooLong) {
		t.Fatalf("4097-byte path: %v, want ErrNameTooLong", err)
	}
	if _, err := s.Write(ctx, store.CreateDentry(dentry("/"+strings.Repeat("n", 256), 31, store.TypeFile))); !errors.Is(err, store.ErrNameTooLong) {
		t.Fatalf("256-byte name: %v, want ErrNameTooLong", err)
	}
	// Names that are not UTF-8 must not collide with their U+FFFD lookalikes,
	// and names that look like query syntax are just names.
	names := []string{"a\xff", "a\ufffd", "a\xfe", "\U0010FF80", "\U0010FF00", "x\U0010FFFFy\xff", "sp ace\nnew%line#*?[a-z]", `{"json":1}`, "ü"}
	for i, n := range names {
		if _, err := s.Write(ctx, store.CreateDentry(dentry("/"+n, uint64(100+i), store.TypeFile))); err != nil {
			t.Fatalf("create %q: %v", n, err)
		}
	}
	for i, n := range names {
		d, err := s.GetDentry(ctx, "/"+n)
		if err != nil || d.Name != n || d.Ino != uint64(100+i) {
			t.Fatalf("read %q: %+v %v", n, d, err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedPaths); err != nil {
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
	v, err := s.Write(ctx, store.CreateDentry(dentry("/taken", 40, store.TypeFile)))
	if err != nil {
		t.Fatal(err)
	}
	var ops []store.BulkOp
	add := func(o store.BulkOp) {
		if err := o.Err(); err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o)
	}
	add(store.CreateDentry(dentry("/new1", 41, store.TypeFile)))
	add(store.CreateDentry(dentry("/taken", 42, store.TypeFile)))                                                               // fails: exists
	add(store.PutDentry(dentry("/taken", 40, store.TypeFile), store.Version{SeqNo: v.SeqNo + 100, PrimaryTerm: v.PrimaryTerm})) // fails: stale
	add(store.CreateDentry(dentry("/new2", 43, store.TypeDir)))
	add(store.CreateInode(store.Inode{Ino: 41, Type: store.TypeFile, Mode: 0o644}))
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
	del := store.DeleteDentry("/new1", res[0].Ver)
	r2, err := s.Bulk(ctx, []store.BulkOp{del})
	if err != nil || r2[0].Err != nil {
		t.Fatalf("delete with the bulk's version: %v %v", err, r2[0].Err)
	}
	if d, err := s.GetDentry(ctx, "/taken"); err != nil || d.Ino != 40 {
		t.Errorf("/taken changed: %+v %v", d, err)
	}
}
