package store_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestListingOrderIsCompareNames: the store lists a directory in the order
// of store.CompareNames, the order a mount's listings from memory follow
// and esfs du reproduces; names that are not UTF-8 sort by their stored
// bytes, not their raw ones ("\x80" after "😀").
func TestListingOrderIsCompareNames(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	names := []string{"x", "\x80", "\xf0\x9f\x98\x80", "\xff", "\U0010FFFF", "\U0010FF00", "a\xfe", "a", "Z", "\x7f", "é", "a b", "a\nb"}
	for i, n := range names {
		if _, err := s.Write(ctx, store.CreateDentry(dentry("/"+n, uint64(100+i), store.TypeFile))); err != nil {
			t.Fatalf("create %q: %v", n, err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedPaths); err != nil {
		t.Fatal(err)
	}
	var got []string
	sc := s.ListDir("/", 4)
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
			got = append(got, d.Name)
		}
	}
	want := slices.Clone(names)
	slices.SortFunc(want, store.CompareNames)
	if !slices.Equal(got, want) {
		t.Errorf("listed %q\nCompareNames sorts %q", got, want)
	}
	raw := slices.Clone(names)
	slices.Sort(raw)
	if slices.Equal(raw, want) {
		t.Errorf("the names do not tell the stored order from the raw one: %q", raw)
	}
}

// TestDuSums: what esfs du asks of the indices. The blocks field is
// written with every whole inode (alone or in a bulk) as Inode.Blocks
// computes it, sparse files included; FileSums sums files with one link
// by the directory their Parents name; Unsummed returns those with
// several links and those without the field; TreeShape counts entries
// and intents; PathsOf and PathsIn find path documents.
func TestDuSums(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	cs := s.ChunkSize()
	const d1, d2 = 1001, 1002
	dirs := []store.Inode{{Ino: d1, Type: store.TypeDir, Mode: 0o755, Nlink: 2}, {Ino: d2, Type: store.TypeDir, Mode: 0o755, Nlink: 2}}
	files := []store.Inode{
		{Ino: 2001, Type: store.TypeFile, Size: 3000, Chunks: 1, Parents: []uint64{d1}},
		{Ino: 2002, Type: store.TypeFile, Size: 5 << 30, Chunks: 0, Parents: []uint64{d1}},  // huge sparse, nothing stored
		{Ino: 2003, Type: store.TypeFile, Size: 5 << 30, Chunks: 1, Parents: []uint64{d1}},  // one chunk
		{Ino: 2004, Type: store.TypeFile, Size: 1 << 20, Chunks: -1, Parents: []uint64{d1}}, // chunks not counted
		{Ino: 2005, Type: store.TypeSymlink, Size: 8, Target: "/nowhere", Parents: []uint64{d2}},
		{Ino: 2006, Type: store.TypeFifo, Parents: []uint64{d2}},
	}
	multi := store.Inode{Ino: 2007, Type: store.TypeFile, Size: 700, Chunks: 1, Nlink: 2, Parents: []uint64{d1, d2}}
	var ops []store.BulkOp
	for _, a := range append(dirs, files...) {
		a.Mode = 0o644
		if a.Nlink == 0 {
			a.Nlink = 1
		}
		ops = append(ops, store.CreateInode(a))
	}
	// One alone, through Write, the rest in a bulk.
	if _, err := s.Write(ctx, ops[0]); err != nil {
		t.Fatal(err)
	}
	res, err := s.Bulk(ctx, append(ops[1:], store.CreateInode(multi)))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// As an esfs before the field wrote them: none, and no Parents.
	if err := store.RawPut(s, ctx, "inodes", "2008", map[string]any{"ino": 2008, "type": "file", "mode": 0o644, "nlink": 1, "size": 100, "chunks": 1, "parents": []uint64{d2}}); err != nil {
		t.Fatal(err)
	}
	if err := store.RawPut(s, ctx, "inodes", "2009", map[string]any{"ino": 2009, "type": "file", "mode": 0o644, "nlink": 1, "size": 100, "chunks": 1}); err != nil {
		t.Fatal(err)
	}
	paths := map[string]store.Dentry{
		"/t": {Path: "/t", Ino: d1, Type: store.TypeDir}, "/t/d2": {Path: "/t/d2", Ino: d2, Type: store.TypeDir},
		"/t/a": {Path: "/t/a", Ino: 2001, Type: store.TypeFile}, "/t/m": {Path: "/t/m", Ino: 2007, Type: store.TypeFile},
		"/t/d2/m2": {Path: "/t/d2/m2", Ino: 2007, Type: store.TypeFile}, "/t/d2/old": {Path: "/t/d2/old", Ino: 2009, Type: store.TypeFile},
		"/elsewhere/m3": {Path: "/elsewhere/m3", Ino: 2007, Type: store.TypeFile},
	}
	ops = ops[:0]
	for _, d := range paths {
		ops = append(ops, store.CreateDentry(d))
	}
	res, err = s.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedPaths|store.SearchedInodes); err != nil {
		t.Fatal(err)
	}

	sums, err := s.FileSums(ctx, []uint64{d1, d2})
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]store.FileSum{}
	for _, a := range files {
		w := want[a.Parents[0]]
		w.Count++
		w.Blocks += a.Blocks(cs)
		w.Bytes += a.Size
		want[a.Parents[0]] = w
	}
	if want[d1].Blocks != 6+0+cs/512+2048 {
		t.Fatalf("Inode.Blocks: %d blocks in d1", want[d1].Blocks)
	}
	if !reflect.DeepEqual(sums, want) {
		t.Errorf("FileSums: %+v, want %+v", sums, want)
	}
	un, err := s.Unsummed(ctx, []uint64{d1, d2})
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, a := range un {
		got = append(got, a.Ino)
	}
	slices.Sort(got)
	if !slices.Equal(got, []uint64{2007, 2008}) {
		t.Errorf("Unsummed: %v, want the file with two links and the one without blocks", got)
	}
	sh, err := s.TreeShape(ctx, "/t")
	if err != nil {
		t.Fatal(err)
	}
	if len(sh.Dirs) != 2 || sh.Dirs[0].Path != "/t" || sh.Dirs[1].Path != "/t/d2" || sh.Intents != 0 ||
		!reflect.DeepEqual(sh.Entries, map[string]int64{"/": 1, "/t": 3, "/t/d2": 2}) {
		t.Errorf("TreeShape(/t): %+v", sh)
	}
	links, err := s.PathsOf(ctx, []uint64{2007}, "/t")
	if err != nil || len(links) != 2 || links[0].Path != "/t/d2/m2" || links[1].Path != "/t/m" {
		t.Errorf("PathsOf(2007, /t): %+v %v", links, err)
	}
	in, err := s.PathsIn(ctx, []string{"/t/d2"})
	if err != nil || len(in) != 2 || in[0].Path != "/t/d2/m2" || in[1].Path != "/t/d2/old" {
		t.Errorf("PathsIn(/t/d2): %+v %v", in, err)
	}
}

