package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// The shared group: one filesystem mounted several times on the machine,
// the mounts working in one directory at once, and two of them handing
// files to each other. Each side is one filesystem mounted n times:
// esfs, one filesystem and n `esfs mount` processes (the default options
// and ESFS_BENCH_ESFS_FLAGS); JuiceFS, one Redis and one volume mounted n
// times with `juicefs mount -d`, each mount with its own cache
// directory; the loopback, one local directory under n loopback mounts
// (the local disk keeps them coherent: what n FUSE mounts cost when every
// call is a local system call).

// sharedWait bounds how long a mount may take to see what another did;
// past it the case fails.
const sharedWait = 2 * time.Minute

// poll calls see until it says yes, every interval, and returns how long
// that took; see also says what it saw, for the failure.
func poll(t testing.TB, what string, every time.Duration, see func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, saw := see()
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > sharedWait {
			t.Fatalf("%s: not within %s (last saw %s)", what, sharedWait, saw)
		}
		time.Sleep(every)
	}
}

// listed waits until a listing of dir holds want entries, each named
// prefix…, and returns how long that took.
func listed(t testing.TB, dir, prefix string, want int) time.Duration {
	t.Helper()
	return poll(t, fmt.Sprintf("listing %s with %d entries %s*", dir, want, prefix), 10*time.Millisecond, func() (bool, string) {
		fh, err := os.Open(dir)
		if err != nil {
			return false, err.Error()
		}
		ns, err := fh.Readdirnames(-1)
		fh.Close()
		if err != nil {
			return false, err.Error()
		}
		named := 0
		for _, n := range ns {
			if strings.HasPrefix(n, prefix) {
				named++
			}
		}
		return len(ns) == want && named == want, fmt.Sprintf("%d entries, %d named %s*", len(ns), named, prefix)
	})
}

// onEach runs do(i) for every mount at once, one goroutine each, and
// returns the wall time; the test fails at once if any of them failed.
func onEach(t testing.TB, n int, do func(i int) error) time.Duration {
	t.Helper()
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if err := do(i); err != nil {
				t.Errorf("mount %d: %v", i, err)
			}
		}(i)
	}
	wg.Wait()
	took := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}
	return took
}

