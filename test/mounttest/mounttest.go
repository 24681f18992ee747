// Package mounttest runs real esfs mount processes for tests: it builds the
// binary, makes a fresh filesystem in the test cluster, mounts it in a child
// process, waits for the kernel mount by polling /proc/self/mountinfo (never
// by sleeping), and unmounts and deletes everything when the test ends.
package mounttest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
// ESFS_TEST_BINARY names a binary to use instead (say, one built from an
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
		if err := st.DeleteFilesystem(ctx); err != nil {
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
}

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
	m := &Mount{Dir: dir, t: t, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() { m.err = cmd.Wait(); close(m.done) }()
	t.Cleanup(m.cleanup)
	deadline := time.Now().Add(60 * time.Second)
	for {
		if IsMounted(dir) {
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
func (m *Mount) Path(rel ...string) string {
	return filepath.Join(append([]string{m.Dir}, rel...)...)
}

// Pid is the mount process's id.
func (m *Mount) Pid() int { return m.cmd.Process.Pid }

// Log returns what the mount process logged so far.
func (m *Mount) Log() string {
	b, _ := os.ReadFile(m.log.Name())
	return string(b)
}

// Unmount sends SIGTERM, as a service manager would, and waits for a clean
// exit; the directory must no longer be a mount point.
func (m *Mount) Unmount(t testing.TB) {
	t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("esfs mount did not exit within 60s of SIGTERM:\n%s", m.Log())
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
	_ = m.cmd.Process.Kill()
	<-m.done
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

func (m *Mount) cleanup() {
	select {
	case <-m.done:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.done:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.done
		}
	}
	lazyUnmount(m.Dir)
	if m.t.Failed() {
		m.t.Logf("log of the mount at %s:\n%s", m.Dir, tail(m.Log(), 60))
	}
	m.log.Close()
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
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := bytes.Fields(sc.Bytes())
		if len(fields) > 4 && string(fields[4]) == dir {
			return true
		}
	}
	return false
}

// Sh runs a shell command line in dir and returns its combined output; the
// test fails if it exits non-zero.
func Sh(t testing.TB, dir, script string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s\n%v\n%s", script, err, tail(string(out), 40))
	}
	return string(out)
}

// Signal sends sig to the mount process.
func (m *Mount) Signal(sig os.Signal) { _ = m.cmd.Process.Signal(sig) }

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
