package cmd

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestParseDu: du's command line as GNU getopt_long reads it.
func TestParseDu(t *testing.T) {
	admin := []cli.Flag{&cli.StringFlag{Name: "index"}, &cli.BoolFlag{Name: "debug"}, &cli.StringFlag{Name: "es-url"}}
	for _, c := range []struct {
		args []string
		want duOptions
		set  map[string]string
	}{
		{[]string{"-sh", "/a"}, duOptions{summarize: true, units: duUnits{blockSize: 1, autoscale: true}, paths: []string{"/a"}}, nil},
		{[]string{"/a", "-ach", "/b"}, duOptions{all: true, total: true, units: duUnits{blockSize: 1, autoscale: true}, paths: []string{"/a", "/b"}}, nil},
		{[]string{"-d1", "x"}, duOptions{maxDepth: 1, depthGiven: true, paths: []string{"x"}}, nil},
		{[]string{"-ad", "2", "x"}, duOptions{all: true, maxDepth: 2, depthGiven: true, paths: []string{"x"}}, nil},
		{[]string{"--max=3", "--app", "x"}, duOptions{apparent: true, maxDepth: 3, depthGiven: true, paths: []string{"x"}}, nil},
		{[]string{"--max-depth", "0", "x"}, duOptions{maxDepth: 0, depthGiven: true, paths: []string{"x"}}, nil},
		{[]string{"-b", "-h"}, duOptions{apparent: true, units: duUnits{blockSize: 1, autoscale: true}}, nil},
		{[]string{"-h", "-b"}, duOptions{apparent: true, units: duUnits{blockSize: 1}}, nil},
		{[]string{"--si", "-m"}, duOptions{units: duUnits{blockSize: 1 << 20}}, nil},
		{[]string{"-k", "--", "-s", "--all"}, duOptions{paths: []string{"-s", "--all"}}, nil},
		{[]string{"-", "x"}, duOptions{paths: []string{"-", "x"}}, nil},
		{[]string{"--index", "fs2", "--debug", "--es-url=http://h:1", "x"}, duOptions{paths: []string{"x"}},
			map[string]string{"index": "fs2", "debug": "true", "es-url": "http://h:1"}},
		{[]string{"--help"}, duOptions{help: true}, nil},
	} {
		set := map[string]string{}
		got, err := parseDu(c.args, admin, func(name, value string) error { set[name] = value; return nil })
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		want := c.want
		if !want.depthGiven {
			want.maxDepth = -1
		}
		if want.units == (duUnits{}) {
			want.units = duUnits{blockSize: 1024}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q:\n got  %+v\n want %+v", c.args, got, want)
		}
		if c.set == nil {
			c.set = map[string]string{}
		}
		if !reflect.DeepEqual(set, c.set) {
			t.Errorf("%q: set %v, want %v", c.args, set, c.set)
		}
	}
	for _, bad := range [][]string{{"-x"}, {"--frob"}, {"--s"}, {"-d"}, {"-d", "x"}, {"--max-depth=-1"}, {"--all=1"}, {"--index"}} {
		if _, err := parseDu(bad, admin, func(string, string) error { return nil }); err == nil {
			t.Errorf("%q: no error", bad)
		} else if ExitCode(err) != 2 {
			t.Errorf("%q: %v is not a usage mistake", bad, err)
		}
	}
}

// TestFtsShown: operands as fts keeps them, and the paths it makes of
// their entries.
func TestFtsShown(t *testing.T) {
	for in, want := range map[string]string{"a": "a", "a/": "a/", "a//": "a/", "a///": "a/", "/": "/", "//": "//", "///": "/", ".": ".", "./": "./"} {
		if got := ftsShown(in); got != want {
			t.Errorf("ftsShown(%q) = %q, want %q", in, got, want)
		}
	}
	for _, c := range [][3]string{{"a", "x", "a/x"}, {"a/", "x", "a/x"}, {"/", "x", "/x"}, {"//", "x", "//x"}, {".", "x", "./x"}} {
		if got := childPath(c[0], c[1]); got != c[2] {
			t.Errorf("childPath(%q, %q) = %q, want %q", c[0], c[1], got, c[2])
		}
	}
}

// TestSortListing: fts's order (gnulib fts_build): readdir's (the
// store's, by name) up to 10,000 entries; past that sorted by inode
// number, in batches of 100,000 read in name order.
func TestSortListing(t *testing.T) {
	mk := func(n int, ino func(i int) uint64) []*duNode {
		var out []*duNode
		for i := 0; i < n; i++ {
			out = append(out, &duNode{name: fmt.Sprintf("n%06d", i), ino: ino(i)})
		}
		return out
	}
	rev := func(n int) func(int) uint64 { return func(i int) uint64 { return uint64(n - i) } }
	names := func(ns []*duNode) []string {
		var out []string
		for _, n := range ns {
			out = append(out, n.name)
		}
		return out
	}
	// At 10,000 entries, name order whatever the inodes.
	small := mk(10000, rev(10000))
	slices.Reverse(small)
	sortListing(small, 10000)
	if !slices.IsSortedFunc(small, func(a, b *duNode) int { return strings.Compare(a.name, b.name) }) {
		t.Error("10,000 entries: not in name order")
	}
	// At 10,001, inode order; the known entries of such a directory too.
	big := mk(10001, rev(10001))
	sortListing(big, 10001)
	if big[0].name != "n010000" || big[10000].name != "n000000" {
		t.Errorf("10,001 entries: %q ... %q, want inode order", big[0].name, big[10000].name)
	}
	some := []*duNode{{name: "a", ino: 9}, {name: "b", ino: 3}}
	sortListing(some, 20000)
	if got := names(some); !slices.Equal(got, []string{"b", "a"}) {
		t.Errorf("2 known entries of 20,000: %q, want inode order", got)
	}
	// Past 100,000: batches in name order, each of more than 10,000 by
	// inode: 100,000 then 10,001 (sorted), or 100,000 then 5 (not).
	for _, n := range []int{110001, 100005} {
		all := mk(n, rev(n))
		slices.Reverse(all)
		sortListing(all, int64(n))
		if all[0].name != "n099999" || all[99999].name != "n000000" {
			t.Errorf("%d entries: first batch %q ... %q, want inode order of the first 100,000 names", n, all[0].name, all[99999].name)
		}
		if n == 110001 && (all[100000].name != fmt.Sprintf("n%06d", n-1) || all[n-1].name != "n100000") {
			t.Errorf("%d entries: second batch %q ... %q, want inode order", n, all[100000].name, all[n-1].name)
		}
		if n == 100005 && (all[100000].name != "n100000" || all[n-1].name != "n100004") {
			t.Errorf("%d entries: last batch %q ... %q, want name order", n, all[100000].name, all[n-1].name)
		}
	}
}
