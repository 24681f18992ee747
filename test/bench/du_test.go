package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// The du group: `esfs du -s` of a tree of 100,000 files (full;
// 10,000 quick) in 10 x 10 directories of 1,000, of sizes from 0 to
// 16 KiB, against GNU `du -s` of it through a mount, in the same run,
// the kernel's dentries and inodes dropped before each (so that GNU du
// asks the mount for every name and its attributes), and the mount idle
// again after the forgets that drop sends it: what the index's sums save
// over a walk of the tree one FUSE call at a time. The ratio is esfs
// du's time over GNU du's; the target is 20x faster.
func benchDu(s *suite) {
	t := s.t
	n := s.n(100000)
	src := t.TempDir()
	rnd := rand.New(rand.NewPCG(30, 0))
	per := n / 100
	for d := 0; d < 100; d++ {
		dir := filepath.Join(src, "t", fmt.Sprintf("d%d", d/10), fmt.Sprintf("e%d", d%10))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < per; i++ {
			body := make([]byte, rnd.IntN(16<<10+1))
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d", i)), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	f := mounttest.NewFS(t)
	if out, err := f.Run("import", filepath.Join(src, "t"), "/t"); err != nil {
		t.Fatalf("esfs import of %d files: %v\n%s", n, err, tail(out, 20))
	}
	m := f.MountAt(t, t.TempDir(), nil)
	tree := m.Path("t")
	env := []string{"LC_ALL=C"}
	for _, e := range os.Environ() {
		switch name, _, _ := strings.Cut(e, "="); name {
		case "DU_BLOCK_SIZE", "BLOCK_SIZE", "BLOCKSIZE", "POSIXLY_CORRECT", "LC_ALL":
		default:
			env = append(env, e)
		}
	}
	var gnuOut, esfsOut string
	run := func(out *string, name string, args ...string) time.Duration {
		dropDentries(t)
		// The kernel forgets the inodes it dropped, and tells the mount,
		// which then works through 100,000 forgets: done before the
		// clock starts, for either side.
		waitIdle(t, m.Pid())
		cmd := exec.Command(name, args...)
		cmd.Env = env
		start := time.Now()
		b, err := cmd.Output()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s %s: %v", name, strings.Join(args, " "), err)
		}
		*out = string(b)
		return took
	}
	esfs, gnu := s.ab(
		func() time.Duration {
			return run(&esfsOut, f.Bin, "du", "--es-url", f.URL, "--index", f.Index, "-s", tree)
		},
		func() time.Duration { return run(&gnuOut, "du", "-s", tree) },
	)
	if esfsOut != gnuOut {
		t.Fatalf("esfs du -s printed %q, GNU du -s through the mount %q", esfsOut, gnuOut)
	}
	var each []string
	for i := range esfs {
		each = append(each, fmt.Sprintf("%.0fx", float64(gnu[i])/float64(max(esfs[i], 1))))
	}
	r := row{name: fmt.Sprintf("du_s %d", n), workload: fmt.Sprintf("`esfs du -s` of a tree of %d files (100 directories of %d, 0 to 16 KiB), dentries and inodes dropped (drop_caches 2)", n, per),
		floor: "GNU `du -s` of it through a mount, the same dropped", esfs: esfs, base: gnu, target: "≤ 0.05 (20x faster)", limit: 0.05}
	r.note = fmt.Sprintf("esfs du -s %.0fx faster than GNU du -s through the mount (each repetition: %s)", 1/r.ratio(), strings.Join(each, ", "))
	s.add(r)
}

// dropDentries drops the kernel's dentries and inodes (drop_caches 2): the page cache, and with it the cluster's files,
// stays, as on a machine that did not just boot.
func dropDentries(t testing.TB) {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0o200); err != nil {
		t.Logf("dropping the kernel's dentries and inodes: %v", err)
	}
}

// waitIdle returns once process pid used no CPU for two tenths of a
// second in a row (at most 10 s).
func waitIdle(t testing.TB, pid int) {
	ticks := func() int64 {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return -1
		}
		// After the command's name, in parentheses: utime and stime are
		// the 12th and 13th fields.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
		if len(f) < 13 {
			return -1
		}
		user, _ := strconv.ParseInt(f[11], 10, 64)
		sys, _ := strconv.ParseInt(f[12], 10, 64)
		return user + sys
	}
	deadline := time.Now().Add(10 * time.Second)
	last, quiet := ticks(), 0
	for quiet < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		now := ticks()
		if now == last {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	if quiet < 2 {
		t.Logf("the mount (pid %d) was still busy after 10 s", pid)
	}
}
