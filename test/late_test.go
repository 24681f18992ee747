package test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// lateDelay: how long the fault proxy holds the chosen request. Past the
// mount's --es-timeout (1s here), so the sender has given up when the
// request lands.
const (
	lateTimeout = time.Second
	lateDelay   = 4 * time.Second
)

// lateLocks reads the lock documents of paths in real time and returns
// those that exist.
func lateLocks(t *testing.T, f *mounttest.FS, paths ...string) []store.LockDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := make([]string, len(paths))
	for i, p := range paths {
		ids[i] = store.LockID(p)
	}
	docs, err := f.Store.GetLocks(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.LockDoc
	for _, d := range docs {
		if d.Found {
			out = append(out, d)
		}
	}
	return out
}

// lateIntents returns the path documents carrying an intent.
func lateIntents(t *testing.T, f *mounttest.FS) []store.Dentry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	sc := f.Store.ScanIntents(store.DefaultPageSize)
	defer sc.Close()
	var out []store.Dentry
	for {
		page, _, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if page == nil {
			return out
		}
		out = append(out, page...)
	}
}

func lateWaitFired(t *testing.T, fault *mounttest.Fault) {
	t.Helper()
	select {
	case <-fault.Fired():
	case <-time.After(time.Minute):
		t.Fatal("the fault never fired: the request it waits for was not sent")
	}
	if fault.Status != 200 {
		t.Fatalf("the delayed request did not land: the cluster answered %d", fault.Status)
	}
}

// TestReviewLateLockBulk (LOCKING-REVIEW [8]): a mount's lock bulk is held
// by the network past the mount's request deadline and lands after the
// mount gave up. The operation fails cleanly; the entries the late bulk
// wrote belong to a live session and an operation it has finished, and
// are gone within lease + grace, so nothing is locked forever.
func TestReviewLateLockBulk(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	b := crMount(t, f, nil)
	a := crMount(t, f, nil, "--es-url", fp.URL, "--es-timeout", lateTimeout.String())

	// In a directory: a create at the root takes no lock at all (the root
	// is never locked, and the name is decided by create-if-absent), one
	// below /p takes the shared lock of /p.
	if err := os.Mkdir(a.Path("p"), 0o755); err != nil {
		t.Fatal(err)
	}
	late := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("-locks"), Delay: lateDelay, Reset: true})
	start := time.Now()
	err := os.Mkdir(a.Path("p", "d"), 0o755)
	took := time.Since(start)
	t.Logf("REPORT %s: mkdir whose lock bulk was held %s: %s after %s", t.Name(), lateDelay, crErrno(err), took.Round(time.Millisecond))
	if err == nil {
		t.Fatalf("mkdir succeeded although its lock bulk never answered")
	}
	if took > lateDelay+lateTimeout {
		t.Errorf("mkdir took %s to fail; its request deadline is %s", took, lateTimeout)
	}
	lateWaitFired(t, late)
	landed := time.Now()
	left := lateLocks(t, f, "/p/d", "/p")
	if len(left) == 0 {
		t.Fatal("the late lock bulk left no entry: the test provoked nothing")
	}
	t.Logf("the late bulk left %d lock documents, e.g. %+v", len(left), left[0])

	// Both mounts stay alive throughout: the entries must go because the
	// session says the operation is over, not because a mount died.
	for len(left) > 0 {
		if time.Since(landed) > crBound {
			t.Fatalf("lock entries of a finished operation still there %s after they landed: %+v", crBound, left)
		}
		time.Sleep(50 * time.Millisecond)
		left = lateLocks(t, f, "/p/d", "/p")
	}
	t.Logf("REPORT %s: the late entries were collected %s after they landed (lease %s, grace %s)", t.Name(),
		time.Since(landed).Round(time.Millisecond), crLease, crLease/2)
	if a.Exited() || b.Exited() {
		t.Fatal("a mount exited")
	}
	if err := os.Mkdir(a.Path("p", "d"), 0o755); err != nil {
		t.Fatalf("mkdir again once the entries were collected: %v", err)
	}
	if err := os.WriteFile(b.Path("p", "d", "from-b"), []byte("b\n"), 0o644); err != nil {
		t.Fatalf("create below the directory from the other mount: %v", err)
	}
	want := newCrTree().add("p", nil).add("p/d", nil)
	want.files["p/d/from-b"] = "b\n"
	if _, ok := crWaitClean(t, f, a, want, time.Now(), crStale); ok {
		crFinalCheck(t, f, b, want)
	}
}

