package test

// OFD locks belong to their open file description: every descriptor of it
// (a dup, another thread's use of the same descriptor, a child process
// that inherited it) is their owner, and F_OFD_GETLK through any of them
// reports no conflict with them, as on a local filesystem.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// ofdProbe is what a process that inherited the open file as descriptor
// 3 answers: F_OFD_GETLK and F_OFD_SETLK of the same ranges as ofdGet and
// ofdSet.
const ofdProbe = `
import errno, fcntl, struct, sys
for arg in sys.argv[1:]:
    op, typ, start, n = arg.split(":")
    want = {"w": fcntl.F_WRLCK, "r": fcntl.F_RDLCK, "u": fcntl.F_UNLCK}[typ]
    try:
        if op == "get":
            got = struct.unpack("hhqqi", fcntl.fcntl(3, 36, struct.pack("hhqqi", want, 0, int(start), int(n), 0)))
            name = {fcntl.F_WRLCK: "w", fcntl.F_RDLCK: "r", fcntl.F_UNLCK: "u"}[got[0]]
            print("%s %d+%d pid%s" % (name, got[2], got[3], "<0" if got[4] < 0 else ">0" if got[4] > 0 else "=0"))
        else:
            fcntl.fcntl(3, 37, struct.pack("hhqqi", want, 0, int(start), int(n), 0))
            print("0")
    except OSError as e:
        print(errno.errorcode[e.errno])
`

// ofdSteps are the calls each user of the open file makes: tests over
// the held write (0+10) and read (20+10) locks and beside them, and a
// lock over the held ones, which their owner may take, then given back.
var ofdSteps = []string{"get:w:0:10", "get:r:5:10", "get:w:0:40", "get:w:25:1", "get:w:100:0",
	"set:w:0:30", "set:w:0:10", "set:u:10:20", "set:r:20:10", "get:w:0:40"}

// ofdCall makes one step through descriptor fd.
func ofdCall(fd int, step string) string {
	var op, typ string
	var start, n int64
	if _, err := fmt.Sscanf(strings.ReplaceAll(step, ":", " "), "%s %s %d %d", &op, &typ, &start, &n); err != nil {
		return "bad step " + step
	}
	lk := unix.Flock_t{Type: map[string]int16{"w": unix.F_WRLCK, "r": unix.F_RDLCK, "u": unix.F_UNLCK}[typ], Start: start, Len: n}
	cmd := unix.F_OFD_SETLK
	if op == "get" {
		cmd = unix.F_OFD_GETLK
	}
	if err := unix.FcntlFlock(uintptr(fd), cmd, &lk); err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return unix.ErrnoName(e)
		}
		return err.Error()
	}
	if op == "set" {
		return "0"
	}
	pid := "=0"
	if lk.Pid < 0 {
		pid = "<0"
	} else if lk.Pid > 0 {
		pid = ">0"
	}
	return fmt.Sprintf("%s %d+%d pid%s", map[int16]string{unix.F_WRLCK: "w", unix.F_RDLCK: "r", unix.F_UNLCK: "u"}[lk.Type], lk.Start, lk.Len, pid)
}

// ofdAnswers takes OFD locks through one open file of path and returns
// what each user of that open file, and of another one, is answered.
func ofdAnswers(t *testing.T, path string) []string {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, step := range []string{"set:w:0:10", "set:r:20:10"} {
		if got := ofdCall(fd, step); got != "0" {
			t.Fatalf("%s on %s: %s", step, path, got)
		}
	}
	var out []string
	each := func(who string, call func(step string) string) {
		for _, step := range ofdSteps {
			out = append(out, fmt.Sprintf("%s %s: %s", who, step, call(step)))
		}
	}
	each("same descriptor", func(s string) string { return ofdCall(fd, s) })
	dup, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	each("dup", func(s string) string { return ofdCall(dup, s) })
	unix.Close(dup)
	// Another thread: this goroutine keeps its thread, so the other
	// goroutine runs on another one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	me := unix.Gettid()
	type answer struct {
		tid  int
		outs []string
	}
	ch := make(chan answer)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var outs []string
		for _, s := range ofdSteps {
			outs = append(outs, ofdCall(fd, s))
		}
		ch <- answer{unix.Gettid(), outs}
	}()
	a := <-ch
	if a.tid == me {
		t.Fatal("the other goroutine ran on the test's thread")
	}
	i := 0
	each("another thread", func(string) string { i++; return a.outs[i-1] })
	// A child process that inherited the open file, through a duplicate
	// the *os.File owns: an os.File over fd itself would close fd's
	// number a second time from its finalizer, after the deferred close,
	// whatever the number then names (a later test's output pipe: its
	// esfs mkfs died of SIGPIPE in CI).
	inherited, err := unix.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(inherited), path)
	defer f.Close()
	cmd := exec.Command("python3", append([]string{"-c", ofdProbe}, ofdSteps...)...)
	cmd.ExtraFiles = []*os.File{f}
	got, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child process: %v\n%s", err, got)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != len(ofdSteps) {
		t.Fatalf("the child process answered %d lines for %d steps:\n%s", len(lines), len(ofdSteps), got)
	}
	i = 0
	each("child process", func(string) string { i++; return lines[i-1] })
	other, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(other)
	each("another open file", func(s string) string { return ofdCall(other, s) })
	return out
}

// TestOFDLocksOfOneOpenFile: OFD locks taken through one open file, seen
// through that open file by a dup, another thread and a child process
// that inherited it (none conflicts, each may change them), and through
// another open file (conflicts): the answers on a mount are those of a
// local filesystem (tmpfs), call by call.
func TestOFDLocksOfOneOpenFile(t *testing.T) {
	local := filepath.Join("/dev/shm", fmt.Sprintf("esfs-ofd-%d", os.Getpid()))
	t.Cleanup(func() { os.Remove(local) })
	want := ofdAnswers(t, local)
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	got := ofdAnswers(t, m.Path("ofd"))
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s, want %s", got[i], want[i])
		}
	}
	if t.Failed() {
		t.Logf("on tmpfs:\n%s", strings.Join(want, "\n"))
	}
}
