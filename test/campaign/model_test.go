package campaign

import (
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestModelAgainstTmpfs: the campaign's operations, without faults, from
// three workers on one tmpfs: the model must agree with Linux call by
// call, and with the tree at the end.
func TestModelAgainstTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=256m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	seeds := []int64{1, 2, 3}
	if s := os.Getenv("ESFS_CAMPAIGN_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seeds = []int64{n}
	}
	d := 5 * time.Second
	if s := os.Getenv("ESFS_CAMPAIGN_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	for _, seed := range seeds {
		root, err := os.MkdirTemp(dir, "run-")
		if err != nil {
			t.Fatal(err)
		}
		res := Run(t, Config{Seed: seed, Duration: d, Roots: []string{root, root, root}})
		t.Logf("seed %d: %d operations %v", seed, total(res.Ops), res.Ops)
		for _, f := range res.Findings {
			t.Errorf("seed %d: %s: %s", seed, f.Class, f.Text)
		}
	}
}

func total(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// TestIsMix: what a failed flush may leave (mixedFlush) is, byte by byte,
// the file before it, after it, or zeros where its writes were to go;
// anything else (another write's bytes, zeros outside its writes, a size
// neither) is not.
func TestIsMix(t *testing.T) {
	before := []byte("aaaaaaaa")
	writes := []pwrite{{Off: 2, Len: 2}, {Off: 8, Len: 4}}
	after := []byte("aaBBaaaaCCCC")
	for _, c := range []struct {
		got  string
		want bool
	}{
		{"aaaaaaaa", true},                 // nothing landed
		{"aaBBaaaaCCCC", true},             // all of it
		{"aaBBaaaa", true},                 // the first chunk, not the size
		{"aaaaaaaaCCCC", true},             // the second chunk and the size
		{"aaaaaaaa\x00\x00\x00\x00", true}, // the size only
		{"aa\x00\x00aaaa", true},           // a dropped chunk's bytes as zeros
		{"a\x00BBaaaa", false},             // zeros outside the writes
		{"aaXXaaaa", false},                // bytes nobody wrote
		{"aaBBaaaaCC", false},              // a size neither before nor after
	} {
		if got := isMix(before, after, []byte(c.got), writes); got != c.want {
			t.Errorf("isMix(%q) = %v, want %v", c.got, got, c.want)
		}
	}
}
