package store_test

import (
	"testing"

	"github.com/esfs/esfs/store"
)

// TestSplit: the directory and name of every path, a damaged document's
// (no slash, empty) included, without a panic; Join puts back those of
// an absolute path.
func TestSplit(t *testing.T) {
	for _, c := range []struct{ path, dir, name string }{
		{"/", "", ""},
		{"/a", "/", "a"},
		{"/a/b", "/a", "b"},
		{"/a/b c/d\ne", "/a/b c", "d\ne"},
		{"", "", ""},
		{"rel", "", "rel"},
	} {
		dir, name := store.Split(c.path)
		if dir != c.dir || name != c.name {
			t.Errorf("Split(%q) = %q, %q; want %q, %q", c.path, dir, name, c.dir, c.name)
		}
		if dir != "" && store.Join(dir, name) != c.path {
			t.Errorf("Join(Split(%q)) = %q", c.path, store.Join(dir, name))
		}
	}
}
