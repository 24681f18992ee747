package test

// The bytes around advisory locks: a lock granted on one mount shows what
// the previous holder on another mount wrote before it let the lock go
// (lock-to-unlock), also to a process that has writes of its own buffered
// and the file's size cached from before, and those writes land on top of
// the other mount's bytes without undoing its size or the bytes they do
// not cover.

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"golang.org/x/sys/unix"
)

// lockKinds take and give back an exclusive lock of a whole file through
// a descriptor: flock(2), and an fcntl record lock of every byte.
var lockKinds = []struct {
	name         string
	lock, unlock func(fd int) error
}{
	{"flock", func(fd int) error { return unix.Flock(fd, unix.LOCK_EX) },
		func(fd int) error { return unix.Flock(fd, unix.LOCK_UN) }},
	{"fcntl", func(fd int) error {
		return unix.FcntlFlock(uintptr(fd), unix.F_SETLKW, &unix.Flock_t{Type: unix.F_WRLCK})
	}, func(fd int) error {
		return unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_UNLCK})
	}},
}

func openFd(t *testing.T, path string, flags int) int {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

func pwrite(t *testing.T, fd int, s string, off int64) {
	t.Helper()
	if n, err := unix.Pwrite(fd, []byte(s), off); err != nil || n != len(s) {
		t.Fatalf("pwrite of %d bytes at %d: %d, %v", len(s), off, n, err)
	}
}

// contentOf is what a descriptor reads from the start, and the size fstat
// gives it.
func contentOf(t *testing.T, fd int) ([]byte, int64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		t.Fatal(err)
	}
	return buf[:n], st.Size
}

// readsOn waits until name reads want on every mount given (one that does
// not hold a delegation on its directory may show what it cached for the
// documented bound).
func readsOn(t *testing.T, name string, want []byte, ms ...*mounttest.Mount) {
	t.Helper()
	for _, m := range ms {
		mounttest.WaitFor(t, name+" on "+m.Dir, staleBound+slack, func() bool {
			got, err := os.ReadFile(m.Path(name))
			if err != nil || !bytes.Equal(got, want) {
				t.Logf("%s on %s: %s", name, m.Dir, differs(got, want, err))
				return false
			}
			return true
		})
	}
}

