package locking_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestFileLocksAcrossMounts: record locks of two mounts conflict on
// overlapping ranges (reads share), F_GETLK reports the other mount's
// holder, flocks are their own kind, a blocking request is granted once
// the holder releases, and an unlock of part of a range leaves the rest.
func TestFileLocksAcrossMounts(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	const ino = 7001
	w := func(owner uint64, start, end int64) locking.FileLock {
		return locking.FileLock{Owner: owner, Start: start, End: end, Write: true, Pid: 100}
	}
	r := func(owner uint64, start, end int64) locking.FileLock {
		return locking.FileLock{Owner: owner, Start: start, End: end, Pid: 200}
	}
	if err := a.FileLocks.Set(ctx, ino, "/f", w(1, 0, 99), false); err != nil {
		t.Fatal(err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", w(1, 50, 60), false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("an overlapping write lock from another mount: %v, want ErrWouldBlock", err)
	}
	got, found, err := b.FileLocks.Get(ctx, ino, r(9, 90, 200))
	if err != nil || !found || got.Start != 0 || got.End != 99 || !got.Write || got.Pid != 100 || got.Session != a.Session().ID() {
		t.Fatalf("F_GETLK on B: %+v, %v, %v; want A's write lock 0-99, pid 100", got, found, err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", r(1, 100, locking.ToEOF), false); err != nil {
		t.Fatalf("a read lock beside A's: %v", err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 1, Start: 0, End: locking.ToEOF, Write: true, Flock: true}, false); err != nil {
		t.Fatalf("a flock beside record locks: %v", err)
	}
	if err := a.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 5, Start: 0, End: locking.ToEOF, Flock: true}, false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("a shared flock while B holds an exclusive one: %v, want ErrWouldBlock", err)
	}
	// A gives back 40-59: B's lock of 50-60 still overlaps 60.
	if err := a.FileLocks.Set(ctx, ino, "", locking.FileLock{Owner: 1, Start: 40, End: 59, Unlock: true}, false); err != nil {
		t.Fatal(err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", w(1, 50, 60), false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("50-60 while A still holds 60-99: %v", err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", w(1, 45, 59), false); err != nil {
		t.Fatalf("the range A gave back: %v", err)
	}
	// Blocking: granted once A releases.
	granted := make(chan error, 1)
	go func() { granted <- b.FileLocks.Set(ctx, ino, "/f", w(1, 0, 99), true) }()
	select {
	case err := <-granted:
		t.Fatalf("a blocking request granted while A holds its range: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := a.FileLocks.ReleaseOwner(ctx, ino, 1, false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-granted:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking request was not granted 30s after A released")
	}
	if a.FileLocks.HoldsAny(ino) {
		t.Error("A still notes locks on the file")
	}
	b.FileLocks.ReleaseAll(ctx)
	docs, err := st.GetLocks(ctx, []string{store.FileLockID(ino)})
	if err != nil || docs[0].Found {
		t.Errorf("the lock document after every lock went: %+v, %v", docs[0], err)
	}
}

// TestFileLockWaiterNotStarved: once a request waits, later conflicting
// requests of other owners yield to it, even while the lock it waits for
// is still held (a stream of readers cannot starve a writer); a waiter
// whose context ends leaves no marker behind.
func TestFileLockWaiterNotStarved(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	const ino = 7002
	all := func(owner uint64, write bool) locking.FileLock {
		return locking.FileLock{Owner: owner, Start: 0, End: locking.ToEOF, Write: write}
	}
	if err := a.FileLocks.Set(ctx, ino, "/g", all(1, false), false); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	granted := make(chan error, 1)
	go func() { granted <- b.FileLocks.Set(wctx, ino, "/g", all(1, true), true) }()
	waiting := func() int {
		docs, err := st.GetLocks(ctx, []string{store.FileLockID(ino)})
		if err != nil {
			t.Fatal(err)
		}
		return len(docs[0].Waiters)
	}
	for deadline := time.Now().Add(30 * time.Second); waiting() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no waiting marker 30s after B asked")
		}
	}
	// Another reader would share A's lock, but B asked first.
	if err := a.FileLocks.Set(ctx, ino, "/g", all(2, false), false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("a reader after a waiting writer: %v, want ErrWouldBlock", err)
	}
	cancel()
	if err := <-granted; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled wait: %v", err)
	}
	if n := waiting(); n != 0 {
		t.Errorf("%d waiting markers after the waiter gave up", n)
	}
	if err := a.FileLocks.Set(ctx, ino, "/g", all(2, false), false); err != nil {
		t.Fatalf("a reader once nobody waits: %v", err)
	}
	a.FileLocks.ReleaseAll(ctx)
}

// TestFileLocksOfDeadMount: a mount that stops renewing its session keeps
// its locks until it is declared dead (lease plus grace); then a waiter of
// another mount gets them, and the frozen mount reports them lost.
func TestFileLocksOfDeadMount(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	const lease = time.Second
	a := coordinator(t, st, "tree", lease)
	b := waiter(t, st, lease/2, 3*time.Second)
	const ino = 7003
	lk := locking.FileLock{Owner: 1, Start: 0, End: locking.ToEOF, Write: true}
	if err := a.FileLocks.Set(ctx, ino, "/h", lk, false); err != nil {
		t.Fatal(err)
	}
	if a.FileLocks.Lost(ino) {
		t.Fatal("lost while the session lives")
	}
	a.Session().Freeze()
	start := time.Now()
	if err := b.FileLocks.Set(ctx, ino, "/h", lk, false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("B at once, while A's lease runs: %v", err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/h", lk, true); err != nil {
		t.Fatalf("B waiting for a frozen holder: %v", err)
	}
	took := time.Since(start)
	t.Logf("granted %s after A froze", took.Round(time.Millisecond))
	if took < lease {
		t.Errorf("granted after %s, before A's lease (%s) ran out", took, lease)
	}
	if !a.FileLocks.Lost(ino) {
		t.Error("A does not report its lock lost")
	}
	b.FileLocks.ReleaseAll(ctx)
}
