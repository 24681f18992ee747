package mounttest

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveBinary()
	os.Exit(code)
}

// recorder is a test that keeps its errors instead of failing, so that a
// test can check what the harness reports.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Errorf(format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, a...))
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.errs...)
}

// TestDeathIsReported: a mount process that ends while the test did not
// ask it to fails the test with its log; the ways tests end mounts on
// purpose do not.
func TestDeathIsReported(t *testing.T) {
	f := NewFS(t)
	kill := func(m *Mount) { _ = syscall.Kill(m.Pid(), syscall.SIGKILL) }
	for _, c := range []struct {
		name  string
		env   []string
		end   func(*Mount)
		death bool
	}{
		{"killed behind the harness's back", nil, kill, true},
		{"Kill", nil, func(m *Mount) { m.Kill() }, false},
		{"Signal SIGTERM", nil, func(m *Mount) { m.Signal(syscall.SIGTERM) }, false},
		{"a crash point set", []string{"ESFS_CRASH_POINT=rename-after-commit"}, kill, false},
		{"unmounted by the test", nil, func(m *Mount) { _ = syscall.Unmount(m.Dir, 0) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorder{TB: t}
			m := f.MountAt(r, t.TempDir(), c.env)
			c.end(m)
			if !m.waitDone(exitLimit) {
				t.Fatalf("the mount process did not end: %s", m.forceEnd())
			}
			m.checkDeath()
			errs := r.errors()
			if !c.death {
				if len(errs) > 0 {
					t.Errorf("reported as a death: %q", errs)
				}
				return
			}
			if len(errs) != 1 || !strings.Contains(errs[0], "died while the test did not ask it to end") ||
				!strings.Contains(errs[0], "msg=mounted") {
				t.Errorf("want one report of the death with the log's tail, got %q", errs)
			}
		})
	}
}

// TestForceEndAbortsTheConnection: forceEnd aborts the mount's FUSE
// connection, which fails a request the daemon will never answer (it is
// stopped here), and then ends the process.
func TestForceEndAbortsTheConnection(t *testing.T) {
	f := NewFS(t)
	m := f.Mount(t)
	if m.Conn() < 0 {
		t.Fatal("no FUSE connection number read from mountinfo")
	}
	m.Signal(syscall.SIGSTOP)
	t.Cleanup(func() { m.Signal(syscall.SIGCONT) })
	statErr := make(chan error, 1)
	go func() {
		_, err := os.Stat(m.Path("never-answered"))
		statErr <- err
	}()
	select {
	case err := <-statErr:
		t.Fatalf("stat answered by a stopped daemon: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	did := m.forceEnd()
	select {
	case err := <-statErr:
		// A request waiting at the abort fails with ECONNABORTED, a later one
		// with ENOTCONN.
		if !errors.Is(err, syscall.ECONNABORTED) && !errors.Is(err, syscall.ENOTCONN) {
			t.Errorf("stat on the aborted mount: %v, want ECONNABORTED or ENOTCONN", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("stat still blocked 30s after the abort (%s)", did)
	}
	if !m.Exited() || IsMounted(m.Dir) {
		t.Errorf("after forceEnd: exited %v, mounted %v (%s)", m.Exited(), IsMounted(m.Dir), did)
	}
	if !strings.Contains(did, fmt.Sprintf("aborted FUSE connection %d", m.Conn())) {
		t.Errorf("forceEnd says %q", did)
	}
}
