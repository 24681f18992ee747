package test

// A mount's heartbeats whose answers are lost: the mount keeps its session
// and everything it holds under it, and is still fenced when it really
// falls silent past its lease.

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// lockAndWriteScript holds an exclusive flock on argv[1] and keeps argv[2] open
// for writing; each line read is written at offset 0 of both and fsynced.
const lockAndWriteScript = `
import fcntl, os, sys
locked = os.open(sys.argv[1], os.O_RDWR)
fcntl.flock(locked, fcntl.LOCK_EX | fcntl.LOCK_NB)
other = os.open(sys.argv[2], os.O_WRONLY)
print("locked", flush=True)
for line in sys.stdin:
    data = line.strip().encode()
    try:
        for fd in (locked, other):
            os.pwrite(fd, data, 0)
            os.fsync(fd)
        print("written", flush=True)
    except OSError as e:
        print("errno", e.errno, flush=True)
`

// lockHolder is a process with a flock held and a file open on a mount.
type lockHolder struct {
	t     *testing.T
	in    io.Writer
	lines chan string
}

func startLockHolder(t *testing.T, locked, open string) *lockHolder {
	t.Helper()
	cmd := exec.Command("python3", "-c", lockAndWriteScript, locked, open)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &lockHolder{t: t, in: in, lines: make(chan string, 16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if l := h.next("its lock"); l != "locked" {
		t.Fatalf("the holder: %q", l)
	}
	return h
}

func (h *lockHolder) next(what string) string {
	h.t.Helper()
	select {
	case l, ok := <-h.lines:
		if !ok {
			h.t.Fatalf("the holder ended before %s", what)
		}
		return l
	case <-time.After(time.Minute):
		h.t.Fatalf("the holder said nothing of %s within a minute", what)
	}
	return ""
}

// write has the holder write data through both descriptors; it returns
// what the holder said ("written", or "errno N").
func (h *lockHolder) write(data string) string {
	h.t.Helper()
	if _, err := h.in.Write([]byte(data + "\n")); err != nil {
		h.t.Fatal(err)
	}
	return h.next("its write of " + data)
}

// sessionPut matches a write of a session document: a heartbeat (or a
// registration, or a verdict).
func sessionPut(method, path string, _ []byte) bool {
	return method == http.MethodPut && strings.Contains(path, "-sessions"+store.WriteAliasSuffix+"/_doc/")
}

// TestHeartbeatAnswersLost: a mount's heartbeats land but their answers
// are lost (the connection reset), three in a row, then one is held past
// its deadline and lands just before the next arrives (which then meets a
// new version). The mount keeps its session (the same id in esfs status,
// nothing in its log of a lost session), a flock held across it stays
// held (another mount's flock -n fails, the holder's writes land) and a
// file open across it writes fine. Then the mount is frozen past its
// lease: it is declared dead, its lock goes to the other mount, and once
// woken its holder's write fails with EIO and it starts a new session.
func TestHeartbeatAnswersLost(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	lease := "--lease=" + mounttest.Lease.String()
	a := f.Mount(t, lease, "--es-url", fp.URL)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) }) // before the mount's own cleanup
	b := f.Mount(t, lease)
	for _, n := range []string{"locked", "open"} {
		if err := os.WriteFile(a.Path(n), []byte("v1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h := startLockHolder(t, a.Path("locked"), a.Path("open"))
	if flockN(t, b.Path("locked")) {
		t.Fatal("B got the lock A holds")
	}
	sess := mounttest.Session(t, f, a).ID

	// The heartbeats from now on: the first three land unanswered, the
	// fourth is held until the fifth arrives (its sender gave up long
	// ago) and lands then, unanswered; the fifth follows it.
	var seen atomic.Int32
	faults := make([]*mounttest.Fault, 4)
	for i := range faults {
		faults[i] = &mounttest.Fault{Match: sessionPut, Reset: true}
	}
	fifth, added := make(chan struct{}), make(chan struct{})
	var once sync.Once
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if !sessionPut(r.Method, r.URL.Path, body) {
			return false
		}
		switch n := seen.Add(1); n {
		case 1, 2, 3:
			fp.Add(faults[n-1]) // heartbeats are sent one at a time: it acts on this one
		case 4:
			select {
			case <-fifth:
			case <-time.After(time.Minute):
			}
			fp.Add(faults[3])
			close(added)
		case 5:
			once.Do(func() { close(fifth) })
			select {
			case <-added:
				<-faults[3].Fired()
			case <-time.After(time.Minute):
			}
		}
		return false
	})
	mounttest.WaitFor(t, "the faulty heartbeats and three more", 2*time.Minute, func() bool {
		return seen.Load() >= 8 || strings.Contains(a.Log(), "session lost")
	})
	for _, l := range strings.Split(a.Log(), "\n") {
		if strings.Contains(l, "heartbeat") || strings.Contains(l, "session") {
			t.Logf("A: %s", l)
		}
	}
	for i, fault := range faults {
		select {
		case <-fault.Fired():
		default:
			t.Fatalf("fault %d never acted", i+1)
		}
		if fault.Status != http.StatusOK {
			// 409: sent at a version an earlier unanswered one replaced.
			t.Errorf("heartbeat %d did not land: the cluster answered %d", i+1, fault.Status)
		}
	}

	if strings.Contains(a.Log(), "session lost") || strings.Contains(a.Log(), "started a new session") {
		t.Errorf("A lost its session to heartbeats whose answers were lost:\n%s", a.Log())
	}
	if now := mounttest.Session(t, f, a).ID; now != sess {
		t.Errorf("A's session is %s, was %s", now, sess)
	}
	out, err := f.Run("status")
	if err != nil {
		t.Fatalf("esfs status: %v\n%s", err, out)
	}
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, sess+" ") && strings.Contains(l, "dead") {
			t.Errorf("esfs status shows A's session dead: %s", l)
		}
	}
	if !strings.Contains(out, sess+" ") {
		t.Errorf("esfs status does not show A's session %s:\n%s", sess, out)
	}
	if flockN(t, b.Path("locked")) {
		t.Error("B got the lock A's holder holds across the lost answers")
	}
	if l := h.write("v2"); l != "written" {
		t.Errorf("A's holder writes after the lost answers: %q", l)
	}
	for _, n := range []string{"locked", "open"} {
		mounttest.WaitFor(t, "B reads "+n+" as written", mounttest.StaleWithin+30*time.Second, func() bool {
			got, err := os.ReadFile(b.Path(n))
			return err == nil && string(got) == "v2"
		})
	}

	// Frozen past its lease, A is declared dead all the same.
	a.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	mounttest.WaitFor(t, "A declared dead", mounttest.RecoveredWithin+30*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		d, err := f.Store.GetSession(ctx, sess)
		return err == nil && d.Dead
	})
	if took := time.Since(stopped); took < mounttest.Lease {
		t.Errorf("A declared dead %s after it froze, before its lease (%s) ran out", took, mounttest.Lease)
	}
	mounttest.WaitFor(t, "B gets the lock of frozen A", mounttest.RecoveredWithin+30*time.Second, func() bool {
		return flockN(t, b.Path("locked"))
	})
	a.Signal(syscall.SIGCONT)
	if l := h.write("v3"); l != fmt.Sprintf("errno %d", int(syscall.EIO)) {
		t.Errorf("A's holder writes after its lock was lost: %q, want EIO", l)
	}
	mounttest.WaitLog(t, a, "started a new session", time.Minute)
	if now := mounttest.Session(t, f, a).ID; now == sess {
		t.Errorf("A kept its session %s after being declared dead", sess)
	}
	mounttest.Alive(t, a)
}
