package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// The find group: esfs find, which asks the index,
// against GNU find of the same expression through a mount of the same
// tree (kernel caches dropped first, as the scale group's find), both
// printing the same lines. The tree: ESFS_BENCH_FIND_FILES files (default
// 100,000) in directories of 1,000, of 64 bytes but one in a hundred of
// 4 KiB, and one in a hundred (others) changed 30 days ago: each
// expression selects 1%.
func benchFind(s *suite) {
	t := s.t
	n := 100000
	if v := os.Getenv("ESFS_BENCH_FIND_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1000 {
			t.Fatalf("ESFS_BENCH_FIND_FILES=%q: want a number of files, at least 1000", v)
		}
	}
	src := t.TempDir()
	small, big := []byte(strings.Repeat("find\n", 12)+"1234"), bytes.Repeat([]byte("4 KiB of it\n"), 4096/12+1)[:4096]
	old := time.Now().Add(-30 * 24 * time.Hour)
	for i := 0; i < n; i++ {
		dir := filepath.Join(src, fmt.Sprintf("d%04d", i/1000))
		if i%1000 == 0 {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("f%06d", i))
		body := small
		if i%100 == 7 {
			body = big
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
		if i%100 == 42 {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := mounttest.NewFS(t)
	if out, err := f.Run("import", src, "/t"); err != nil {
		t.Fatalf("esfs import of %d files: %v\n%s", n, err, tail(out, 20))
	}
	m := f.MountAt(t, t.TempDir(), nil)
	root := m.Path("t")
	run := func(bin string, args ...string) (time.Duration, string) {
		start := time.Now()
		out, err := exec.Command(bin, args...).Output()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s %q: %v", bin, args, err)
		}
		return took, string(out)
	}
	for _, expr := range [][]string{{"-size", "+2k"}, {"-mtime", "+7"}} {
		var gnuOut, esfsOut string
		gnu := func() time.Duration {
			dropCaches(t) // the kernel's names and attributes: each pass asks the mount
			d, out := run("find", append([]string{root}, expr...)...)
			gnuOut = out
			return d
		}
		ours := func() time.Duration {
			// No drop: esfs find does not go through the mount (what GNU
			// find's drop evicted of Elasticsearch's files it pays for).
			d, out := run(f.Bin, append([]string{"find", "--es-url", f.URL, "--index", f.Index, root}, expr...)...)
			esfsOut = out
			return d
		}
		esfs, base := s.ab(ours, gnu)
		if lines := strings.Count(esfsOut, "\n"); esfsOut != gnuOut || lines != n/100 {
			t.Fatalf("find %s: esfs find printed %d lines, GNU find %d (want %d, the same)", strings.Join(expr, " "), lines, strings.Count(gnuOut, "\n"), n/100)
		}
		what := strings.Join(expr, " ")
		s.add(row{name: fmt.Sprintf("find %s", expr[0]), workload: fmt.Sprintf("`esfs find MNT %s` on %d files (1%% match)", what, n),
			floor: fmt.Sprintf("GNU `find MNT %s` through the mount, kernel caches dropped", what),
			esfs:  esfs, base: base, target: "≤ 0.05 (20x faster)", limit: 0.05})
	}
}
