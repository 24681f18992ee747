package store_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestFindConds: Elasticsearch selects with find's conditions exactly the
// documents Cond.Holds says they hold for (which cmd's tests check to
// hold for every file find prints): names with glob and regular
// expression characters, other scripts, case folds beyond ASCII and
// bytes that are not UTF-8; depths; inode ranges and types.
func TestFindConds(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	names := []string{"a.txt", "A.TXT", "b.c", "x", "xy", "é", "É", "\u212a", "k", "K", "İ", "i", "ß", "bad\xff", "bad\x80x",
		"a*b", "q?", "br[ak]et", "back\\slash", "(p)", "a|b", "{x}", "#@&<>~\"", "dash-", "^$.+",
		"日本語", "\U0010ff80esc", "new\nline", " sp ace "}
	var ops []store.BulkOp
	var dentries []store.Dentry
	add := func(d store.Dentry) {
		d.Parent, d.Name = store.Split(d.Path)
		dentries = append(dentries, d)
		ops = append(ops, store.CreateDentry(d))
	}
	add(dentry("/f", 10, store.TypeDir))
	add(dentry("/f/sub", 11, store.TypeDir))
	add(dentry("/f/sub/deep", 12, store.TypeDir))
	for i, n := range names {
		add(dentry("/f/"+n, uint64(100+i), store.TypeFile))
		add(dentry("/f/sub/deep/"+n, uint64(200+i), store.TypeSymlink))
	}
	var inodes []store.Inode
	for i := 0; i < 40; i++ {
		n := store.Inode{Ino: uint64(1000 + i), Type: []store.FileType{store.TypeFile, store.TypeDir, store.TypeFifo}[i%3],
			Mode: uint32(0o644 + i), Uid: uint32(i % 4), Size: int64(i * 1000), Nlink: uint32(1 + i%3), Mtime: int64(i) * 1e12, Chunks: -1}
		inodes = append(inodes, n)
		ops = append(ops, store.CreateInode(n))
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedPaths|store.SearchedInodes); err != nil {
		t.Fatal(err)
	}
	scan := func(c store.Cond) []string {
		t.Helper()
		sc, err := s.SearchPaths("", nil, store.SearchFilter{Under: "/f", Where: c}, 1000)
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		var got []string
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil || len(bad) > 0 {
				t.Fatalf("%v: %v %v", c, err, bad)
			}
			if page == nil {
				return got
			}
			for _, d := range page {
				got = append(got, d.Path)
			}
		}
	}
	pathConds := []store.Cond{
		store.NameGlob("*.txt", false), store.NameGlob("*.TXT", true), store.NameGlob("?", false), store.NameGlob("??", true),
		store.NameGlob("k", true), store.NameGlob("i", true), store.NameGlob("É", true), store.NameGlob("SS", true),
		store.NameGlob("bad*", false), store.NameGlob("a\\*b", false), store.NameGlob("q\\?", false), store.NameGlob("br[[]ak]et", false),
		store.NameGlob("back\\\\slash", false), store.NameGlob("(p)", false), store.NameGlob("a|b", false), store.NameGlob("{x}", false),
		store.NameGlob("#@&<>~\"", false), store.NameGlob("dash-", false), store.NameGlob("^$.+", false), store.NameGlob("日*", false),
		store.NameGlob("\U0010ff80*", false), store.NameGlob("new?line", false), store.NameGlob("*[!a-z]*", true), store.NameGlob("[", false),
		store.NameIs("bad\xff"), store.NameIs("é"), store.PathDepth("/f", 1, 1), store.PathDepth("/f", 2, -1), store.PathDepth("/f", 0, 0),
		store.TypeIs(store.TypeSymlink), store.NotCond(store.TypeIs(store.TypeFile, store.TypeSymlink)),
		store.AnyOf(store.NameGlob("x*", false), store.AllOf(store.TypeIs(store.TypeDir), store.PathDepth("/f", 2, 2))),
	}
	for _, c := range pathConds {
		var want []string
		for _, d := range dentries {
			if c.Holds(d, nil) {
				want = append(want, d.Path)
			}
		}
		slices.Sort(want)
		got := scan(c)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("paths where %v:\n got  %q\n want %q", c, got, want)
		}
	}
	// Inodes: counted and scanned.
	inodeConds := []store.Cond{
		store.InodeRange(store.FieldSize, 5000, 12000), store.InodeRange(store.FieldMtime, 3e12, 1<<62),
		store.AllOf(store.TypeIs(store.TypeDir), store.InodeRange(store.FieldNlink, 2, 2)),
		store.NotCond(store.InodeRange(store.FieldUid, 0, 0)), store.InodeRange(store.FieldMode, 0o650, 0o7777),
	}
	for _, c := range inodeConds {
		var want []uint64
		for i := range inodes {
			if c.Holds(store.Dentry{}, &inodes[i]) {
				want = append(want, inodes[i].Ino)
			}
		}
		n, err := s.CountInodes(ctx, store.AllOf(c, store.InodeRange(store.FieldIno, 1000, 1999)))
		if err != nil || n != int64(len(want)) {
			t.Errorf("count of inodes where %v: %d %v, want %d", c, n, err, len(want))
		}
		sc := s.FindInodes(store.AllOf(c, store.InodeRange(store.FieldIno, 1000, 1999)), 7)
		var got []uint64
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil || len(bad) > 0 {
				t.Fatal(err, bad)
			}
			if page == nil {
				break
			}
			for _, a := range page {
				got = append(got, a.Ino)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("inodes where %v: %v, want %v", c, got, want)
		}
	}
	// Entry counts: directories with entries, and one without.
	plain, inFlight, err := s.EntryCounts(ctx, []string{"/f", "/f/sub", "/f/sub/deep", "/f/x"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"/f": int64(len(names)) + 1, "/f/sub": 1, "/f/sub/deep": int64(len(names))}; fmt.Sprint(plain) != fmt.Sprint(want) || len(inFlight) != 0 {
		t.Errorf("entry counts: %v %v, want %v", plain, inFlight, want)
	}
}
