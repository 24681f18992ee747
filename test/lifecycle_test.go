package test

import (
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestSigtermWithOpenFiles: SIGTERM while a process has a file open with
// unflushed writes: the mount detaches at once, the open file keeps working
// until closed, then the daemon exits cleanly and nothing written is lost.
func TestSigtermWithOpenFiles(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	fh, err := os.Create(m.Path("open"))
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte("a"), 1<<20+7)
	if _, err := fh.Write(first); err != nil {
		t.Fatal(err)
	}
	m.Signal(syscall.SIGTERM)
	deadline := time.Now().Add(30 * time.Second)
	for mounttest.IsMounted(m.Dir) {
		if time.Now().After(deadline) {
			t.Fatal("still mounted 30s after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := m.WaitExit(500 * time.Millisecond); ok {
		t.Fatal("the daemon exited while a file was still open")
	}
	second := bytes.Repeat([]byte("b"), 4096)
	if _, err := fh.Write(second); err != nil {
		t.Fatalf("write after detach: %v", err)
	}
	if err := fh.Close(); err != nil {
		t.Fatalf("close after detach: %v", err)
	}
	err, ok := m.WaitExit(30 * time.Second)
	if !ok {
		t.Fatal("the daemon did not exit after the last file was closed")
	}
	if err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, m.Log())
	}
	m2 := f.Mount(t)
	got, err := os.ReadFile(m2.Path("open"))
	if err != nil || !bytes.Equal(got, append(first, second...)) {
		t.Fatalf("after remount: %d bytes, %v", len(got), err)
	}
}

// TestSigtermWhileMounting: a SIGTERM that arrives as soon as the mount
// appears (a service stopped right after it started, a quick test) ends
// the daemon cleanly and leaves nothing mounted. The daemon used to open
// a file below its own mount point while mounting (go-fuse's poll check)
// before it handled signals: the signal killed it while that open waited
// for the GETATTR of the mount's root, a request its dying threads would
// never answer, and the thread hung in the kernel for ever, unkillable,
// with the mount. The cluster's answer to that GETATTR is held here so
// that the signal always lands in that window.
func TestSigtermWhileMounting(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	asked := make(chan struct{})
	var once sync.Once
	fp.Add(&mounttest.Fault{Match: func(method, path string, _ []byte) bool {
		root := method == http.MethodGet && strings.HasSuffix(path, "-inodes/_doc/1")
		if root {
			once.Do(func() { close(asked) })
		}
		return root
	}, Delay: 5 * time.Second})
	m := f.MountAt(t, t.TempDir(), nil, append([]string{"--es-url", fp.URL}, lkNoCache...)...)
	select {
	case <-asked:
		t.Log("the daemon asked for its root's attributes while mounting: signalling it now")
	case <-time.After(2 * time.Second):
	}
	m.Unmount(t)
}

// busyShell starts a shell whose working directory is dir and that waits
// for a line on its stdin: a process that keeps a mount busy.
func busyShell(t *testing.T, dir string) {
	t.Helper()
	sh := exec.Command("bash", "-c", "read _")
	sh.Dir = dir
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = sh.Process.Kill()
		_ = sh.Wait()
	})
}

// waitDetached waits until m's mount point has left the namespace.
func waitDetached(t *testing.T, m *mounttest.Mount, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for mounttest.IsMounted(m.Dir) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still mounted %s after SIGTERM", m.Dir, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSigtermBusyMountEnds: SIGTERM to a mount where a shell has its cwd
// and a file is open with unflushed writes, both in a directory another
// mount renamed away. The mount point is detached at once, the open file
// keeps working for the grace period, and then the daemon exits although
// both are still held; every byte written before it exited is kept.
func TestSigtermBusyMountEnds(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	const grace = 3 * time.Second
	b := f.MountAt(t, t.TempDir(), []string{"ESFS_SHUTDOWN_GRACE=" + grace.String()})
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(b.Path("d")); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the other mount does not see d: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	busyShell(t, b.Path("d"))
	fh, err := os.Create(b.Path("d", "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var want []byte
	write := func(s string) {
		t.Helper()
		if _, err := fh.Write([]byte(s)); err != nil {
			t.Fatalf("write %q: %v", s, err)
		}
		want = append(want, s...)
	}
	write("before the rename\n")
	if err := os.Rename(a.Path("d"), a.Path("e")); err != nil {
		t.Fatal(err)
	}
	write("after the rename\n")

	start := time.Now()
	b.Signal(syscall.SIGTERM)
	waitDetached(t, b, 60*time.Second)
	write("during the grace period\n")
	const bound = 30 * time.Second // flush, session end: a few round trips
	err, ok := b.WaitExit(grace + bound)
	if !ok {
		t.Fatalf("the daemon did not exit within %s (grace) + %s of SIGTERM while a cwd and a file were held in its mount", grace, bound)
	}
	t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, b.Log())
	}
	got, err := os.ReadFile(a.Path("e", "f"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the file written through the detached mount, read on the other: %q, %v; want %q", got, err, want)
	}
}

// TestSecondSignalExitsAtOnce: during the grace period of a busy mount, a
// second SIGTERM or SIGINT ends the daemon at once; what was flushed is
// kept.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	f := mounttest.NewFS(t)
	b := f.MountAt(t, t.TempDir(), []string{"ESFS_SHUTDOWN_GRACE=1h"})
	busyShell(t, b.Dir)
	fh, err := os.Create(b.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write([]byte("flushed\n")); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	b.Signal(syscall.SIGTERM)
	waitDetached(t, b, 60*time.Second)
	b.Signal(syscall.SIGINT)
	if _, ok := b.WaitExit(30 * time.Second); !ok {
		t.Fatal("the daemon did not exit within 30s of a second signal")
	}
	m := f.Mount(t)
	if got, err := os.ReadFile(m.Path("f")); err != nil || string(got) != "flushed\n" {
		t.Fatalf("after the second signal: %q, %v", got, err)
	}
}
