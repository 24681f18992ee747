package test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// deathBound bounds how long a process using a mount waits for its call
// to fail once the mount's daemon began dying (the watchdog looks every
// 100ms), how long the daemon then takes to end and its watchdog to go:
// far past what they take on an idle machine (well under a second), so
// that only a hang reaches it.
const deathBound = 15 * time.Second

// stuckNotification is a mount A whose daemon has a thread held in the
// kernel inside an entry invalidation, as a death may find one: stat (a
// process of A's mount) looks up name zzz in directory dir, which holds
// dir's lock in the kernel while A reads the name from the cluster (that
// read held by A's fault proxy until the test ends); meanwhile mount B
// changes dir, which recalls A's delegation on it, and A tells its kernel
// to expire the names it gave under the delegation: a notification
// written to /dev/fuse, which waits for dir's lock.
type stuckNotification struct {
	a        *mounttest.Mount
	dir      string
	statOut  *strings.Builder
	statDone chan error   // stat's end
	bCreated <-chan error // the end of B's create in dir, which recalled A
	watchdog int          // A's watchdog when it got stuck (0: none)
}

// mountStuck makes dir on b, mounts A (with env and extra flags), and has
// a thread of A's held in the kernel as stuckNotification says: it
// returns once one is (or A has ended: a crash point may end it once one
// has been for a second). before, if not nil, runs once A is mounted.
func mountStuck(t *testing.T, f *mounttest.FS, b *mounttest.Mount, dir string, env []string, before func(a *mounttest.Mount), extra ...string) *stuckNotification {
	t.Helper()
	if err := os.Mkdir(b.Path(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path(dir, "a"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Sync(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	held, release := make(chan struct{}), make(chan struct{})
	heldDoc := "/_doc/" + store.DocID("/"+dir+"/zzz")
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, heldDoc) {
			select {
			case <-held:
			default:
				close(held)
			}
			<-release
		}
		return false
	})
	addr := mounttest.FreeAddr(t)
	// A long request timeout: A must still be waiting for the held read
	// when it dies. A shorter lease than the default: B's create, which
	// recalls A, waits for A to be declared dead if A dies in the middle
	// of its recall.
	args := append([]string{"--delegations", "--cache-ttl=1h", "--negative-timeout=1h", "--entry-timeout=1h", "--attr-timeout=1h",
		"--metrics-addr", addr, "--es-url", fp.URL, "--es-timeout", "60s", "--lease", "4s"}, extra...)
	a := f.MountAt(t, t.TempDir(), env, args...)
	// Before the mount's own cleanup (a test failing with A alive): the
	// read goes through, the lookup ends, and A unmounts.
	t.Cleanup(func() { close(release) })
	if before != nil {
		before(a)
	}
	// A holds delegations on / and dir, and its kernel was told "a" under
	// dir's (a stat after the grant asks A again: before it, the answer
	// was not to be kept).
	waitDelegated(t, "http://"+addr+"/metrics", 2, func() {
		if _, err := os.Stat(a.Path(dir, "a")); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(a.Path(dir, "a")); err != nil {
		t.Fatal(err)
	}
	s := &stuckNotification{a: a, dir: dir, statOut: &strings.Builder{}, statDone: make(chan error, 1)}
	stat := exec.Command("stat", a.Path(dir, "zzz"))
	stat.Stdout, stat.Stderr = s.statOut, s.statOut
	if err := stat.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.statDone <- stat.Wait() }()
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("A's read of the name stat looks up did not come within a minute")
	}
	s.watchdog = watchdogOf(a.Pid())
	created := make(chan error, 1)
	go func() { created <- os.WriteFile(b.Path(dir, "b"), []byte("b"), 0o644) }()
	// Until A has answered the recall too (B's create then ends): a death
	// in the middle of it would have B's create wait for A to be declared
	// dead. A crash point may end A first.
	var createErr error
	createDone := false
	mounttest.WaitFor(t, "a thread of A held in the kernel in an entry invalidation", time.Minute, func() bool {
		if !createDone {
			select {
			case createErr = <-created:
				createDone = true
			default:
			}
		}
		return a.Exited() || createDone && strings.Contains(kernelStacks(a.Pid()), "fuse_reverse_inval_entry")
	})
	s.bCreated = created
	if createDone {
		done := make(chan error, 1)
		done <- createErr
		s.bCreated = done
	}
	return s
}

// checkEnded checks what follows A's death: stat's call fails within
// deathBound (ECONNABORTED: it was in flight when the connection was
// aborted), as a new call in the mount does (ENOTCONN); A ends, and so
// does its watchdog, which says in A's log what it did; B is untouched;
// and unmount cleans the mount up.
func checkEnded(t *testing.T, s *stuckNotification, b *mounttest.Mount, unmount []string) {
	t.Helper()
	a := s.a
	start := time.Now()
	select {
	case err := <-s.statDone:
		t.Logf("stat failed %s after the daemon was killed (or logged its fatal error)", time.Since(start).Round(time.Millisecond))
		if err == nil || !strings.Contains(s.statOut.String(), "Software caused connection abort") && !strings.Contains(s.statOut.String(), "not connected") {
			t.Errorf("stat in the dead mount: %v, %q; want ECONNABORTED or ENOTCONN", err, s.statOut)
		}
	case <-time.After(deathBound):
		stacks := kernelStacks(a.Pid())
		err := mounttest.AbortFUSE(a.Conn())
		t.Fatalf("stat still waiting %s after its mount daemon began dying: a hang; the daemon's threads in the kernel:\n%s\n(the connection is now aborted by hand: %v)", deathBound, stacks, err)
	}
	if _, ok := a.WaitExit(deathBound); !ok {
		t.Fatalf("the mount daemon (pid %d) not gone %s after its death; its threads in the kernel:\n%s", a.Pid(), deathBound, kernelStacks(a.Pid()))
	}
	if out, err := exec.Command("timeout", deathBound.String(), "ls", a.Path(s.dir)).CombinedOutput(); err == nil || !strings.Contains(string(out), "Transport endpoint is not connected") {
		t.Errorf("ls in the dead mount: %v, %q; want ENOTCONN", err, out)
	}
	if s.watchdog == 0 {
		t.Error("the mount daemon had no watchdog")
	} else if !processGone(s.watchdog, deathBound) {
		t.Errorf("the watchdog (pid %d) still runs %s after its daemon's death", s.watchdog, deathBound)
	}
	if !strings.Contains(a.Log(), "aborted its FUSE connection") {
		t.Errorf("the mount's log does not say that its watchdog aborted the connection:\n%s", a.Log())
	}
	// B, another mount of the filesystem, never noticed: its create
	// (which recalled A) ends, at once or once A is declared dead.
	select {
	case err := <-s.bCreated:
		if err != nil {
			t.Errorf("B's create in %s: %v", s.dir, err)
		}
	case <-time.After(time.Minute):
		t.Errorf("B's create in %s did not end within a minute", s.dir)
	}
	if got := strings.Join(names(t, b.Path(s.dir)), " "); got != "a b" {
		t.Errorf("B lists %s as %q, want \"a b\"", s.dir, got)
	}
	if out, err := exec.Command(unmount[0], append(unmount[1:], a.Dir)...).CombinedOutput(); err != nil || mounttest.IsMounted(a.Dir) {
		t.Errorf("%s of the dead mount: %v, %s; mounted %v", strings.Join(unmount, " "), err, out, mounttest.IsMounted(a.Dir))
	}
}

// TestDyingDaemonLeavesNoHang: a mount daemon that dies while one of its
// threads is held in the kernel (an entry invalidation waiting for a
// directory's lock, which a process's lookup there holds while it waits
// for the daemon) cannot finish dying by itself: its /dev/fuse stays
// open, and before the mount had a watchdog the process, its mount and
// every process using it hung until the FUSE connection was aborted by
// hand (as after a memory limit's kill). Now the processes using the
// mount are told ECONNABORTED (a call in flight) or ENOTCONN (a later
// one), as after any kill -9, the daemon ends, and the mount unmounts.
// Deaths by SIGKILL (a kill -9, the OOM killer) and by a fatal error of
// the Go runtime; a watchdog killed is replaced; a daemon unmounted ends
// its watchdog without aborting anything.
func TestDyingDaemonLeavesNoHang(t *testing.T) {
	f := mounttest.NewFS(t)
	// B judges A dead sooner with a lease as short as A's: its create
	// waits for that when A died in the middle of a recall.
	b, _ := delegMount(t, f, "--lease", "4s")
	umount := []string{"umount"}
	fusermount := []string{"fusermount3", "-u"}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		fusermount = umount // CI has it (fuse3); a machine without it unmounts with umount
	}

	t.Run("SIGKILL", func(t *testing.T) {
		s := mountStuck(t, f, b, "killed", nil, nil)
		if s.a.Exited() {
			t.Fatalf("the mount daemon ended before it was killed:\n%s", s.a.Log())
		}
		s.a.Signal(syscall.SIGKILL)
		checkEnded(t, s, b, umount)
	})

	t.Run("fatal error", func(t *testing.T) {
		// The daemon kills itself with a fatal error of the Go runtime once
		// its invalidations have waited a second (locking.CrashPointAfter).
		s := mountStuck(t, f, b, "fatal", []string{"ESFS_CRASH_POINT=recall-invalidations-held:fatal"}, nil)
		mounttest.WaitLog(t, s.a, "fatal error: sync: unlock of unlocked mutex", deathBound)
		checkEnded(t, s, b, fusermount)
		err, _ := s.a.WaitExit(deathBound) // it has ended (checkEnded)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(s.a.Log(), "fatal error: sync: unlock of unlocked mutex") {
			t.Errorf("the daemon ended with %v, want a fatal error of the Go runtime (status 2)", err)
		}
	})

	t.Run("watchdog killed", func(t *testing.T) {
		// A watchdog killed takes nothing with it, and another takes its
		// place, which does the job.
		s := mountStuck(t, f, b, "rewatched", nil, func(a *mounttest.Mount) {
			first := watchdogOf(a.Pid())
			if first == 0 {
				t.Fatal("the mount daemon has no watchdog")
			}
			if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			mounttest.WaitFor(t, "another watchdog", deathBound, func() bool {
				w := watchdogOf(a.Pid())
				return w != 0 && w != first
			})
			if !strings.Contains(a.Log(), "the mount's watchdog ended: starting another") {
				t.Errorf("the mount's log does not say its watchdog ended:\n%s", a.Log())
			}
			// The mount serves on: what follows needs its answers.
		})
		if s.a.Exited() {
			t.Fatalf("the mount daemon ended before it was killed:\n%s", s.a.Log())
		}
		s.a.Signal(syscall.SIGKILL)
		checkEnded(t, s, b, umount)
	})

	t.Run("unmounted", func(t *testing.T) {
		// --daemon, as mount(8) and fstab mount: the watchdog is the
		// daemon's child, in a session of its own, and holds neither
		// /dev/fuse (which would keep a dead daemon's connection up) nor
		// anything of the cluster's; esfs umount ends both, and nothing
		// is aborted.
		dir := t.TempDir()
		logFile := filepath.Join(t.TempDir(), "esfs.log")
		r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--daemon", "--log-file", logFile, "--es-url", f.URL, "--index", f.Index, dir}, Env: []string{"ELASTICSEARCH_URL="}, Limit: time.Minute})
		pid, conn, _ := daemonMounted(t, r.Out, r.Code, dir)
		w := watchdogOf(pid)
		if w == 0 {
			t.Fatal("the mount daemon has no watchdog")
		}
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", w))
		for _, fd := range fds {
			if to, _ := os.Readlink(fd); to == "/dev/fuse" {
				t.Errorf("the watchdog holds /dev/fuse (%s)", fd)
			}
		}
		if sid, _ := unix.Getsid(w); sid != w {
			t.Errorf("the watchdog's session is %d, want its own (%d)", sid, w)
		}
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w)); strings.Contains(string(cmdline), f.URL) {
			t.Errorf("the watchdog's command line names the cluster: %q", cmdline)
		}
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte("watched"), 0o644); err != nil {
			t.Fatal(err)
		}
		umountDaemon(t, f, dir, pid, conn)
		if !processGone(w, deathBound) {
			t.Errorf("the watchdog (pid %d) still runs %s after its daemon ended", w, deathBound)
		}
		log, _ := os.ReadFile(logFile)
		if strings.Contains(string(log), "abort") || strings.Contains(string(log), "watchdog") {
			t.Errorf("the log of a mount unmounted speaks of its watchdog:\n%s", log)
		}
	})
}

// watchdogOf is the pid of the watchdog of mount daemon pid (its child
// running esfs watchdog), 0 if it has none.
func watchdogOf(pid int) int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 || fields[1] != strconv.Itoa(pid) {
			continue
		}
		dir := filepath.Dir(p)
		if cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline")); strings.Contains(string(cmdline), "\x00watchdog\x00") {
			w, _ := strconv.Atoi(filepath.Base(dir))
			return w
		}
	}
	return 0
}

// processGone waits up to limit for process pid to be gone (or a zombie
// waiting for init).
func processGone(pid int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kernelStacks are the kernel stacks of process pid's threads: where a
// process that does not end waits.
func kernelStacks(pid int) string {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	var b strings.Builder
	for _, task := range tasks {
		st, _ := os.ReadFile(filepath.Join(task, "stat"))
		stack, _ := os.ReadFile(filepath.Join(task, "stack"))
		s := string(st)
		state := "?"
		if i := strings.LastIndexByte(s, ')'); i > 0 && i+2 < len(s) {
			state = s[i+2 : i+3]
		}
		if state != "S" {
			fmt.Fprintf(&b, "thread %s (state %s):\n%s", filepath.Base(task), state, stack)
		}
	}
	return b.String()
}
