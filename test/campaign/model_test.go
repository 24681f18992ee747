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
