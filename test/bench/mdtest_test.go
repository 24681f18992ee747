package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mdtestPhases are the phases of one mdtest-like run, in the order they
// run; each is a tight loop of one system call, one thread, as mdtest's.
var mdtestPhases = []struct {
	name, what string
	entries    bool // counts directory entries read, not calls
	atLeast    float64
}{
	{"mkdir", "mkdir", false, 1},
	{"create", "creat + close", false, 1},
	{"stat", "lstat of each file", false, 3},
	{"readdir", "getdents of each directory (entries/s)", true, 3},
	{"file rename", "rename of each file within its directory", false, 1},
	{"unlink", "unlink", false, 1},
	{"rmdir", "rmdir", false, 1},
}

// mdtest creates dirs directories below root (untimed), then runs the
// phases on perDir subdirectories and perDir files in each, and removes
// the directories and root again. It returns each phase's duration.
func mdtest(t testing.TB, root string, dirs, perDir int) []time.Duration {
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	top := make([]string, dirs)
	for i := range top {
		top[i] = filepath.Join(root, fmt.Sprintf("d%d", i))
		if err := os.Mkdir(top[i], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	each := func(prefix string) []string {
		var out []string
		for _, d := range top {
			for j := 0; j < perDir; j++ {
				out = append(out, filepath.Join(d, fmt.Sprintf("%s%05d", prefix, j)))
			}
		}
		return out
	}
	subdirs, files, renamed := each("s"), each("f"), each("g")
	must := func(what, p string, err error) {
		if err != nil {
			t.Fatalf("%s %s: %v", what, p, err)
		}
	}
	var took []time.Duration
	timed := func(phase func()) {
		start := time.Now()
		phase()
		took = append(took, time.Since(start))
	}
	timed(func() {
		for _, p := range subdirs {
			must("mkdir", p, unix.Mkdir(p, 0o755))
		}
	})
	timed(func() {
		for _, p := range files {
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			must("create", p, err)
			unix.Close(fd)
		}
	})
	timed(func() {
		var st unix.Stat_t
		for _, p := range files {
			must("lstat", p, unix.Lstat(p, &st))
		}
	})
	timed(func() {
		for _, d := range top {
			fh, err := os.Open(d)
			must("open", d, err)
			// Names only: getdents, no stat of each entry.
			ns, err := fh.Readdirnames(-1)
			must("readdir", d, err)
			fh.Close()
			if len(ns) != 2*perDir {
				t.Fatalf("readdir %s: %d entries, want %d", d, len(ns), 2*perDir)
			}
		}
	})
	timed(func() {
		for i, p := range files {
			must("rename", p, unix.Rename(p, renamed[i]))
		}
	})
	timed(func() {
		for _, p := range renamed {
			must("unlink", p, unix.Unlink(p))
		}
	})
	timed(func() {
		for _, p := range subdirs {
			must("rmdir", p, unix.Rmdir(p))
		}
	})
	for _, d := range append(top, root) {
		must("rmdir", d, unix.Rmdir(d))
	}
	return took
}

func benchMdtest(s *suite) {
	t := s.t
	const dirs = 8
	n := 4000
	if s.scale != "full" {
		n = 800
	}
	perDir := n / dirs
	esfs, juice, loop := s.peerMounts()
	reps := [3]int{}
	side := func(k int, root string) func() []time.Duration {
		return func() []time.Duration {
			reps[k]++
			return mdtest(t, filepath.Join(root, fmt.Sprintf("mdtest-%d", reps[k])), dirs, perDir)
		}
	}
	res := rounds(s.reps, side(0, esfs), side(1, juice), side(2, loop))
	for i, p := range mdtestPhases {
		r := peerRow{name: "mdtest " + p.name, ops: n, workload: fmt.Sprintf("%s, %d in %d directories, one thread", p.what, n, dirs),
			esfs: column(res[0], i), juice: column(res[1], i), loop: column(res[2], i),
			target: fmt.Sprintf("≥ %.0f", p.atLeast), atLeast: p.atLeast}
		if p.entries {
			r.ops = 2 * n
			r.workload = fmt.Sprintf("%s, %d directories of %d files and %d subdirectories", p.what, dirs, perDir, perDir)
		}
		s.addPeer(r)
	}
}