// TestFileLockRebasesBufferedWrites: a process on mount A has a file open
// with a write of its own buffered (not yet flushed, and after a flushed
// one, so that its mount holds a data generation of the file) and the
// file's size known; a process on mount B takes the lock, appends to the
// file, truncates it or writes in place, and lets the lock go; A's
// process takes the lock. From then on it sees B's change with its own
// write on top, in its size and its bytes, writes at the end it sees, and
// closes: both mounts read what the two wrote, one after the other. (A
// grant once only dropped what A cached when A had nothing buffered: A
// went on with the size and the bytes it had, so it read the file as
// before B's change and wrote its next bytes over B's append.)
func TestFileLockRebasesBufferedWrites(t *testing.T) {
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	orig := strings.Repeat("0123456789", 10)
	cat := func(parts ...string) []byte { return []byte(strings.Join(parts, "")) }
	changes := []struct {
		name   string
		change func(t *testing.T, fd int)
		want   []byte // what A sees once it holds the lock
	}{
		{"their-append", func(t *testing.T, fd int) { pwrite(t, fd, "BBBBB", int64(len(orig))) },
			cat("AAAAA", orig[5:], "BBBBB")},
		{"their-truncate", func(t *testing.T, fd int) {
			if err := unix.Ftruncate(fd, 50); err != nil {
				t.Fatal(err)
			}
		}, cat("AAAAA", orig[5:50])},
		{"their-write-in-place", func(t *testing.T, fd int) { pwrite(t, fd, "BBBBB", 20) },
			cat("AAAAA", orig[5:20], "BBBBB", orig[25:])},
	}
	for _, k := range lockKinds {
		for _, c := range changes {
			t.Run(k.name+"/"+c.name, func(t *testing.T) {
				name := k.name + "-" + c.name
				if err := os.WriteFile(b.Path(name), []byte(orig), 0o644); err != nil {
					t.Fatal(err)
				}
				fa := openFd(t, a.Path(name), unix.O_RDWR)
				defer func() {
					if fa >= 0 {
						unix.Close(fa)
					}
				}()
				pwrite(t, fa, "aaaaa", 0)
				if err := unix.Fsync(fa); err != nil {
					t.Fatal(err)
				}
				pwrite(t, fa, "AAAAA", 0)
				if _, size := contentOf(t, fa); size != int64(len(orig)) {
					t.Fatalf("A's size before B's change: %d, want %d", size, len(orig))
				}

				fb := openFd(t, b.Path(name), unix.O_RDWR)
				if err := k.lock(fb); err != nil {
					t.Fatalf("B's lock: %v", err)
				}
				c.change(t, fb)
				if err := k.unlock(fb); err != nil {
					t.Fatalf("B's unlock: %v", err)
				}
				if err := unix.Close(fb); err != nil {
					t.Fatal(err)
				}

				if err := k.lock(fa); err != nil {
					t.Fatalf("A's lock: %v", err)
				}
				got, size := contentOf(t, fa)
				if size != int64(len(c.want)) {
					t.Errorf("A's size once it holds the lock: %d, want %d", size, len(c.want))
				}
				if !bytes.Equal(got, c.want) {
					t.Errorf("A reads once it holds the lock: %s", differs(got, c.want, nil))
				}
				pwrite(t, fa, "CCCCC", size)
				if err := k.unlock(fa); err != nil {
					t.Fatalf("A's unlock: %v", err)
				}
				err := unix.Close(fa)
				fa = -1
				if err != nil {
					t.Fatalf("A's close: %v", err)
				}
				readsOn(t, name, append(c.want, "CCCCC"...), a, b)
			})
		}
	}
}

