package test

// Advisory locks whose request or answer is lost on the way: a grant, a
// waiting marker, an unlock, a release at close. What the process is told
// must be what holds (a lock it was told it holds is held, one it was told
// it does not hold or that it released is free for others soon), and
// nothing is left in the lock index that no process believes it holds.

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"golang.org/x/sys/unix"
)

// fileLockBulk matches the _bulk requests that write file lock documents
// (ids "K<ino>") and contain every one of also, and none of not.
func fileLockBulk(also []string, not ...string) func(method, path string, body []byte) bool {
	match := mounttest.BulkTo("-locks", append([]string{`"_id":"K`}, also...)...)
	return func(method, path string, body []byte) bool {
		if !match(method, path, body) {
			return false
		}
		for _, s := range not {
			if bytes.Contains(body, []byte(s)) {
				return false
			}
		}
		return method == http.MethodPost
	}
}

// Bodies of the lock document writes: a flock holder, any holder, a
// waiting marker (its ticket), and the delete of the last entry.
var (
	flockEntry = []string{`"f":true`}
	waitEntry  = []string{`"k":"`}
	lastGone   = []string{`{"delete":`}
)

// probeOFD reports whether an OFD write lock of path's first 100 bytes is
// granted (then unlocked at once): an owner of its own, whatever process
// holds record locks.
func probeOFD(t *testing.T, path string) bool {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	switch err := setlk(fd, unix.F_WRLCK, 0, 100, true); {
	case errors.Is(err, syscall.EAGAIN):
		return false
	case err != nil:
		t.Fatalf("F_OFD_SETLK on %s: %v", path, err)
	}
	if err := setlk(fd, unix.F_UNLCK, 0, 100, true); err != nil {
		t.Fatalf("unlocking the probe of %s: %v", path, err)
	}
	return true
}

// fileLocksLeft lists the file locks `esfs locks` shows.
func fileLocksLeft(t *testing.T, f *mounttest.FS) []string {
	t.Helper()
	out, err := f.Run("locks")
	if err != nil {
		t.Fatalf("esfs locks: %v\n%s", err, out)
	}
	var left []string
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, "(file lock)") {
			left = append(left, l)
		}
	}
	return left
}

