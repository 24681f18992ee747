package store_test

import (
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
	if err := s.RefreshAll(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]int{}
	sc := s.ScanInodes()
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