// TestReviewLateStageBulk (LOCKING-REVIEW [1,8]): the network holds the
// third stage bulk of a mount (the one of its third rename) past the
// deadline, then resets the connection; the request lands after the mount
// rolled the rename back. Its late writes (a new path, a marked source)
// must stay invisible, be collected by a sweeper, and not stop the rename
// from being done again; after `mv b/x c; rm c` nothing reappears.
func TestReviewLateStageBulk(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a := crMount(t, f, nil, "--es-url", fp.URL, "--es-timeout", lateTimeout.String())
	b := crMount(t, f, nil)
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(a.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"f1", "f2", "x"} {
		if err := os.WriteFile(a.Path("a", n), []byte(crContent(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	late := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("", `"role":"dst"`), Nth: 3, Delay: lateDelay, Reset: true})
	for _, n := range []string{"f1", "f2"} {
		if err := os.Rename(a.Path("a", n), a.Path("b", n)); err != nil {
			t.Fatalf("rename of %s: %v", n, err)
		}
	}
	// rename(2), not mv: GNU mv would retry a failed rename by itself.
	start := time.Now()
	err := os.Rename(a.Path("a", "x"), a.Path("b", "x"))
	t.Logf("REPORT %s: the rename whose stage bulk was held: %s after %s", t.Name(), crErrno(err), time.Since(start).Round(time.Millisecond))
	if err == nil {
		t.Fatal("the rename succeeded although its stage bulk never answered")
	}
	lateWaitFired(t, late)
	landed := time.Now()

	// The rename was rolled back: x is where it was, on both mounts, and
	// the late writes show nowhere.
	want := newCrTree().add("a", []string{"x"}).add("b", []string{"f1", "f2"})
	for _, m := range []*mounttest.Mount{a, b} {
		if probs := crEventually(m, want, "", true); len(probs) > 0 {
			t.Errorf("%s right after the late stage landed:\n  %s", m.Dir, crCap(probs, 10))
		}
	}
	// A sweeper collects what the late bulk wrote, while both mounts live.
	strays := lateIntents(t, f)
	t.Logf("the late stage left %d documents with an intent", len(strays))
	for len(strays) > 0 {
		if time.Since(landed) > crBound {
			t.Fatalf("stray documents of a finished rename still there %s after they landed: %+v", crBound, strays)
		}
		time.Sleep(100 * time.Millisecond)
		strays = lateIntents(t, f)
	}
	t.Logf("REPORT %s: strays collected %s after the late stage landed", t.Name(), time.Since(landed).Round(time.Millisecond))

	// Done again, then moved and removed: nothing reappears.
	if err := os.Rename(a.Path("a", "x"), a.Path("b", "x")); err != nil {
		t.Fatalf("the rename, done again: %v", err)
	}
	if err := os.Rename(a.Path("b", "x"), a.Path("c")); err != nil {
		t.Fatalf("mv b/x c: %v", err)
	}
	if err := os.Remove(a.Path("c")); err != nil {
		t.Fatalf("rm c: %v", err)
	}
	want = newCrTree().add("a", nil).add("b", []string{"f1", "f2"})
	for until := time.Now().Add(crBound); time.Now().Before(until); time.Sleep(500 * time.Millisecond) {
		for _, m := range []*mounttest.Mount{a, b} {
			for _, p := range []string{"a/x", "b/x", "c"} {
				if _, err := os.Lstat(m.Path(p)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s reappeared on %s: %v", p, m.Dir, err)
				}
			}
		}
	}
	if _, ok := crWaitClean(t, f, b, want, time.Now(), crStale); ok {
		crFinalCheck(t, f, b, want)
	}
}
