package store_test

import (
	"fmt"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestScanMoreThan10000(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 12,000 documents")
	}
	s := testenv.Store(t)
	ctx := ctxT(t)
	const n = 12000
	ops := []store.BulkOp{store.CreateDentry(dentry("/big", 50, store.TypeDir))}
	for i := 0; i < n; i++ {
		ops = append(ops, store.CreateDentry(dentry(fmt.Sprintf("/big/f%05d", i), uint64(1000+i), store.TypeFile)))
	}
	ops = append(ops, store.CreateDentry(dentry("/bigger", 51, store.TypeFile))) // a sibling sharing the prefix
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedPaths); err != nil {
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
		if _, err := s.Write(ctx, store.CreateDentry(d)); err != nil {
			t.Fatal(err)
		}
	}
	_ = s.Refresh(ctx, store.SearchedPaths)
	sc := s.ScanOp("rename-1", 10)
	defer sc.Close()
	page, _, err := sc.Next(ctx)
	if err != nil || len(page) != 2 || page[0].Path != "/o1" || page[1].Intent.Role != store.RoleDst {
		t.Fatalf("%+v %v", page, err)
	}
}