// TestFileLockLostAnswers: mount A talks to the cluster through a fault
// proxy that loses one lock document write's answer (the write lands,
// the connection is reset) or the write itself (never sent on), for a
// flock grant, an fcntl grant, a blocked flock's waiting marker, an
// explicit unlock and a release at close. The process is told success
// when the grant landed (the mount reads the document again to learn
// it), a lock it released is free on mount B soon, even while it keeps
// the file open, and `esfs locks` ends with nothing.
func TestFileLockLostAnswers(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a := f.Mount(t, "--es-url", fp.URL)
	b := f.Mount(t)
	open := func(t *testing.T, m *mounttest.Mount, name string) int {
		t.Helper()
		fd, err := unix.Open(m.Path(name), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	// fault arms one fault and returns a function that waits until it
	// acted: a case whose fault never fired provoked nothing.
	fault := func(t *testing.T, fl *mounttest.Fault) func() {
		fp.Add(fl)
		return func() {
			t.Helper()
			select {
			case <-fl.Fired():
			case <-time.After(30 * time.Second):
				t.Fatal("the fault never fired: the case provoked nothing")
			}
		}
	}
	freeOnB := func(t *testing.T, what, name string, probe func(*testing.T, string) bool) {
		t.Helper()
		mounttest.WaitFor(t, what, 30*time.Second, func() bool { return probe(t, b.Path(name)) })
	}
	flockFree := func(t *testing.T, p string) bool { return flockN(t, p) }

	t.Run("flock grant", func(t *testing.T) {
		fd := open(t, a, "flock-grant")
		fired := fault(t, &mounttest.Fault{Match: fileLockBulk(flockEntry), Reset: true})
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		fired()
		if err != nil {
			t.Errorf("flock whose grant landed and whose answer was lost: %v, want success", err)
		}
		if err == nil && flockN(t, b.Path("flock-grant")) {
			t.Error("B got the flock A's process was told it holds")
		}
		unix.Close(fd)
		freeOnB(t, "the flock to be free on B after A's holder closed", "flock-grant", flockFree)
	})

	t.Run("fcntl grant", func(t *testing.T) {
		fd := open(t, a, "fcntl-grant")
		fired := fault(t, &mounttest.Fault{Match: fileLockBulk(nil, flockEntry...), Reset: true})
		err := setlk(fd, unix.F_WRLCK, 0, 100, false)
		fired()
		if err != nil {
			t.Errorf("F_SETLK whose grant landed and whose answer was lost: %v, want success", err)
		}
		if err == nil && probeOFD(t, b.Path("fcntl-grant")) {
			t.Error("B got the record lock A's process was told it holds")
		}
		if err := setlk(fd, unix.F_UNLCK, 0, 100, false); err != nil {
			t.Errorf("unlock: %v", err)
		}
		freeOnB(t, "the record lock to be free on B after A unlocked", "fcntl-grant", probeOFD)
		unix.Close(fd)
	})

	t.Run("flock grant landing late", func(t *testing.T) {
		// Held past the request timeout, then delivered: the mount learns
		// the grant did not land, writes it again, and the late one is
		// refused by the version the second moved on.
		c := f.Mount(t, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String())
		fd := open(t, c, "late-grant")
		defer unix.Close(fd)
		late := fp.Add(&mounttest.Fault{Match: fileLockBulk(flockEntry), Delay: mounttest.LateDelay, Reset: true})
		if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Errorf("flock whose grant was held past the request timeout: %v, want success", err)
		}
		mounttest.WaitLanded(t, late)
		if flockN(t, b.Path("late-grant")) {
			t.Error("B got the flock C's process was told it holds")
		}
		if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
			t.Fatal(err)
		}
		freeOnB(t, "the flock to be free on B after C unlocked, with the late grant landed", "late-grant", flockFree)
	})

	t.Run("flock grant unsettled", func(t *testing.T) {
		// The grant lands, its answer is lost, and every read and write
		// of the lock document fails for longer than the mount's lease:
		// the process is told the flock failed, and once the cluster
		// answers again the grant that landed is dropped.
		d := f.Mount(t, "--es-url", fp.URL, "--lease", mounttest.Lease.String())
		fd := open(t, d, "unsettled")
		defer unix.Close(fd)
		var cut atomic.Bool
		lockDoc := []byte(`"K`)
		fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
			if !bytes.Contains(body, lockDoc) || !strings.Contains(r.URL.Path, "-locks/_mget") && !fileLockBulk(nil)(r.Method, r.URL.Path, body) {
				return false
			}
			if !cut.Load() {
				// Up to the grant, whose answer the fault below loses;
				// everything after it fails.
				cut.Store(fileLockBulk(flockEntry)(r.Method, r.URL.Path, body))
				return false
			}
			http.Error(w, `{"error":"fault proxy: cut off","status":503}`, http.StatusServiceUnavailable)
			return true
		})
		defer fp.Intercept(nil)
		fired := fault(t, &mounttest.Fault{Match: fileLockBulk(flockEntry), Reset: true})
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		fired()
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("flock whose grant's outcome stayed unknown for a lease: %v, want EIO", err)
		}
		fp.Intercept(nil)
		freeOnB(t, "the flock to be free on B once D's cluster answers again", "unsettled", flockFree)
	})

	t.Run("waiting marker", func(t *testing.T) {
		held := open(t, b, "waited")
		defer unix.Close(held)
		if err := unix.Flock(held, unix.LOCK_EX|unix.LOCK_NB); err != nil {
			t.Fatal(err)
		}
		fd := open(t, a, "waited")
		defer unix.Close(fd)
		fired := fault(t, &mounttest.Fault{Match: fileLockBulk(waitEntry), Reset: true})
		got := make(chan error, 1)
		go func() { got <- unix.Flock(fd, unix.LOCK_EX) }()
		fired()
		select {
		case err := <-got:
			t.Fatalf("a blocking flock whose waiting marker's answer was lost returned while B holds the lock: %v", err)
		case <-time.After(500 * time.Millisecond):
		}
		if err := unix.Flock(held, unix.LOCK_UN); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("the blocking flock once B unlocked: %v, want success", err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the blocking flock still waits 60s after B unlocked")
		}
		if flockN(t, b.Path("waited")) {
			t.Error("B got the flock A's waiter was granted")
		}
		if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
			t.Fatal(err)
		}
		freeOnB(t, "the flock to be free on B after A unlocked", "waited", flockFree)
	})

	for _, c := range []struct {
		name string
		drop bool // the write itself is lost, else only its answer
	}{{"answer lost", false}, {"request lost", true}} {
		t.Run("unlock, "+c.name, func(t *testing.T) {
			name := "unlock-" + strings.ReplaceAll(c.name, " ", "-")
			fd := open(t, a, name)
			defer unix.Close(fd)
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			fired := fault(t, &mounttest.Fault{Match: fileLockBulk(lastGone), Reset: !c.drop, Drop: c.drop})
			err := unix.Flock(fd, unix.LOCK_UN)
			fired()
			if err != nil {
				t.Errorf("an unlock whose %s: %v, want success", c.name, err)
			}
			// The file stays open: the unlock alone must free it.
			freeOnB(t, "the flock to be free on B after A unlocked", name, flockFree)
		})
		t.Run("release at close, "+c.name, func(t *testing.T) {
			name := "close-" + strings.ReplaceAll(c.name, " ", "-")
			fd := open(t, a, name)
			if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
				t.Fatal(err)
			}
			fired := fault(t, &mounttest.Fault{Match: fileLockBulk(lastGone), Reset: !c.drop, Drop: c.drop})
			if err := unix.Close(fd); err != nil {
				t.Errorf("close: %v", err)
			}
			fired()
			freeOnB(t, "the flock to be free on B after A's holder closed", name, flockFree)
			// A process's record locks go with its FLUSH (any close: here
			// a dup's, the file staying open). close returns 0, as Linux's
			// does whatever becomes of the locks; the lock is free at once
			// on A, which knows it gave it back, and on B once A's retry
			// lands (or, were A cut off, once it is declared dead).
			rname := name + "-record"
			fd = open(t, a, rname)
			defer unix.Close(fd)
			if err := setlk(fd, unix.F_WRLCK, 0, 100, false); err != nil {
				t.Fatal(err)
			}
			dup, err := unix.Dup(fd)
			if err != nil {
				t.Fatal(err)
			}
			fired = fault(t, &mounttest.Fault{Match: fileLockBulk(lastGone), Reset: !c.drop, Drop: c.drop})
			if err := unix.Close(dup); err != nil {
				t.Errorf("close of a dup: %v", err)
			}
			fired()
			if !probeOFD(t, a.Path(rname)) {
				t.Error("the record lock is still held on A after a close of a dup whose release was lost")
			}
			freeOnB(t, "the record lock to be free on B after A's holder closed a dup", rname, probeOFD)
			// An OFD lock goes with its open file's last close, whose
			// RELEASE the kernel sends after close returns: a lock request
			// on A sent after it waits for it, and finds the lock free.
			oname := name + "-ofd"
			fd = open(t, a, oname)
			checker := open(t, a, oname)
			defer unix.Close(checker)
			if err := setlk(fd, unix.F_WRLCK, 0, 100, true); err != nil {
				t.Fatal(err)
			}
			fired = fault(t, &mounttest.Fault{Match: fileLockBulk(lastGone), Reset: !c.drop, Drop: c.drop})
			if err := unix.Close(fd); err != nil {
				t.Errorf("close: %v", err)
			}
			if got := getlkAnswer(checker, true, unix.F_WRLCK, 0, 100); got != "could be placed" {
				t.Errorf("F_OFD_GETLK on A right after the last close of an open file whose OFD lock's release was lost: %s, want could be placed", got)
			}
			fired()
			freeOnB(t, "the OFD lock to be free on B after its open file's last close on A", oname, probeOFD)
		})
	}

	mounttest.WaitFor(t, "esfs locks to show no file lock", 30*time.Second, func() bool { return len(fileLocksLeft(t, f)) == 0 })
	if left := fileLocksLeft(t, f); len(left) > 0 {
		t.Errorf("file locks left:\n%s", strings.Join(left, "\n"))
	}
	if a.Exited() || b.Exited() {
		t.Error("a mount exited")
	}
}

