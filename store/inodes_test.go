package store_test

import (
	"slices"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestScanInodesExactNumbers: inode numbers use 63 bits, past what a
// float64 holds exactly; the scan's paging must not round them, or inodes
// next to a page boundary are skipped or listed twice. 1001 consecutive
// numbers just above 2^62 (where a float64 step is 1024) span two pages.
func TestScanInodesExactNumbers(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	const n = store.DefaultPageSize + 1
	base := uint64(1) << 62
	ops := make([]store.BulkOp, 0, n)
	for i := uint64(1); i <= n; i++ {
		ops = append(ops, store.CreateInode(store.Inode{Ino: base + i, Type: store.TypeFile, Mode: 0o644, Nlink: 1}))
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedAll); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	sc := s.ScanInodes(store.AllInodes)
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Fatal(bad)
		}
		if page == nil {
			break
		}
		for _, a := range page {
			seen[a.Ino]++
		}
	}
	for i := uint64(1); i <= n; i++ {
		if seen[base+i] != 1 {
			t.Errorf("inode 2^62+%d listed %d times, want once", i, seen[base+i])
		}
	}
}

// TestInodeParents: the directories an inode records for its links
// follow a link, an unlink and a rename as the calls that make them say,
// decide which directory's delegations hold its attributes (one link, one
// directory recorded), and are stored and read back as they are; a
// directory records none.
func TestInodeParents(t *testing.T) {
	const s, x, d = 10, 20, 30
	f := store.Inode{Ino: 1 << 30, Type: store.TypeFile, Mode: 0o644, Nlink: 1, Parents: []uint64{s}}
	if got := f.HeldBy(); got != s {
		t.Errorf("one link in %d: held by %d", s, got)
	}
	linked := f.Linked(x)
	if linked.Nlink != 2 || !slices.Equal(linked.Parents, []uint64{s, x}) || linked.HeldBy() != 0 {
		t.Errorf("linked into %d: %+v, held by %d; want links 2 in [%d %d], held by none", x, linked, linked.HeldBy(), s, x)
	}
	if len(f.Parents) != 1 {
		t.Errorf("Linked changed its receiver: %v", f.Parents)
	}
	moved, ok := linked.MoveParent(store.ParentMove{Ino: f.Ino, From: s, To: d})
	if !ok || !slices.Equal(moved.Parents, []uint64{d, x}) {
		t.Errorf("the link in %d renamed to %d: %v, %v", s, d, moved.Parents, ok)
	}
	if _, ok := moved.MoveParent(store.ParentMove{Ino: f.Ino, From: s, To: d}); ok {
		t.Errorf("a link not recorded in %d moved again", s)
	}
	left := moved.Unlinked(d)
	if left.Nlink != 1 || !slices.Equal(left.Parents, []uint64{x}) || left.HeldBy() != x {
		t.Errorf("the link in %d removed: %+v, held by %d; want the one in %d", d, left, left.HeldBy(), x)
	}
	if u := moved.Unlinked(0); u.Nlink != 1 || len(u.Parents) != 0 || u.HeldBy() != 0 {
		t.Errorf("a link removed from a directory not known: %+v, held by %d; want none recorded", u, u.HeldBy())
	}
	// One link: wherever the inode said it was, it is where it was moved.
	old := store.Inode{Ino: f.Ino, Type: store.TypeFile, Nlink: 1}
	if m, ok := old.MoveParent(store.ParentMove{Ino: f.Ino, From: s, To: d}); !ok || m.HeldBy() != d {
		t.Errorf("a file of an older esfs moved to %d: %v, %v", d, m.Parents, ok)
	}
	if _, ok := f.MoveParent(store.ParentMove{Ino: f.Ino, From: s, To: s}); ok {
		t.Error("a rename within a directory moved something")
	}
	dir := store.Inode{Ino: 1<<30 + 1, Type: store.TypeDir, Mode: 0o755, Nlink: 2}
	if dir.HeldBy() != dir.Ino || len(dir.Linked(s).Parents) != 0 {
		t.Errorf("a directory: held by %d, linked records %v", dir.HeldBy(), dir.Linked(s).Parents)
	}

	st := testenv.Store(t)
	ctx := ctxT(t)
	for _, a := range []store.Inode{linked, dir} {
		if _, err := st.Write(ctx, store.CreateInode(a)); err != nil {
			t.Fatal(err)
		}
		got, err := st.GetInode(ctx, a.Ino)
		if err != nil || !slices.Equal(got.Parents, a.Parents) {
			t.Errorf("inode %d stored with %v, read back %v, %v", a.Ino, a.Parents, got.Parents, err)
		}
	}
}

// TestDirLinksLanded: a count write whose outcome is unknown is told
// landed or not from the directory read after it, whatever else changed
// it, as long as the document names every count change since.
func TestDirLinksLanded(t *testing.T) {
	base := store.Inode{Ino: 7, Type: store.TypeDir, Nlink: 2, Ver: store.Version{SeqNo: 1, PrimaryTerm: 1}}
	sent, _ := store.WithDirLinks(base, 1, 5)
	other, _ := store.WithDirLinks(base, 1, 6) // another mount's, from the same read
	touched := base
	touched.Mtime, touched.Ver = 9, store.Version{SeqNo: 2, PrimaryTerm: 1}
	landed := sent
	landed.Ver = store.Version{SeqNo: 2, PrimaryTerm: 1}
	afterOther := other
	afterOther.Ver = store.Version{SeqNo: 2, PrimaryTerm: 1}
	many := landed
	for i := 0; i < store.LinkOpsKept; i++ {
		many, _ = store.WithDirLinks(many, 1, 0)
	}
	many.Ver = store.Version{SeqNo: 20, PrimaryTerm: 1}
	fewer := landed
	for i := 0; i < store.LinkOpsKept-1; i++ {
		fewer, _ = store.WithDirLinks(fewer, 1, 0)
	}
	fewer.Ver = store.Version{SeqNo: 19, PrimaryTerm: 1}
	for _, tc := range []struct {
		name          string
		cur           store.Inode
		landed, known bool
	}{
		{"unchanged", base, false, true},
		{"its times changed by a create", touched, false, true},
		{"landed", landed, true, true},
		{"another count change landed instead", afterOther, false, true},
		{"landed, then as many changes as are named", fewer, true, true},
		{"landed, then more changes than are named", many, false, false},
	} {
		landed, known := store.DirLinksLanded(tc.cur, sent)
		if landed != tc.landed || known != tc.known {
			t.Errorf("%s: landed %v, known %v; want %v, %v", tc.name, landed, known, tc.landed, tc.known)
		}
	}
	if len(many.LinkOps) != store.LinkOpsKept || many.LinkSeq != uint64(store.LinkOpsKept+1) {
		t.Errorf("after %d changes: %d named, seq %d", store.LinkOpsKept+1, len(many.LinkOps), many.LinkSeq)
	}
}
