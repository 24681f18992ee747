package test

// Advisory locks across mounts: flock(2), fcntl record locks and OFD locks
// taken on one mount are honoured by every other, kept across a rename,
// released at close, and freed (then reported lost) when their mount dies
// or is declared dead.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// flockN runs flock(1) -n with args on path: whether it got the lock.
func flockN(t *testing.T, path string, args ...string) bool {
	t.Helper()
	cmd := exec.Command("flock", append(append([]string{"-n"}, args...), path, "true")...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return false
	}
	t.Fatalf("flock -n %v %s: %v %s", args, path, err, out)
	return false
}

// tryFlock reports whether a flock (how, without waiting) of path is
// granted; one granted is unlocked at once (an unlock is synchronous, the
// last close that would also end it is not: see TestFlockAcrossMounts).
func tryFlock(t *testing.T, path string, how int) bool {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	switch err := unix.Flock(fd, how|unix.LOCK_NB); {
	case errors.Is(err, syscall.EWOULDBLOCK):
		return false
	case err != nil:
		t.Fatalf("flock %s: %v", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
		t.Fatalf("unlocking %s: %v", path, err)
	}
	return true
}

// waitFlocks waits until `esfs locks` shows exactly the file locks want,
// by their mode as it prints them ("flock exclusive pid 123", "flock
// shared pid 45", "flock exclusive (waiting)"), in any order: a probe
// that follows then knows what it meets. Without it a probe assumes an
// order that does not hold: a flock(1) started a moment ago may not have
// asked for its lock yet, and one that exited may hold its lock a moment
// longer (the kernel passes its last close, which ends the lock, after the
// process is gone), so a probe refused once may have met a leftover, and
// the next one get the lock.
func waitFlocks(t *testing.T, f *mounttest.FS, want ...string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	cols := regexp.MustCompile(`\s{2,}`)
	var last []string
	mounttest.WaitFor(t, fmt.Sprintf("esfs locks to show %q", want), 30*time.Second, func() bool {
		var got []string
		for _, l := range fileLocksLeft(t, f) {
			// PATH (file lock)  MODE  SESSION  OPERATION  AGE
			if c := cols.Split(strings.TrimSpace(l), -1); len(c) >= 2 {
				got = append(got, c[1])
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) && !slices.Equal(got, last) {
			t.Logf("esfs locks shows %q", got)
		}
		last = got
		return slices.Equal(got, want)
	})
}

// TestFlockAcrossMounts: flock(1) on two mounts of one filesystem, as
// cron jobs and deploy scripts use it: an exclusive lock refuses the
// other mount's, shared locks share, and a blocking flock on B returns
// soon after A's holder exits.
func TestFlockAcrossMounts(t *testing.T) {
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	if err := os.WriteFile(a.Path("lockfile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// -o: the command (sleep) does not inherit the locked open file, so
	// that the lock goes with flock itself.
	holder := exec.Command("flock", "-o", a.Path("lockfile"), "sleep", "600")
	holder.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-holder.Process.Pid, syscall.SIGKILL); _ = holder.Wait() })
	waitFlocks(t, f, fmt.Sprintf("flock exclusive pid %d", holder.Process.Pid))
	if flockN(t, b.Path("lockfile")) {
		t.Fatal("flock -n on B got the lock A holds")
	}
	if flockN(t, b.Path("lockfile"), "-s") {
		t.Fatal("flock -n -s on B got a shared lock while A holds it exclusively")
	}
	waiter := exec.Command("flock", b.Path("lockfile"), "true")
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- waiter.Wait() }()
	select {
	case err := <-waited:
		t.Fatalf("a blocking flock on B returned while A holds the lock: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	// A second waiter, killed while it waits, leaves no waiting marker.
	killed := exec.Command("flock", b.Path("lockfile"), "true")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	waitingMarkers := func() int {
		out, err := f.Run("locks")
		if err != nil {
			t.Fatalf("esfs locks: %v\n%s", err, out)
		}
		return strings.Count(out, "flock exclusive (waiting)")
	}
	mounttest.WaitFor(t, "both waiters' markers", 30*time.Second, func() bool { return waitingMarkers() == 2 })
	_ = killed.Process.Kill()
	_ = killed.Wait()
	mounttest.WaitFor(t, "the killed waiter's marker to go", 30*time.Second, func() bool { return waitingMarkers() == 1 })
	_ = holder.Process.Kill()
	released := time.Now()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("the blocking flock on B: %v", err)
		}
		t.Logf("B's blocking flock returned %s after A's holder was killed", time.Since(released).Round(time.Millisecond))
	case <-time.After(30 * time.Second):
		t.Fatal("B's blocking flock still waits 30s after A's holder exited")
	}

	// Shared locks share across mounts; an exclusive one is refused.
	shared := exec.Command("flock", "-o", "-s", a.Path("lockfile"), "sleep", "600")
	shared.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := shared.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(-shared.Process.Pid, syscall.SIGKILL); _ = shared.Wait() })
	// Once B's waiter's lock is gone (its last close) and A's holder has
	// its own.
	waitFlocks(t, f, fmt.Sprintf("flock shared pid %d", shared.Process.Pid))
	if flockN(t, b.Path("lockfile")) {
		t.Error("flock -n on B got an exclusive lock while A holds a shared one")
	}
	if !flockN(t, b.Path("lockfile"), "-s") {
		t.Error("flock -n -s on B refused while A holds a shared lock")
	}
	_ = syscall.Kill(-shared.Process.Pid, syscall.SIGKILL)

	// Upgrade and downgrade of one open file's flock, seen from two other
	// mounts.
	c := f.Mount(t)
	fd, err := unix.Open(a.Path("lockfile"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// A's shared holder and B's probe gone, at their last close.
	waitFlocks(t, f)
	if err := unix.Flock(fd, unix.LOCK_SH|unix.LOCK_NB); err != nil {
		t.Fatalf("a shared flock on A with no lock held anywhere: %v", err)
	}
	for _, step := range []struct {
		how          int
		shared, excl bool // what B and C may take then
		what         string
	}{
		{unix.LOCK_EX, false, false, "upgraded to exclusive"},
		{unix.LOCK_SH, true, false, "downgraded to shared"},
		{unix.LOCK_UN, true, true, "unlocked"},
	} {
		if err := unix.Flock(fd, step.how|unix.LOCK_NB); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		for _, m := range []*mounttest.Mount{b, c} {
			if got := tryFlock(t, m.Path("lockfile"), unix.LOCK_SH); got != step.shared {
				t.Errorf("A's lock %s: a shared flock on %s got it: %v, want %v", step.what, m.Dir, got, step.shared)
			}
			if got := tryFlock(t, m.Path("lockfile"), unix.LOCK_EX); got != step.excl {
				t.Errorf("A's lock %s: an exclusive flock on %s got it: %v, want %v", step.what, m.Dir, got, step.excl)
			}
		}
	}
}

// setlk is fcntl(F_SETLK) (or F_OFD_SETLK with ofd) of [start, start+n).
func setlk(fd int, typ int16, start, n int64, ofd bool) error {
	cmd := unix.F_SETLK
	if ofd {
		cmd = unix.F_OFD_SETLK
	}
	return unix.FcntlFlock(uintptr(fd), cmd, &unix.Flock_t{Type: typ, Whence: 0, Start: start, Len: n})
}

// TestRecordLocksAcrossMounts: fcntl record locks of byte ranges conflict
// across mounts as on one machine's local filesystem: reads share, an
// unlock in the middle splits a lock, a lock over the gap merges it back,
// F_GETLK reports the holder's range and type, a close of any descriptor
// of the file releases the process's record locks, and OFD locks belong
// to their open file.
func TestRecordLocksAcrossMounts(t *testing.T) {
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	if err := os.WriteFile(a.Path("db"), make([]byte, 200), 0o644); err != nil {
		t.Fatal(err)
	}
	open := func(p string) int {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	// This process holds locks through mount A; a helper process probes
	// through B (one process's record locks never conflict with each
	// other, whatever the mount).
	fa := open(a.Path("db"))
	defer unix.Close(fa)
	probe := func(typ string, start, n int64) string {
		t.Helper()
		code := fmt.Sprintf(`
import fcntl, os, struct
fd = os.open(%q, os.O_RDWR)
want = fcntl.F_WRLCK if %q == "w" else fcntl.F_RDLCK
try:
    fcntl.fcntl(fd, fcntl.F_SETLK, struct.pack("hhqqi", want, 0, %d, %d, 0))
    print("granted")
except OSError as e:
    got = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", want, 0, %d, %d, 0)))
    print("refused", e.errno, "held", "w" if got[0] == fcntl.F_WRLCK else "r", got[2], got[3])
`, b.Path("db"), typ, start, n, start, n)
		out, err := exec.Command("python3", "-c", code).CombinedOutput()
		if err != nil {
			t.Fatalf("probe on B: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	eagain := fmt.Sprint(int(syscall.EAGAIN))
	if err := setlk(fa, unix.F_WRLCK, 0, 100, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		typ      string
		start, n int64
		want     string
	}{
		{"r", 50, 10, "refused " + eagain + " held w 0 100"},
		{"w", 99, 1, "refused " + eagain + " held w 0 100"},
		{"w", 100, 50, "granted"},
	} {
		if got := probe(c.typ, c.start, c.n); got != c.want {
			t.Errorf("%s lock of %d+%d on B while A holds a write lock of 0+100: %q, want %q", c.typ, c.start, c.n, got, c.want)
		}
	}
	// Split: unlock 40-59.
	if err := unix.FcntlFlock(uintptr(fa), unix.F_SETLK, &unix.Flock_t{Type: unix.F_UNLCK, Start: 40, Len: 20}); err != nil {
		t.Fatal(err)
	}
	if got := probe("w", 40, 20); got != "granted" {
		t.Errorf("the gap A unlocked: %q", got)
	}
	if got := probe("w", 30, 20); got != "refused "+eagain+" held w 0 40" {
		t.Errorf("across the left part A kept: %q", got)
	}
	if got := probe("w", 55, 10); got != "refused "+eagain+" held w 60 40" {
		t.Errorf("across the right part A kept: %q", got)
	}
	// esfs locks lists both parts, with their holder.
	out, err := f.Run("locks")
	if err != nil {
		t.Fatalf("esfs locks: %v\n%s", err, out)
	}
	sessA := mounttest.Session(t, f, a).ID
	for _, want := range []string{"write 0-39 pid", "write 60-99 pid"} {
		if !regexp.MustCompile(`"/db" \(file lock\) +` + want + ` \d+ +` + sessA).MatchString(out) {
			t.Errorf("esfs locks does not list A's %q:\n%s", want, out)
		}
	}
	// Merge, and downgrade to a read lock: B may read-lock, not write.
	if err := setlk(fa, unix.F_RDLCK, 0, 100, false); err != nil {
		t.Fatal(err)
	}
	if got := probe("r", 10, 80); got != "granted" {
		t.Errorf("a read lock under A's read lock: %q", got)
	}
	if got := probe("w", 90, 5); got != "refused "+eagain+" held r 0 100" {
		t.Errorf("a write lock under A's merged read lock: %q", got)
	}
	// A close of another descriptor of the file (same process) releases
	// the process's record locks.
	other := open(a.Path("db"))
	unix.Close(other)
	if got := probe("w", 0, 100); got != "granted" {
		t.Errorf("after a close of another descriptor on A: %q, want the lock released", got)
	}

	// OFD locks: two open files of one process conflict with each other,
	// and one goes with its open file's last close.
	o1, o2 := open(a.Path("db")), open(a.Path("db"))
	defer unix.Close(o2)
	if err := setlk(o1, unix.F_WRLCK, 0, 10, true); err != nil {
		t.Fatal(err)
	}
	if err := setlk(o2, unix.F_WRLCK, 5, 10, true); !errors.Is(err, syscall.EAGAIN) {
		t.Errorf("an OFD lock of another open file over the first: %v, want EAGAIN", err)
	}
	if got := probe("w", 0, 1); got != "refused "+eagain+" held w 0 10" {
		t.Errorf("B while A holds an OFD lock: %q", got)
	}
	unix.Close(o1)
	mounttest.WaitFor(t, "the OFD lock to go with its open file", 10*time.Second, func() bool {
		return setlk(o2, unix.F_WRLCK, 5, 10, true) == nil
	})
}

// TestSQLiteAcrossMounts: two processes on two mounts insert into one
// SQLite database in BEGIN IMMEDIATE transactions: every row lands once,
// each transaction saw every one committed before it (the count it read
// is unique), and the database is intact.
func TestSQLiteAcrossMounts(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 (with its sqlite3 module) is needed")
	}
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	const script = `
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], timeout=120, isolation_level=None)
if sys.argv[2] == "init":
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT, seen INT)")
    sys.exit(0)
if sys.argv[2] == "check":
    print(*db.execute("SELECT COUNT(*), COUNT(DISTINCT seen), COUNT(DISTINCT v) FROM t").fetchone(), db.execute("PRAGMA integrity_check").fetchone()[0])
    sys.exit(0)
for i in range(int(sys.argv[3])):
    db.execute("BEGIN IMMEDIATE")
    n = db.execute("SELECT COUNT(*) FROM t").fetchone()[0]
    db.execute("INSERT INTO t(v, seen) VALUES (?, ?)", (sys.argv[2] + str(i), n))
    db.execute("COMMIT")
`
	run := func(m *mounttest.Mount, args ...string) *exec.Cmd {
		return exec.Command("python3", append([]string{"-c", script, m.Path("db.sqlite")}, args...)...)
	}
	if out, err := run(a, "init").CombinedOutput(); err != nil {
		t.Fatalf("creating the database: %v\n%s", err, out)
	}
	const n = 40
	ca, cb := run(a, "a", fmt.Sprint(n)), run(b, "b", fmt.Sprint(n))
	var outA, outB strings.Builder
	ca.Stdout, ca.Stderr, cb.Stdout, cb.Stderr = &outA, &outA, &outB, &outB
	start := time.Now()
	if err := ca.Start(); err != nil {
		t.Fatal(err)
	}
	if err := cb.Start(); err != nil {
		t.Fatal(err)
	}
	errA, errB := ca.Wait(), cb.Wait()
	if errA != nil || errB != nil {
		t.Fatalf("inserting: A %v %s; B %v %s", errA, outA.String(), errB, outB.String())
	}
	t.Logf("%d transactions from two mounts in %s", 2*n, time.Since(start).Round(time.Millisecond))
	for _, m := range []*mounttest.Mount{a, b} {
		out, err := run(m, "check").CombinedOutput()
		if err != nil {
			t.Fatalf("checking: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("%d %d %d ok", 2*n, 2*n, 2*n); got != want {
			t.Errorf("rows, distinct counts seen, distinct values, integrity read on %s: %q, want %q", m.Dir, got, want)
		}
	}
}

// TestFlockKeptAcrossRename: a lock belongs to the file, not its name.
func TestFlockKeptAcrossRename(t *testing.T) {
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	if err := os.WriteFile(a.Path("old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(a.Path("old"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b.Path("old"), b.Path("new")); err != nil {
		t.Fatal(err)
	}
	if flockN(t, b.Path("new")) {
		t.Error("flock -n on B of the renamed file got the lock A holds")
	}
	if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	if !flockN(t, b.Path("new")) {
		t.Error("flock -n on B refused after A unlocked")
	}
}

// TestFileLockOfDeadMount: the locks of a mount killed (kill -9 of its
// daemon) go to a waiter on another mount within lease plus grace; those
// of a mount frozen (SIGSTOP) past its lease go too, and once it wakes,
// its holder's next write through the descriptor fails with EIO, as on
// NFS after lost locks. The holder is a process of its own: a process
// with a descriptor on a frozen mount cannot even start another (exec
// closes it, and a close waits for the daemon).
func TestFileLockOfDeadMount(t *testing.T) {
	f := mounttest.NewFS(t)
	lease := "--lease=" + mounttest.Lease.String()
	b := f.Mount(t, lease)
	const holderScript = `
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
print("locked", flush=True)
for line in sys.stdin:
    try:
        os.pwrite(fd, b"v2", 0)
        print("written", flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
`
	for _, how := range []string{"killed", "frozen"} {
		t.Run(how, func(t *testing.T) {
			a := f.Mount(t, lease)
			name := "held-" + how
			if err := os.WriteFile(a.Path(name), []byte("v1"), 0o644); err != nil {
				t.Fatal(err)
			}
			holder := exec.Command("python3", "-c", holderScript, a.Path(name))
			in, err := holder.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			outPipe, err := holder.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			holder.Stderr = os.Stderr
			if err := holder.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(outPipe)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
			next := func(what string) string {
				t.Helper()
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatalf("the holder ended before %s", what)
					}
					return l
				case <-time.After(60 * time.Second):
					t.Fatalf("the holder said nothing of %s within 60s", what)
				}
				return ""
			}
			if l := next("its lock"); l != "locked" {
				t.Fatalf("the holder on A: %q", l)
			}
			if flockN(t, b.Path(name)) {
				t.Fatal("B got the lock A holds")
			}
			if how == "killed" {
				a.Kill()
			} else {
				a.Signal(syscall.SIGSTOP)
				defer a.Signal(syscall.SIGCONT)
			}
			stopped := time.Now()
			waiter := exec.Command("flock", b.Path(name), "true")
			done := make(chan error, 1)
			if err := waiter.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- waiter.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("B's flock: %v", err)
				}
			case <-time.After(mounttest.RecoveredWithin + 30*time.Second):
				t.Fatalf("B's flock still waits %s after A was %s", time.Since(stopped).Round(time.Second), how)
			}
			took := time.Since(stopped)
			t.Logf("B got the lock %s after A was %s", took.Round(time.Millisecond), how)
			if took < mounttest.Lease {
				t.Errorf("B got the lock %s after A was %s, before A's lease (%s) ran out", took, how, mounttest.Lease)
			}
			if how == "frozen" {
				a.Signal(syscall.SIGCONT)
				// A knows at once on waking that its session went
				// unrenewed for more than its lease.
				if _, err := in.Write([]byte("write\n")); err != nil {
					t.Fatal(err)
				}
				if l := next("its write"); l != fmt.Sprintf("errno %d", int(syscall.EIO)) {
					t.Errorf("A's holder writes after its lock was lost: %q, want EIO", l)
				}
				mounttest.Alive(t, a)
			}
		})
	}
}
