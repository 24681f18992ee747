// Package mounttest runs real esfs mount processes for tests: it builds the
// binary, makes a fresh filesystem in the test cluster, mounts it in a child
// process, waits for the kernel mount by polling /proc/self/mountinfo (never
// by sleeping), and unmounts and deletes everything when the test ends.
package mounttest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// RepoRoot is the module root (this file is test/mounttest/mounttest.go).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary builds esfs once per test process and returns its path.
// ESFS_TEST_LOCKORDER builds it with lock order checked. ESFS_TEST_BINARY
// names a binary to use instead (say, one built from an
// older commit, to see a new test fail before its fix).
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("ESFS_TEST_BINARY"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "esfs-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "esfs")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		if os.Getenv("ESFS_TEST_LOCKORDER") != "" {
			// Every lock's order is checked (locking/lockorder): a mount
			// that takes two locks in both orders exits, with both stacks
			// in its log, and its test fails.
			args = append(args, "-tags", "lockorder")
		}
		cmd := exec.Command("go", append(args, ".")...)
		cmd.Dir = RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveBinary deletes the binary Binary built; call it from TestMain
// after the tests ran, so that test runs do not pile up binaries in /tmp.
func RemoveBinary() {
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
}

// PrivateDaemonLogs sends the logs of the --daemon mounts that tests
// start without a log file (through the environment they inherit) to a
// temporary directory instead of the system's syslog or /var/log/esfs,
// and returns the function that removes it.
func PrivateDaemonLogs() func() {
	dir, err := os.MkdirTemp("", "esfs-daemon-logs-")
	if err != nil {
		return func() {}
	}
	os.Setenv("ESFS_LOG_DIR", dir)
	os.Setenv("ESFS_SYSLOG_SOCKET", filepath.Join(dir, "no-syslog"))
	return func() { os.RemoveAll(dir) }
}

// FS is a fresh filesystem in the test cluster.
type FS struct {
	URL   string
	Index string
	Bin   string
	Store *store.Store // for checking what the index holds
}

// NewFS makes a filesystem with `esfs mkfs`; its indices are deleted when
// the test ends (after its mounts are gone).
func NewFS(t testing.TB) *FS {
	t.Helper()
	return NewFSOn(t, testenv.URL(t))
}

// NewFSOn is NewFS on the cluster at url (several comma-separated URLs
// for the nodes of one cluster).
func NewFSOn(t testing.TB, url string) *FS {
	t.Helper()
	f := &FS{URL: url, Index: testenv.Prefix(t), Bin: Binary(t)}
	st, err := store.New(store.Config{URLs: strings.Split(f.URL, ","), Prefix: f.Index, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f.Store = st
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := st.Admin().DeleteFilesystem(ctx); err != nil {
			t.Errorf("deleting test filesystem: %v", err)
		}
		st.Close()
	})
	out, err := f.Run("mkfs")
	if err != nil {
		t.Fatalf("esfs mkfs: %v\n%s", err, out)
	}
	if err := st.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f
}

// Run runs an esfs command on this filesystem and returns its combined output.
func (f *FS) Run(args ...string) (string, error) {
	return f.RunEnv(nil, args...)
}

