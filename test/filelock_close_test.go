package test

// A process's POSIX record locks on a file go when it closes any of its
// descriptors of the file (POSIX: "all locks associated with a file for a
// given process shall be removed when a file descriptor for that file is
// closed by that process"): a dup's, another open()'s, one closed by a
// thread or by a child sharing its file table (CLONE_FILES), but not one
// closed by a child with a file table of its own. OFD locks go with their
// open file's last close only. xfstests generic/478 checks these shapes
// with t_ofd_locks; the holder below is that program's setlk routine.
//
// The record locks go with the FLUSH of the close, which the closing
// process waits for: every mount sees them gone when close returns. An
// OFD lock goes with the RELEASE of its open file, which FUSE sends after
// close returns: the mount orders its later lock requests after it
// (fs/releaseorder.go), another mount sees it once the release's write
// has landed (generic/478 failed at d72fb5c on its CLONE_FILES rows).

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// closeHolder takes a lock on [0, 10) of argv[1] (argv[2]: posix-w with
// F_SETLKW, as t_ofd_locks -P -w; posix-r with F_SETLK; ofd-w with
// F_OFD_SETLKW, as t_ofd_locks -w), then closes a descriptor of the file
// as argv[3] says, says "ready" and holds what it still holds until its
// standard input ends.
//
//	dup        dup(fd) and close the dup (t_ofd_locks -d)
//	reopen     open the file again and close that descriptor
//	thread     another thread closes fd itself
//	clonefiles a child made by clone(CLONE_FILES) closes fd (t_ofd_locks -F)
//	fork       a child with a copy of the file table closes fd (neither)
const closeHolder = `
import ctypes, fcntl, os, signal, struct, sys, threading
path, kind, shape = sys.argv[1:4]
fd = os.open(path, os.O_RDWR)
typ = fcntl.F_WRLCK if kind.endswith("w") else fcntl.F_RDLCK
cmd = {"posix-w": fcntl.F_SETLKW, "posix-r": fcntl.F_SETLK, "ofd-w": 38}[kind]  # 38: F_OFD_SETLKW
fcntl.fcntl(fd, cmd, struct.pack("hhqqi", typ, 0, 0, 10, 0))
if shape == "dup":
    os.close(os.dup(fd))
elif shape == "reopen":
    os.close(os.open(path, os.O_RDONLY))
elif shape == "thread":
    t = threading.Thread(target=os.close, args=(fd,))
    t.start()
    t.join()
elif shape == "clonefiles":
    # clone(CLONE_FILES|SIGCHLD) with no new stack: a fork whose child
    # shares the file table. PyDLL keeps the GIL across the call.
    libc = ctypes.PyDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    sys_clone = {"x86_64": 56, "aarch64": 220}[os.uname().machine]
    pid = libc.syscall(sys_clone, 0x400 | signal.SIGCHLD, 0, 0, 0, 0)
    if pid == 0:
        os.close(fd)
        os._exit(0)
    if pid < 0:
        sys.exit("clone: errno %d" % ctypes.get_errno())
    os.waitpid(pid, 0)
elif shape == "fork":
    pid = os.fork()
    if pid == 0:
        os.close(fd)
        os._exit(0)
    os.waitpid(pid, 0)
else:
    sys.exit("unknown shape " + shape)
print("ready", flush=True)
sys.stdin.read()
`

// closeChecks are the checker's calls, as generic/478's getlk routine
// makes them: F_GETLK and F_OFD_GETLK of a write or a read lock over the
// held range, across its end, and beside it.
var closeChecks = []struct {
	ofd      bool
	typ      int16
	start, n int64
}{
	{false, unix.F_WRLCK, 0, 10},
	{false, unix.F_RDLCK, 5, 20},
	{false, unix.F_WRLCK, 20, 10},
	{true, unix.F_WRLCK, 5, 20},
	{true, unix.F_RDLCK, 0, 10},
}

// getlkAnswer is F_GETLK (or F_OFD_GETLK) through descriptor fd: "could
// be placed", or the conflicting lock.
func getlkAnswer(fd int, ofd bool, typ int16, start, n int64) string {
	cmd := unix.F_GETLK
	if ofd {
		cmd = unix.F_OFD_GETLK
	}
	lk := unix.Flock_t{Type: typ, Start: start, Len: n}
	if err := unix.FcntlFlock(uintptr(fd), cmd, &lk); err != nil {
		return "getlk: " + err.Error()
	}
	switch lk.Type {
	case unix.F_UNLCK:
		return "could be placed"
	case unix.F_RDLCK:
		return fmt.Sprintf("rdlck %d+%d", lk.Start, lk.Len)
	case unix.F_WRLCK:
		return fmt.Sprintf("wrlck %d+%d", lk.Start, lk.Len)
	}
	return fmt.Sprintf("type %d", lk.Type)
}