// TestUnlockWhenItsFlushFails (campaign seed 215993735, class
// lock-outlived): an unlock first lands what its owner wrote, so that the
// next holder reads it; when that flush failed (the cluster refused the
// data's write), the unlock answered EIO and kept the lock, held for as
// long as the file stayed open: every other mount's request was refused.
// Now the lock is released all the same, the unlock succeeds (Linux's
// does not fail), and the lost write is reported where a write-back error
// is: at the descriptor's next fsync or close.
func TestUnlockWhenItsFlushFails(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a := f.Mount(t, "--es-url", fp.URL, "--es-timeout=5s")
	b := f.Mount(t)
	for _, k := range lockKinds {
		t.Run(k.name, func(t *testing.T) {
			name := "f-" + k.name
			if err := os.WriteFile(a.Path(name), []byte("before\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			fd := openFd(t, a.Path(name), unix.O_RDWR)
			if err := k.lock(fd); err != nil {
				t.Fatal(err)
			}
			pwrite(t, fd, "AFTER\n", 0)
			fault := fp.Add(&mounttest.Fault{Refuse: 503, Match: mounttest.BulkTo("-data")})
			if err := k.unlock(fd); err != nil {
				t.Errorf("unlock whose flush failed: %v, want success", err)
			}
			fault.WaitFired(t)
			bfd := openFd(t, b.Path(name), unix.O_RDWR)
			defer unix.Close(bfd)
			var err error
			if k.name == "flock" {
				err = unix.Flock(bfd, unix.LOCK_EX|unix.LOCK_NB)
			} else {
				err = unix.FcntlFlock(uintptr(bfd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK})
			}
			if err != nil {
				t.Errorf("B's %s after A's unlock: %v, want the lock", k.name, err)
			}
			if err := unix.Close(fd); err != unix.EIO {
				t.Errorf("close of A's descriptor whose write was lost: %v, want EIO", err)
			}
			if got := mounttest.MustReadFile(t, b.Path(name)); string(got) != "before\n" {
				t.Errorf("B reads %q; want the file as before the lost write", got)
			}
		})
	}
}
