package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// The first_walk group: the first walk of a tree by a mount that has
// never seen it, which is what a user meets after every mount (a backup,
// an indexer, a build tool's scan). The tree: ESFS_BENCH_WALK_FILES files
// (default 30,000 full, 3,000 quick) in directories of 300, of 64 bytes
// but one in a hundred of 4 KiB, written into esfs by `esfs import`.
//
// Each repetition mounts esfs afresh, drops the kernel's caches and times
// a walk (GNU `find DIR -size +3k`, then on another fresh mount
// `ls -lR DIR >/dev/null`); then, on the same mount, drops the kernel's
// caches again and times the same walk: that second walk is the floor,
// what the mount costs once it knows the tree (the daemon's own caches,
// as far as they last). The main table has esfs's first walk over its
// second; the peer table has esfs's first walk against JuiceFS's (the
// same tree copied in with `cp -a`, each walk on a fresh `juicefs mount`
// of the volume) and the loopback's (over the local tree), the kernel's
// caches dropped the same way.
func benchFirstWalk(s *suite) {
	t := s.t
	n := s.n(30000)
	if v := os.Getenv("ESFS_BENCH_WALK_FILES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 300 {
			t.Fatalf("ESFS_BENCH_WALK_FILES=%q: want a number of files, at least 300", v)
		}
	}
	src, dirs, big := walkTree(t, n)

	f := mounttest.NewFS(t)
	start := time.Now()
	if out, err := f.Run("import", src, "/t"); err != nil {
		t.Fatalf("esfs import of %d files: %v\n%s", n, err, tail(out, 20))
	}
	t.Logf("esfs import of %d files: %s", n, fmtDur(time.Since(start)))
	jv := newJuiceVolume(t)
	s.peerVersions = jv.versions
	load := jv.mount(t, "load")
	start = time.Now()
	output(t, "cp", "-a", src, filepath.Join(load, "t"))
	t.Logf("cp -a of %d files into JuiceFS: %s", n, fmtDur(time.Since(start)))
	jv.unmount(t, load)

	walks := []struct {
		name string
		args func(dir string) []string
		// lines is how many files the walk prints, -1: not counted (its
		// output goes to /dev/null). Directories may be printed too: a
		// directory's size differs from one filesystem to the next
		// (JuiceFS and ext4 say 4 KiB or more, which -size +3k takes).
		lines int
	}{
		{"find", func(dir string) []string { return []string{"find", dir, "-size", "+3k"} }, big},
		{"ls -lR", func(dir string) []string { return []string{"ls", "-lR", dir} }, -1},
	}
	// walk runs one of them on dir, the kernel's caches dropped and the
	// mount's processes idle again first (after the forgets the drop sends
	// them), and returns its time.
	walk := func(w int, dir string, pids []int) time.Duration {
		dropCaches(t)
		for _, pid := range pids {
			waitIdle(t, pid)
		}
		args := walks[w].args(dir)
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		var out bytes.Buffer
		if walks[w].lines >= 0 {
			cmd.Stdout = &out
		}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		start := time.Now()
		err := cmd.Run()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, tail(stderr.String(), 20))
		}
		if got := fileLines(out.String()); walks[w].lines >= 0 && got != walks[w].lines {
			t.Fatalf("%s printed %d files, want %d:\n%s", strings.Join(args, " "), got, walks[w].lines, tail(out.String(), 20))
		}
		return took
	}
	// Each side returns, for each walk, its first and its second time, on
	// a fresh mount of its own.
	flags := strings.Fields(os.Getenv("ESFS_BENCH_ESFS_FLAGS"))
	esfsSide := func() []time.Duration {
		var out []time.Duration
		for w := range walks {
			m := f.MountAt(t, t.TempDir(), nil, flags...)
			out = append(out, walk(w, m.Path("t"), []int{m.Pid()}), walk(w, m.Path("t"), []int{m.Pid()}))
			m.Unmount(t)
		}
		return out
	}
	juiceMounts := 0
	juiceSide := func() []time.Duration {
		var out []time.Duration
		for w := range walks {
			juiceMounts++
			mnt := jv.mount(t, fmt.Sprintf("walk%d", juiceMounts))
			pids := mountPids(mnt)
			out = append(out, walk(w, filepath.Join(mnt, "t"), pids), walk(w, filepath.Join(mnt, "t"), pids))
			jv.unmount(t, mnt)
		}
		return out
	}
	loopSide := func() []time.Duration {
		var out []time.Duration
		for w := range walks {
			mnt := mountLoopbackOver(t, src)
			pids := mountPids(mnt)
			out = append(out, walk(w, mnt, pids), walk(w, mnt, pids))
			output(t, "fusermount3", "-u", mnt)
			waitUnmounted(t, mnt)
		}
		return out
	}
	res := rounds(s.reps, esfsSide, juiceSide, loopSide)
	for w, wk := range walks {
		first, second := 2*w, 2*w+1
		e1, e2 := column(res[0], first), column(res[0], second)
		j1, j2 := column(res[1], first), column(res[1], second)
		l1, l2 := column(res[2], first), column(res[2], second)
		name := "first_walk " + wk.name
		cmd := strings.Join(wk.args("MNT/t"), " ")
		if wk.lines < 0 {
			cmd += " >/dev/null"
		}
		workload := fmt.Sprintf("`%s` on a fresh mount, kernel caches dropped (drop_caches 3): %d files in %d directories of 300 (64 B, 1%% of 4 KiB)", cmd, n, dirs)
		r := row{name: name, workload: workload,
			floor: "the same walk again on the same mount, kernel caches dropped again (its second walk)",
			esfs:  e1, base: e2, target: "≤ 2.0", limit: 2.0}
		r.note = fmt.Sprintf("first walks: esfs %s, JuiceFS %s, esfs's time ÷ JuiceFS's %s (target ≤ 3.3, i.e. esfs at least 0.3x JuiceFS's speed: the peer table's row); "+
			"first ÷ second walk of the peers: JuiceFS %s (%s then %s), loopback %s (%s then %s)",
			fmtDur(median(e1)), fmtDur(median(j1)), fmtRatio(median(timeRatios(e1, j1))),
			fmtRatio(median(timeRatios(j1, j2))), fmtDur(median(j1)), fmtDur(median(j2)),
			fmtRatio(median(timeRatios(l1, l2))), fmtDur(median(l1)), fmtDur(median(l2)))
		s.add(r)
		s.addPeer(peerRow{name: name, workload: workload + "; JuiceFS: the tree copied in with `cp -a`, each walk on a new `juicefs mount`; loopback: over the local tree, a new mount each walk",
			esfs: e1, juice: j1, loop: l1, target: "≥ 0.3 (esfs's time ≤ 3.3× JuiceFS's)", atLeast: 0.3})
	}
}