// closeChecker is where the checker asks: a path, and whether its answer
// about an open file's last close may come late (another mount learns of
// it when the close's RELEASE, which FUSE sends after close returns, has
// landed: releaseorder.go in fs).
type closeChecker struct {
	who, path string
	late      bool
}

// closeAnswers runs the holder on holderPath for every lock kind and
// shape, and returns what the checker answers through each of checkers
// while the holder holds what it still holds. The checker opens its
// descriptors before the holder starts and asks as soon as the holder is
// ready, as generic/478's getlk routine does. want (nil on the local
// filesystem) are the answers to wait for where they may come late.
func closeAnswers(t *testing.T, holderPath string, checkers []closeChecker, want []string) []string {
	t.Helper()
	var out []string
	for _, kind := range []string{"posix-w", "posix-r", "ofd-w"} {
		for _, shape := range []string{"dup", "reopen", "thread", "clonefiles", "fork"} {
			fds := make([]int, len(checkers))
			for i, c := range checkers {
				fd, err := unix.Open(c.path, unix.O_RDWR|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				fds[i] = fd
			}
			cmd := exec.Command("python3", "-c", closeHolder, holderPath, kind, shape)
			in, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(stdout).ReadString('\n')
			if line != "ready\n" {
				in.Close()
				cmd.Wait()
				t.Fatalf("the holder (%s, %s) on %s: %q %v\n%s", kind, shape, holderPath, line, err, stderr.String())
			}
			for i, c := range checkers {
				for _, k := range closeChecks {
					call := "F_GETLK"
					if k.ofd {
						call = "F_OFD_GETLK"
					}
					typ := map[int16]string{unix.F_WRLCK: "w", unix.F_RDLCK: "r"}[k.typ]
					what := fmt.Sprintf("%s lock, %s closed: %s %s %d+%d from the %s", kind, shape, call, typ, k.start, k.n, c.who)
					got := getlkAnswer(fds[i], k.ofd, k.typ, k.start, k.n)
					lastClose := kind == "ofd-w" && (shape == "thread" || shape == "clonefiles")
					if w := len(out); c.late && lastClose && want != nil && w < len(want) && got != answerOf(want[w]) {
						mounttest.WaitFor(t, what+" to be "+answerOf(want[w]), 10*time.Second, func() bool {
							got = getlkAnswer(fds[i], k.ofd, k.typ, k.start, k.n)
							return got == answerOf(want[w])
						})
					}
					out = append(out, what+": "+got)
				}
			}
			in.Close()
			io.Copy(io.Discard, stdout)
			if err := cmd.Wait(); err != nil {
				t.Fatalf("the holder (%s, %s) on %s: %v\n%s", kind, shape, holderPath, err, stderr.String())
			}
			for _, fd := range fds {
				unix.Close(fd)
			}
		}
	}
	return out
}

// answerOf is the answer in a line of closeAnswers.
func answerOf(line string) string { return line[strings.LastIndex(line, ": ")+2:] }

// TestLocksAfterEachClose: a process holds a record lock (F_SETLK or
// F_SETLKW) or an OFD lock on one mount, then a descriptor of the file is
// closed (a dup; another open of it; by a thread; by a CLONE_FILES child;
// by a forked child), and another process asks F_GETLK and F_OFD_GETLK
// through descriptors it opened before, on the same mount and on another
// one: the answers are those of a local filesystem (tmpfs), call by call.
// POSIX locks go with any close of the holding process's file table and
// only with those, OFD locks with their open file's last close. The one
// answer allowed to come late is another mount's about an OFD lock whose
// open file's last close has returned (waited for, within 10 s).
func TestLocksAfterEachClose(t *testing.T) {
	local := filepath.Join("/dev/shm", fmt.Sprintf("esfs-close-locks-%d", os.Getpid()))
	if err := os.WriteFile(local, make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(local) })
	want := closeAnswers(t, local, []closeChecker{{"same mount", local, false}, {"other mount", local, false}}, nil)
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	if err := os.WriteFile(a.Path("testfile"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	got := closeAnswers(t, a.Path("testfile"), []closeChecker{{"same mount", a.Path("testfile"), false}, {"other mount", b.Path("testfile"), true}}, want)
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("%s\n\twant %s", got[i], answerOf(want[i]))
		}
	}
	if t.Failed() {
		t.Logf("on tmpfs:\n%s", strings.Join(want, "\n"))
	}
}
