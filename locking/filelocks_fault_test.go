package locking_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// lossy is a backend whose next bulks lose their answer or their request,
// or are held and sent later, and whose lock reads can be made to fail.
type lossy struct {
	locking.Backend
	mu sync.Mutex
	// next: what happens to the next bulks: "land" (and lose the answer),
	// "drop" or "hold"; "+cut" after one makes lock reads fail from then
	// on.
	next      []string
	held      []func() // the held bulks, sent when called
	failReads bool
}

var errLost = fmt.Errorf("fault: the answer was lost: %w", store.ErrUnavailable)

func (l *lossy) arm(faults ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.next = append(l.next, faults...)
}

func (l *lossy) readsFail(on bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failReads = on
}

// release sends the held bulks.
func (l *lossy) release() {
	l.mu.Lock()
	held := l.held
	l.held = nil
	l.mu.Unlock()
	for _, send := range held {
		send()
	}
}

func (l *lossy) Bulk(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error) {
	l.mu.Lock()
	fault := ""
	if len(l.next) > 0 {
		fault, l.next = l.next[0], l.next[1:]
	}
	if f, ok := strings.CutSuffix(fault, "+cut"); ok {
		fault, l.failReads = f, true
	}
	if fault == "hold" {
		done := make(chan struct{})
		l.held = append(l.held, func() {
			_, _ = l.Backend.Bulk(context.Background(), ops)
			close(done)
		})
		l.mu.Unlock()
		return nil, errLost
	}
	l.mu.Unlock()
	switch fault {
	case "land":
		_, _ = l.Backend.Bulk(ctx, ops)
		return nil, errLost
	case "drop":
		return nil, errLost
	}
	return l.Backend.Bulk(ctx, ops)
}

func (l *lossy) GetLocks(ctx context.Context, ids []string) ([]store.LockDoc, error) {
	l.mu.Lock()
	fail := l.failReads
	l.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("fault: no answer: %w", store.ErrUnavailable)
	}
	return l.Backend.GetLocks(ctx, ids)
}

// eventually waits for a blocking request of b to be granted.
func eventually(t *testing.T, b *locking.Coordinator, ino uint64, lk locking.FileLock, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.FileLocks.Set(ctx, ino, "/f", lk, true); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b.FileLocks.ReleaseAll(ctx)
}

func wr(owner uint64) locking.FileLock {
	return locking.FileLock{Owner: owner, Start: 0, End: locking.ToEOF, Write: true}
}

// TestFileLockLostAnswers: with the answers of lock document writes lost
// (the write landed), or the writes themselves: a grant that landed is
// reported granted (and is held); an unlock and a release are reported
// done, and are, soon; a waiter whose marker's answer was lost waits on
// and is granted; nothing is left in the document.
func TestFileLockLostAnswers(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	l := &lossy{Backend: st}
	a := coordinator(t, l, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	const ino = 7101

	l.arm("land")
	if err := a.FileLocks.Set(ctx, ino, "/f", wr(1), false); err != nil {
		t.Fatalf("a grant whose answer was lost: %v, want granted", err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", wr(1), false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("B while A holds the lock it was told it holds: %v", err)
	}
	l.arm("drop")
	if err := a.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 1, Start: 0, End: locking.ToEOF, Unlock: true}, false); err != nil {
		t.Fatalf("an unlock that was lost: %v, want done", err)
	}
	eventually(t, b, ino, wr(1), "B after A's lost unlock")

	if err := a.FileLocks.Set(ctx, ino, "/f", wr(2), false); err != nil {
		t.Fatal(err)
	}
	l.arm("drop")
	if err := a.FileLocks.ReleaseOwner(ctx, ino, 2, false); err != nil {
		t.Fatalf("a release that was lost: %v", err)
	}
	eventually(t, b, ino, wr(1), "B after A's lost release")

	// A waiter whose marker's answer is lost waits on.
	if err := b.FileLocks.Set(ctx, ino, "/f", wr(1), false); err != nil {
		t.Fatal(err)
	}
	l.arm("land")
	granted := make(chan error, 1)
	go func() { granted <- a.FileLocks.Set(ctx, ino, "/f", wr(3), true) }()
	select {
	case err := <-granted:
		t.Fatalf("a waiter whose marker's answer was lost returned while B holds the lock: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	b.FileLocks.ReleaseAll(ctx)
	if err := <-granted; err != nil {
		t.Fatalf("the waiter once B released: %v", err)
	}
	a.FileLocks.ReleaseAll(ctx)

	// A waiter that gives up, whose marker's removal is lost: the
	// marker goes all the same (no sweeper runs here).
	if err := b.FileLocks.Set(ctx, ino, "/f", wr(1), false); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	go func() { granted <- a.FileLocks.Set(wctx, ino, "/f", wr(4), true) }()
	markers := func() int {
		docs, err := st.GetLocks(ctx, []string{store.FileLockID(ino)})
		if err != nil {
			t.Fatal(err)
		}
		return len(docs[0].Waiters)
	}
	for deadline := time.Now().Add(30 * time.Second); markers() == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no waiting marker 30s after A asked")
		}
	}
	l.arm("drop")
	cancel()
	if err := <-granted; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); markers() > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the marker whose removal was lost is still there 30s on")
		}
	}
	b.FileLocks.ReleaseAll(ctx)
	docs, err := st.GetLocks(ctx, []string{store.FileLockID(ino)})
	if err != nil || docs[0].Found {
		t.Errorf("the lock document once every lock went: %+v, %v", docs[0], err)
	}
}