// TestFileLockRebaseWhenStoreFails: mount A talks to the cluster through
// a fault proxy that holds the read of the file a lock grant makes to
// bring A's open file up to B's change past A's request timeout (a read
// the proxy drops at once is sent again by Go's HTTP client, which
// retries an idempotent request whose connection closed unanswered). The
// lock is granted all the same (the process is told it holds it, and it
// does: B cannot take it), and A's next use of the file reads it then:
// its size and bytes are B's append with A's buffered write on top.
func TestFileLockRebaseWhenStoreFails(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a, b := f.Mount(t, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String()), f.Mount(t)
	orig := strings.Repeat("0123456789", 10)
	want := []byte("AAAAA" + orig[5:] + "BBBBB")
	if err := os.WriteFile(b.Path("file"), []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	fa := openFd(t, a.Path("file"), unix.O_RDWR)
	defer func() {
		if fa >= 0 {
			unix.Close(fa)
		}
	}()
	pwrite(t, fa, "AAAAA", 0)
	var st unix.Stat_t
	if err := unix.Fstat(fa, &st); err != nil || st.Size != int64(len(orig)) {
		t.Fatalf("A's size before B's append: %d, %v", st.Size, err)
	}

	fb := openFd(t, b.Path("file"), unix.O_RDWR)
	if err := unix.Flock(fb, unix.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	pwrite(t, fb, "BBBBB", int64(len(orig)))
	if err := unix.Flock(fb, unix.LOCK_UN); err != nil {
		t.Fatal(err)
	}
	unix.Close(fb)

	inode := fmt.Sprintf("-inodes/_doc/%d", st.Ino)
	lost := fp.Add(&mounttest.Fault{Delay: mounttest.LateDelay, Drop: true, Match: func(method, path string, _ []byte) bool {
		return method == http.MethodGet && strings.HasSuffix(path, inode)
	}})
	if err := unix.Flock(fa, unix.LOCK_EX); err != nil {
		t.Fatalf("A's flock, whose read of the file was lost: %v; want it granted", err)
	}
	select {
	case <-lost.Fired():
	case <-time.After(mounttest.LateDelay + 30*time.Second):
		t.Fatal("the grant's read of the file never came: the case provoked nothing")
	}
	if !strings.Contains(a.Log(), "the file could not be read again") {
		t.Errorf("A's log says nothing of the grant's failed read:\n%s", a.Log())
	}
	got, size := contentOf(t, fa)
	if size != int64(len(want)) || !bytes.Equal(got, want) {
		t.Errorf("A's next read after the grant: size %d, %s", size, differs(got, want, nil))
	}
	// (After A's reads: flock(1) opens with O_CREAT, which recalls A's
	// delegation on the directory, and A flushes.)
	if flockN(t, b.Path("file")) {
		t.Error("B got the lock A's process was told it holds")
	}
	pwrite(t, fa, "CCCCC", size)
	err := unix.Close(fa)
	fa = -1
	if err != nil {
		t.Fatalf("A's close: %v", err)
	}
	readsOn(t, "file", append(want, "CCCCC"...), a, b)
}

// TestFileLockGrantDuringAnotherClose: a process on mount A takes a flock
// through one descriptor while another descriptor of the file, on the same
// mount, is being closed, its flush in flight (held at the proxy): once
// granted, the first descriptor reads everything the close wrote. (The
// grant once read the stored size while the close's write was in flight,
// and took it for the file's once the close was done: reads ended before
// the closed descriptor's bytes.)
func TestFileLockGrantDuringAnotherClose(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a, b := f.Mount(t, "--es-url", fp.URL), f.Mount(t)
	orig := strings.Repeat("0123456789", 10)
	want := []byte(orig + "XXXXX")
	if err := os.WriteFile(b.Path("file"), []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	writer := openFd(t, a.Path("file"), unix.O_RDWR)
	reader := openFd(t, a.Path("file"), unix.O_RDONLY)
	defer unix.Close(reader)
	pwrite(t, writer, "XXXXX", int64(len(orig)))
	var st unix.Stat_t
	if err := unix.Fstat(writer, &st); err != nil {
		t.Fatal(err)
	}

	// The first write of the inode by the writer's close waits at the
	// proxy until released; the test learns whether the grant reads the
	// inode meanwhile.
	written, read := fmt.Sprintf("-inodes-W/_doc/%d", st.Ino), fmt.Sprintf("-inodes/_doc/%d", st.Ino)
	held, release, granting, readMeanwhile := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	var holdOnce, grantOnce, readOnce sync.Once
	fp.Intercept(func(_ http.ResponseWriter, r *http.Request, body []byte) bool {
		switch {
		case (r.Method == http.MethodPut || r.Method == http.MethodPost) && strings.Contains(r.URL.Path, written):
			holdOnce.Do(func() {
				close(held)
				<-release
			})
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/_bulk") && bytes.Contains(body, []byte(`"_id":"K`)):
			grantOnce.Do(func() { close(granting) })
		case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, read):
			select {
			case <-held:
				readOnce.Do(func() { close(readMeanwhile) })
			default:
			}
		}
		return false
	})
	closed := make(chan error, 1)
	go func() { closed <- unix.Close(writer) }()
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the close never wrote the inode: the case provoked nothing")
	}
	granted := make(chan error, 1)
	go func() { granted <- unix.Flock(reader, unix.LOCK_SH) }()
	select {
	case <-granting:
	case <-time.After(30 * time.Second):
		t.Fatal("the flock never wrote its grant")
	}
	// A grant that reads the inode without waiting for the close does so
	// right after its lock write; one that waits reads nothing yet.
	select {
	case <-readMeanwhile:
		t.Log("the grant read the inode while the close's write was held")
	case <-time.After(3 * time.Second):
	}
	close(release)
	for what, ch := range map[string]chan error{"the close": closed, "the flock": granted} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("%s has not returned 60s after the close's write went on", what)
		}
	}
	if got, size := contentOf(t, reader); size != int64(len(want)) || !bytes.Equal(got, want) {
		t.Errorf("the flocked descriptor reads: size %d, %s", size, differs(got, want, nil))
	}
	readsOn(t, "file", want, a, b)
}