// TestBlocksFieldOnlyWhereMapped: a filesystem whose inode index lacks the
// blocks field, opened with credentials that may not add it, still takes
// inodes (written without it); opened by a writer, it gets the field.
func TestBlocksFieldOnlyWhereMapped(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	_, props, err := store.RawMapping(s, ctx, "inodes")
	if err != nil {
		t.Fatal(err)
	}
	delete(props, "blocks")
	if err := store.RawDeleteIndex(s, ctx, "inodes"); err != nil {
		t.Fatal(err)
	}
	if err := store.RawCreateIndex(s, ctx, "inodes", map[string]any{"mappings": map[string]any{
		"dynamic": "strict", "_meta": map[string]any{"esfs_format": store.FormatVersion}, "properties": props}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Admin().AddWriteAliases(ctx); err != nil {
		t.Fatal(err)
	}
	a := store.Inode{Ino: 3001, Type: store.TypeFile, Mode: 0o644, Nlink: 1, Size: 10, Chunks: 1}
	if _, err := s.Write(ctx, store.CreateInode(a)); err == nil {
		t.Fatal("the old mapping took a blocks field: the test does not reproduce an older index")
	}
	ro, err := store.New(store.Config{URLs: []string{testenv.URL(t)}, Prefix: s.Prefix(), ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := ro.Write(ctx, store.CreateInode(a)); err != nil {
		t.Fatalf("an inode through a store that may not add the field: %v", err)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if _, props, _ = store.RawMapping(s, ctx, "inodes"); props["blocks"] == nil {
		t.Fatal("Open did not add the blocks field")
	}
	a.Ino = 3002
	if _, err := s.Write(ctx, store.CreateInode(a)); err != nil {
		t.Fatal(err)
	}
	if err := s.Refresh(ctx, store.SearchedInodes); err != nil {
		t.Fatal(err)
	}
}