// TestFileLockGrantUnsettled: a grant lands, its answer is lost, and the
// document cannot be read for longer than the lease: the request fails,
// the owner holds nothing, and once the cluster answers the entry goes.
// A downgrade that was lost is done; one that also asks for more fails,
// keeps what both states share and reports the file's locks lost.
func TestFileLockGrantUnsettled(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	l := &lossy{Backend: st}
	// A's lease bounds how long it settles an unknown outcome; B's is
	// long, so that a slow heartbeat on a loaded machine cannot end it.
	const lease = 2 * time.Second
	a := coordinator(t, l, "tree", lease)
	b := coordinator(t, st, "tree", 10*time.Second)
	const ino = 7102

	l.arm("land+cut")
	go func() { time.Sleep(3 * lease); l.readsFail(false) }()
	if err := a.FileLocks.Set(ctx, ino, "/f", wr(1), false); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a grant whose outcome stayed unknown: %v, want the write's error", err)
	}
	if a.FileLocks.Holds(ino, 1, false) {
		t.Error("A notes a lock its caller was told it did not get")
	}
	eventually(t, b, ino, wr(1), "B once A's unsettled grant was dropped")

	// A pure downgrade only gives rights back: done at once, whatever
	// landed.
	if err := a.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 1, Start: 0, End: 99, Write: true}, false); err != nil {
		t.Fatal(err)
	}
	l.arm("drop")
	if err := a.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 1, Start: 50, End: 99}, false); err != nil {
		t.Fatalf("a downgrade that was lost: %v, want done", err)
	}
	eventually(t, b, ino, locking.FileLock{Owner: 1, Start: 50, End: 99}, "a shared lock on B beside A's downgraded one")
	// One that also asks for more fails, keeps what both states share,
	// and reports the file's locks lost.
	l.arm("land+cut")
	go func() { time.Sleep(3 * lease); l.readsFail(false) }()
	if err := a.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 1, Start: 0, End: 199}, false); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("a downgrade and more whose outcome stayed unknown: %v, want the write's error", err)
	}
	if !a.FileLocks.Lost(ino) {
		t.Error("the file's locks are not reported lost after a downgrade of unknown outcome")
	}
	eventually(t, b, ino, locking.FileLock{Owner: 1, Start: 0, End: 99}, "a shared lock on B beside A's")
	eventually(t, b, ino, locking.FileLock{Owner: 1, Start: 100, End: 199, Write: true}, "B's write lock of what A's caller was told it did not get")
	if err := b.FileLocks.Set(ctx, ino, "/f", locking.FileLock{Owner: 1, Start: 0, End: 0, Write: true}, false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Errorf("B's write lock where A still holds a shared one: %v", err)
	}
	a.FileLocks.ReleaseAll(ctx)
}

// TestFileLockLateGrantCollected: a grant held on the way past its
// request's end, whose caller was told it failed, lands afterwards (a
// create of the document): the sweeper finds the entry nobody holds and
// it goes.
func TestFileLockLateGrantCollected(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	l := &lossy{Backend: st}
	// A's lease bounds how long it settles an unknown outcome; B's is
	// long, so that a slow heartbeat on a loaded machine cannot end it.
	const lease = 2 * time.Second
	a := coordinator(t, l, "tree", lease)
	b := coordinator(t, st, "tree", 10*time.Second)
	const ino = 7103

	l.arm("hold+cut")
	go func() { time.Sleep(3 * lease); l.readsFail(false) }()
	if err := a.FileLocks.Set(ctx, ino, "/f", wr(1), false); err == nil {
		t.Fatal("a grant held on the way was reported granted")
	}
	l.release()
	docs, err := st.GetLocks(ctx, []string{store.FileLockID(ino)})
	if err != nil || len(docs[0].Holders) != 1 {
		t.Fatalf("the late grant did not land: %+v, %v", docs[0], err)
	}
	if err := b.FileLocks.Set(ctx, ino, "/f", wr(1), false); !errors.Is(err, locking.ErrWouldBlock) {
		t.Fatalf("B with the late entry in the document: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := a.Sweep(ctx, map[string]time.Duration{}); err != nil {
			t.Logf("sweep: %v", err)
		}
		if err := b.FileLocks.Set(ctx, ino, "/f", wr(1), false); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the late entry still blocks B 30s on")
		}
		time.Sleep(100 * time.Millisecond)
	}
	b.FileLocks.ReleaseAll(ctx)
}