// sharedRep is one repetition of the shared create and rename on the
// mounts (a directory below each) of one filesystem: dir is made by the
// first mount and seen by all; every mount creates k files m<i>-<j> in
// it at once (timed); every mount lists them all; every mount renames
// its own to r<i>-<j> at once (timed); every mount lists the new names;
// the first removes the directory. It returns the two timed parts, and
// says in the log how long the mounts took to list what the others did.
func sharedRep(t testing.TB, side string, mnts []string, dir string, k int) (create, rename time.Duration) {
	t.Helper()
	n := len(mnts)
	if err := os.Mkdir(filepath.Join(mnts[0], dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, m := range mnts {
		p := filepath.Join(m, dir)
		poll(t, "seeing "+p, time.Millisecond, func() (bool, string) {
			_, err := os.Stat(p)
			return err == nil, fmt.Sprint(err)
		})
	}
	name := func(prefix string, i, j int) string { return fmt.Sprintf("%s%d-%d", prefix, i, j) }
	create = onEach(t, n, func(i int) error {
		for j := 0; j < k; j++ {
			p := filepath.Join(mnts[i], dir, name("m", i, j))
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				return fmt.Errorf("create %s: %v", p, err)
			}
			unix.Close(fd)
		}
		return nil
	})
	// Untimed: every mount lists every file before the renames, which
	// then find no name another mount has not told them of yet.
	var settled time.Duration
	for _, m := range mnts {
		settled = max(settled, listed(t, filepath.Join(m, dir), "m", n*k))
	}
	rename = onEach(t, n, func(i int) error {
		for j := 0; j < k; j++ {
			a, b := filepath.Join(mnts[i], dir, name("m", i, j)), filepath.Join(mnts[i], dir, name("r", i, j))
			if err := unix.Rename(a, b); err != nil {
				return fmt.Errorf("rename %s: %v", a, err)
			}
		}
		return nil
	})
	var renamed time.Duration
	for _, m := range mnts {
		renamed = max(renamed, listed(t, filepath.Join(m, dir), "r", n*k))
	}
	if err := os.RemoveAll(filepath.Join(mnts[0], dir)); err != nil {
		t.Fatalf("removing %s: %v", dir, err)
	}
	t.Logf("%s ×%d %s: the last mount listed all %d files %s after the creates, and their new names %s after the renames",
		side, n, dir, n*k, fmtDur(settled), fmtDur(renamed))
	return create, rename
}

// handoff runs n rounds of: a creates h<r> (create, write, close),
// b polls until it reads it whole, b creates g<r>, a polls until it
// reads it. a and b are the same directory through two mounts. It
// returns the wall time, and says in the log which wait was the longest.
func handoff(t testing.TB, side, a, b string, n int) time.Duration {
	t.Helper()
	write := func(p, body string) {
		fh, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteString(body); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	read := func(p, body string) time.Duration {
		return poll(t, "reading "+p, time.Millisecond, func() (bool, string) {
			got, err := os.ReadFile(p)
			if err != nil {
				return false, err.Error()
			}
			return string(got) == body, fmt.Sprintf("%q", got)
		})
	}
	var waits []time.Duration
	start := time.Now()
	for r := 0; r < n; r++ {
		h, g := fmt.Sprintf("h%d", r), fmt.Sprintf("g%d", r)
		write(filepath.Join(a, h), "from A, round "+h+"\n")
		waits = append(waits, read(filepath.Join(b, h), "from A, round "+h+"\n"))
		write(filepath.Join(b, g), "from B, round "+g+"\n")
		waits = append(waits, read(filepath.Join(a, g), "from B, round "+g+"\n"))
	}
	took := time.Since(start)
	t.Logf("%s handoff %s: %d rounds in %s; waits for the other mount's file: median %s, longest %s",
		side, filepath.Base(a), n, fmtDur(took), fmtDur(median(waits)), fmtDur(maxOf(waits)))
	return took
}

func maxOf(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

// sharedMounts mounts each side's filesystem n times and returns the
// mount points, and the raw client of the esfs filesystem's indices.
func (s *suite) sharedMounts(n int) (esfs, juice, loop []string, r *raw) {
	t := s.t
	f := mounttest.NewFS(t)
	r = newRaw(t, f.Index)
	for i := 0; i < n; i++ {
		esfs = append(esfs, f.MountAt(t, t.TempDir(), nil, strings.Fields(os.Getenv("ESFS_BENCH_ESFS_FLAGS"))...).Dir)
	}
	v := newJuiceVolume(t)
	s.peerVersions = v.versions
	for i := 0; i < n; i++ {
		juice = append(juice, v.mount(t, fmt.Sprint(i)))
	}
	orig := t.TempDir()
	for i := 0; i < n; i++ {
		loop = append(loop, mountLoopbackOver(t, orig))
	}
	return esfs, juice, loop, r
}

func benchShared(s *suite) {
	k, hand := 500, 200
	if s.scale != "full" {
		k, hand = 100, 50
	}
	for _, n := range []int{2, 4} {
		// A subtest for each n: its mounts are gone (its cleanups) before
		// the next n mounts its own, whether it passed or not.
		s.t.Run(fmt.Sprintf("x%d", n), func(t *testing.T) {
			sub := &suite{t: t, scale: s.scale, reps: s.reps}
			esfs, juice, loop, r := sub.sharedMounts(n)
			reps := [4]int{}
			side := func(j int, name string, mnts []string) func() []time.Duration {
				return func() []time.Duration {
					reps[j]++
					c, r := sharedRep(t, name, mnts, fmt.Sprintf("shared-%d", reps[j]), k)
					took := []time.Duration{c, r}
					// The handoff is between two mounts: it runs with
					// the ×2 rows only.
					if n == 2 {
						dir := fmt.Sprintf("handoff-%d", reps[j])
						if err := os.Mkdir(filepath.Join(mnts[0], dir), 0o755); err != nil {
							t.Fatal(err)
						}
						p := filepath.Join(mnts[1], dir)
						poll(t, "seeing "+p, time.Millisecond, func() (bool, string) {
							_, err := os.Stat(p)
							return err == nil, fmt.Sprint(err)
						})
						took = append(took, handoff(t, name, filepath.Join(mnts[0], dir), p, hand))
					}
					return took
				}
			}
			floor := func() []time.Duration {
				reps[3]++
				h := 0
				if n == 2 {
					h = hand
				}
				return sharedFloor(t, r, n, k, reps[3], h)
			}
			res := rounds(s.reps, side(0, "esfs", esfs), side(1, "JuiceFS", juice), side(2, "loopback", loop), floor)
			sub.addPeer(peerRow{name: fmt.Sprintf("shared create ×%d", n), ops: n * k,
				workload: fmt.Sprintf("%d mounts of one filesystem each create %d files (creat + close) in the same directory at once, a thread each (files/s)", n, k),
				esfs:     column(res[0], 0), juice: column(res[1], 0), loop: column(res[2], 0)})
			sub.addPeer(peerRow{name: fmt.Sprintf("shared rename ×%d", n), ops: n * k,
				workload: fmt.Sprintf("the same %d mounts each rename their own %d files within that directory at once, a thread each, once every mount lists them all (renames/s)", n, k),
				esfs:     column(res[0], 1), juice: column(res[1], 1), loop: column(res[2], 1)})
			if n == 2 {
				sub.addPeer(peerRow{name: "handoff ×2", ops: hand,
					workload: fmt.Sprintf("two mounts take turns, %d rounds: A creates and writes a small file in a shared directory, B polls (open + read, 1 ms apart) until it reads it whole, then B answers the same way and A polls (rounds/s)", hand),
					esfs:     column(res[0], 2), juice: column(res[1], 2), loop: column(res[2], 2)})
			}
			// Each against its protocol floor, in the main table.
			sub.add(row{name: fmt.Sprintf("shared_create_%d", n), workload: fmt.Sprintf("%d mounts each create %d files in one directory at once", n, k),
				floor: "the protocol's minimum as raw requests, a client per mount: lookup, then one bulk (inode, name, directory times) per file",
				esfs:  column(res[0], 0), base: column(res[3], 0), target: "≤ 1.3", limit: 1.3})
			sub.add(row{name: fmt.Sprintf("shared_rename_%d", n), workload: fmt.Sprintf("%d mounts each rename their %d files in that directory at once", n, k),
				floor: "the protocol's minimum as raw requests, a client per mount: lookup, locks, re-check, record with stage, commit; finish and release not waited for",
				esfs:  column(res[0], 1), base: column(res[3], 1), target: "≤ 1.3", limit: 1.3})
			if n == 2 {
				sub.add(row{name: "handoff_2", workload: fmt.Sprintf("two mounts hand %d new small files to each other in turn", hand),
					floor: "the protocol's minimum as raw requests: writer lookup + one bulk (inode, name, data, times), reader lookup + one mget (inode, data)",
					esfs:  column(res[0], 2), base: column(res[3], 2), target: "≤ 1.3", limit: 1.3})
			}
			s.rows = append(s.rows, sub.rows...)
			s.peers = append(s.peers, sub.peers...)
			if sub.peerVersions != "" {
				s.peerVersions = sub.peerVersions
			}
		})
	}
}