// walkTree writes the local tree of the first_walk group: n files, 300
// to a directory, of 64 bytes but one in a hundred of 4 KiB. It returns
// the tree, how many directories and how many files of 4 KiB it has.
func walkTree(t testing.TB, n int) (src string, dirs, big int) {
	src = t.TempDir()
	small, large := []byte(strings.Repeat("walk\n", 12)+"1234"), bytes.Repeat([]byte("4 KiB of it\n"), 4096/12+1)[:4096]
	for i := 0; i < n; i++ {
		dir := filepath.Join(src, fmt.Sprintf("d%04d", i/300))
		if i%300 == 0 {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			dirs++
		}
		body := small
		if i%100 == 7 {
			body, big = large, big+1
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d", i)), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return src, dirs, big
}

// mountPids are the processes whose arguments name mnt: the daemons
// serving a mount that was started for the case (JuiceFS's, which
// `juicefs mount -d` leaves in the background, and the loopback's).
func mountPids(mnt string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(raw), "\x00"), mnt) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// timeRatios are the per-repetition ratios a ÷ b of two times.
func timeRatios(a, b []time.Duration) []float64 {
	out := make([]float64, len(a))
	for i := range a {
		out[i] = float64(a[i]) / float64(max(b[i], 1))
	}
	return out
}

// fileLines counts the lines of a walk's output that name one of
// walkTree's files.
func fileLines(out string) int {
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(filepath.Base(l), "f") && l != "" {
			n++
		}
	}
	return n
}
