package store_test

import (
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