// RunEnv is Run with extra environment variables.
func (f *FS) RunEnv(env []string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("no command")
	}
	full := append([]string{args[0], "--es-url", f.URL, "--index", f.Index}, args[1:]...)
	cmd := exec.Command(f.Bin, full...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// Mount is one running `esfs mount` process.
type Mount struct {
	Dir  string
	t    testing.TB
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error // exit status, valid after done
	// conn is the kernel's number for the mount's FUSE connection
	// (/sys/fs/fuse/connections/N), read once mounted; -1 if unknown.
	conn int
	// asked is set before the test ends the process on purpose; mayDie
	// when a crash point lets it kill itself. A process that ends with
	// neither has died under a test: unasked records that, at its exit.
	asked   atomic.Bool
	mayDie  bool
	mounted bool
	unasked bool // valid after done
}

// Bounds on waiting for a mount process: a clean exit after SIGTERM
// (flush, unmount, a grace period for open files, ending the session),
// and its reaping once killed.
const (
	exitLimit = 2 * time.Minute
	killLimit = 30 * time.Second
)

// Mount starts `esfs mount` on a new directory and waits until the kernel
// has the mount. extra are more flags (before the mount point).
func (f *FS) Mount(t testing.TB, extra ...string) *Mount {
	t.Helper()
	dir := t.TempDir()
	return f.MountAt(t, dir, nil, extra...)
}

// MountAt mounts at dir with extra environment variables.
func (f *FS) MountAt(t testing.TB, dir string, env []string, extra ...string) *Mount {
	t.Helper()
	// ESFS_TEST_MOUNT_FLAGS adds flags to every mount of a run: the whole
	// suite, or a part of it, with --delegations for instance.
	return f.mountAt(t, dir, env, append(extra, strings.Fields(os.Getenv("ESFS_TEST_MOUNT_FLAGS"))...)...)
}

// mountAt is MountAt without ESFS_TEST_MOUNT_FLAGS, for the mounts of the
// checks themselves.
func (f *FS) mountAt(t testing.TB, dir string, env []string, extra ...string) *Mount {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), "mount-*.log")
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"mount", "--es-url", f.URL, "--index", f.Index}, extra...)
	args = append(args, dir)
	cmd := exec.Command(f.Bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	m := &Mount{Dir: dir, t: t, cmd: cmd, log: logf, done: make(chan struct{}), conn: -1}
	for _, e := range env {
		if strings.HasPrefix(e, "ESFS_CRASH_POINT=") && e != "ESFS_CRASH_POINT=" {
			m.mayDie = true
		}
	}
	go func() {
		m.err = cmd.Wait()
		m.unasked = !m.asked.Load()
		close(m.done)
	}()
	t.Cleanup(m.cleanup)
	track(t, m)
	// The kernel lists the mount while the daemon is still in go-fuse's
	// NewServer; it is ready (signals handled, its log saying so) once it
	// logs "mounted". A test that kills it earlier would find no such line.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if conn, _, _, ok := MountEntry(dir); ok && loggedMounted(m.Log()) {
			m.conn, m.mounted = conn, true
			return m
		}
		select {
		case <-m.done:
			t.Fatalf("esfs mount exited before mounting (%v):\n%s", m.err, m.Log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("esfs mount did not mount %s within 60s:\n%s", dir, m.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Path joins names below the mount point.
// Sync fsyncs the mount's root, which flushes what the mount made in
// memory under write delegations: for a test that reads the index itself.
func (m *Mount) Sync(t testing.TB) {
	t.Helper()
	d, err := os.Open(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync of %s: %v", m.Dir, err)
	}
}

func (m *Mount) Path(rel ...string) string {
	return filepath.Join(append([]string{m.Dir}, rel...)...)
}

// Pid is the mount process's id.
func (m *Mount) Pid() int { return m.cmd.Process.Pid }

// Conn is the number of the mount's FUSE connection in
// /sys/fs/fuse/connections (-1 if unknown).
func (m *Mount) Conn() int { return m.conn }

// Log returns what the mount process logged so far.
func (m *Mount) Log() string {
	b, _ := os.ReadFile(m.log.Name())
	return string(b)
}

// Unmount sends SIGTERM, as a service manager would, and waits for a clean
// exit; the directory must no longer be a mount point. A process that
// does not exit in time is ended by force and the test fails.
func (m *Mount) Unmount(t testing.TB) {
	t.Helper()
	if m.Exited() {
		t.Fatalf("esfs mount at %s had already ended before the unmount (%v):\n%s", m.Dir, m.err, tail(m.Log(), 60))
	}
	m.Signal(syscall.SIGTERM)
	if !m.waitDone(exitLimit) {
		t.Fatalf("esfs mount at %s did not exit within %s of SIGTERM (%s):\n%s", m.Dir, exitLimit, m.forceEnd(), tail(m.Log(), 60))
	}
	if m.err != nil {
		t.Fatalf("esfs mount exited with %v:\n%s", m.err, m.Log())
	}
	if IsMounted(m.Dir) {
		t.Fatalf("%s still mounted after the mount process exited", m.Dir)
	}
}

// Kill sends SIGKILL: the process dies with whatever it held.
func (m *Mount) Kill() {
	m.asked.Store(true)
	_ = m.cmd.Process.Kill()
	if !m.waitDone(killLimit) {
		m.t.Errorf("esfs mount at %s not reaped within %s of SIGKILL (%s)", m.Dir, killLimit, m.forceEnd())
	}
	lazyUnmount(m.Dir)
}

// Exited reports whether the mount process has ended.
func (m *Mount) Exited() bool {
	select {
	case <-m.done:
		return true
	default:
		return false
	}
}

func (m *Mount) waitDone(limit time.Duration) bool {
	select {
	case <-m.done:
		return true
	case <-time.After(limit):
		return false
	}
}

// forceEnd ends a mount process that does not exit by itself. SIGKILL
// alone is not enough when one of its threads waits in the kernel for an
// answer from its own mount: it cannot die, so the /dev/fuse descriptor
// stays open and the request is never failed. Aborting the connection
// fails every request of the mount, which lets that thread and then the
// process die. It says what it did, for the failure message.
func (m *Mount) forceEnd() string {
	m.asked.Store(true)
	did := []string{"kernel stacks of its threads:\n" + stacks(m.Pid())}
	if err := abortMounted(m.Dir, m.conn); err != nil {
		did = append(did, "could not abort its FUSE connection: "+err.Error())
	} else {
		did = append(did, fmt.Sprintf("aborted FUSE connection %d", m.conn))
	}
	_ = m.cmd.Process.Kill()
	if m.waitDone(killLimit) {
		did = append(did, "killed it")
	} else {
		did = append(did, fmt.Sprintf("it was still not reaped %s after SIGKILL; kernel stacks now:\n%s", killLimit, stacks(m.Pid())))
	}
	lazyUnmount(m.Dir)
	return strings.Join(did, "; ")
}

// checkDeath fails the test if the process ended without being asked to.
// A zero exit status is not a death: the daemon exits 0 only once its
// mount is gone, which a test may do with umount.
func (m *Mount) checkDeath() {
	if m.Exited() && m.mounted && m.unasked && !m.mayDie && m.err != nil {
		m.t.Errorf("esfs mount at %s (pid %d) died while the test did not ask it to end: %v\nlast lines of its log:\n%s",
			m.Dir, m.Pid(), m.err, tail(m.Log(), 60))
	}
}

func (m *Mount) cleanup() {
	m.checkDeath()
	if !m.Exited() {
		m.asked.Store(true)
		_ = m.cmd.Process.Signal(syscall.SIGCONT) // a test may have stopped it
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		if !m.waitDone(exitLimit) {
			m.t.Errorf("esfs mount at %s (pid %d) did not exit within %s of SIGTERM: %s", m.Dir, m.Pid(), exitLimit, m.forceEnd())
		}
	}
	lazyUnmount(m.Dir)
	if log := m.Log(); strings.Contains(log, "WARNING: DATA RACE") {
		// The daemon is built with -race: a race it met is a failure of
		// the test that drove it, wherever in the log it was reported.
		m.t.Errorf("esfs mount at %s (pid %d) met a data race:\n%s", m.Dir, m.Pid(), raceReport(log))
	}
	if m.t.Failed() {
		m.t.Logf("log of the mount at %s:\n%s", m.Dir, tail(m.Log(), 60))
	}
	m.log.Close()
}

// raceReport is the first race detector report in a daemon's log.
func raceReport(log string) string {
	i := strings.Index(log, "WARNING: DATA RACE")
	if i < 0 {
		return ""
	}
	rest := log[i:]
	if j := strings.Index(rest, "=================="); j > 0 {
		rest = rest[:j]
	}
	return rest
}

// loggedMounted: the daemon's "mounted" line, in text or JSON form.
func loggedMounted(log string) bool {
	return strings.Contains(log, "msg=mounted") || strings.Contains(log, `"msg":"mounted"`)
}

func lazyUnmount(dir string) {
	if IsMounted(dir) {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// IsMounted reports whether dir is a mount point, from /proc/self/mountinfo.
func IsMounted(dir string) bool {
	_, _, _, ok := MountEntry(dir)
	return ok
}

// MountEntry reads the mount at dir from /proc/self/mountinfo (the last
// one, if several are stacked): its device minor number (for FUSE, the
// connection's number in /sys/fs/fuse/connections), filesystem type and
// source. It never touches dir itself, which may be a hung FUSE mount.
func MountEntry(dir string) (minor int, fstype, source string, ok bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return 0, "", "", false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != dir {
			continue
		}
		ok = true
		minor = -1
		if _, mi, found := strings.Cut(fields[2], ":"); found {
			if n, err := strconv.Atoi(mi); err == nil {
				minor = n
			}
		}
		fstype, source = "", ""
		for i, x := range fields {
			if x == "-" && i+2 < len(fields) {
				fstype, source = fields[i+1], unescapeMountinfo(fields[i+2])
				break
			}
		}
	}
	return minor, fstype, source, ok
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of
// /proc/self/mountinfo's path fields.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

const fusectl = "/sys/fs/fuse/connections"

// AbortFUSE aborts FUSE connection conn through fusectl (mounting it if
// needed): every request waiting on the connection fails with ENOTCONN and
// its daemon can no longer serve it.
func AbortFUSE(conn int) error {
	if conn < 0 {
		return fmt.Errorf("connection number unknown")
	}
	if !IsMounted(fusectl) {
		if err := syscall.Mount("fusectl", fusectl, "fusectl", 0, ""); err != nil && !IsMounted(fusectl) {
			return fmt.Errorf("mounting fusectl on %s: %w", fusectl, err)
		}
	}
	return os.WriteFile(filepath.Join(fusectl, strconv.Itoa(conn), "abort"), []byte("1"), 0)
}

// abortMounted aborts FUSE connection conn only while dir is still
// mounted on it. A connection's number is its superblock's device, which
// the next mount takes once the filesystem is unmounted, even while a
// daemon that does not end still holds the old connection: an abort by
// number then aborts another test's mount (a mkdir there failed with
// ECONNABORTED in a suite run on a loaded machine).
func abortMounted(dir string, conn int) error {
	if c, _, _, ok := MountEntry(dir); !ok || c != conn {
		return fmt.Errorf("%s is no longer mounted on FUSE connection %d: not aborted (the number may be another mount's now)", dir, conn)
	}
	return AbortFUSE(conn)
}

// stacks returns the kernel stacks of the threads of process pid, each
// distinct stack once with its number of threads: where a process that
// does not end is waiting.
func stacks(pid int) string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stack", pid))
	count := map[string]int{}
	var order []string
	for _, p := range tasks {
		b, _ := os.ReadFile(p)
		s := string(b)
		if count[s] == 0 {
			order = append(order, s)
		}
		count[s]++
	}
	var b strings.Builder
	for _, s := range order {
		fmt.Fprintf(&b, "%d thread(s):\n%s", count[s], s)
	}
	return b.String()
}

// EndDaemon waits up to limit for a mount daemon that is not this
// process's child (started with --daemon or by mount(8)) to exit once its
// mount at dir was unmounted or signalled. If it does not, its FUSE
// connection conn is aborted, it is killed, dir is detached, and the test
// fails.
func EndDaemon(t testing.TB, pid, conn int, dir string, limit time.Duration) {
	t.Helper()
	if waitGone(pid, limit) {
		return
	}
	err := abortMounted(dir, conn)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	gone := waitGone(pid, killLimit)
	lazyUnmount(dir)
	if gone {
		t.Fatalf("mount daemon %d still running %s after it was told to end; aborted its FUSE connection (%v) and killed it", pid, limit, err)
	}
	t.Fatalf("mount daemon %d still running %s after it was told to end, and not gone %s after an abort of its FUSE connection (%v) and SIGKILL; kernel stacks:\n%s",
		pid, limit, killLimit, err, stacks(pid))
}

// waitGone polls until process pid (not our child) has exited.
func waitGone(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return true
		}
		if st, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(st), ") Z ") {
			return true // a zombie: exited, waiting for its parent (init)
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Sh runs a shell command line in dir and returns its combined output; the
// test fails if it exits non-zero.
func Sh(t testing.TB, dir, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	out, err, hung := runWatched(t, cmd, ShLimit)
	if hung {
		t.Fatalf("%s\nstill running after %s: a hang (the mounts' goroutines are above)\n%s", script, ShLimit, tail(string(out), 40))
	}
	if err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, tail(string(out), 40))
	}
	return string(out)
}

// Signal sends sig to the mount process. Any signal but SIGSTOP and
// SIGCONT counts as asking it to end.
func (m *Mount) Signal(sig os.Signal) {
	if sig != syscall.SIGSTOP && sig != syscall.SIGCONT {
		m.asked.Store(true)
	}
	_ = m.cmd.Process.Signal(sig)
}

// WaitExit waits up to limit for the mount process to end and returns its
// exit error; ok is false on timeout.
func (m *Mount) WaitExit(limit time.Duration) (err error, ok bool) {
	select {
	case <-m.done:
		return m.err, true
	case <-time.After(limit):
		return nil, false
	}
}
