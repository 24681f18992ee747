package locking_test

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.PrintVersion("locking")
	os.Exit(m.Run())
}

// counting wraps the store and counts requests, so tests can assert round
// trips rather than time.
type counting struct {
	*store.Store
	gets, writes, recallReads atomic.Int64
}

func (c *counting) GetRecalls(ctx context.Context, session string) (store.Recalls, error) {
	c.recallReads.Add(1)
	return c.Store.GetRecalls(ctx, session)
}

func (c *counting) GetLocks(ctx context.Context, ids []string) ([]store.LockDoc, error) {
	c.gets.Add(1)
	return c.Store.GetLocks(ctx, ids)
}

func (c *counting) Bulk(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error) {
	c.writes.Add(1)
	return c.Store.Bulk(ctx, ops)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func coordinator(t *testing.T, b locking.Backend, strategy string, lease time.Duration) *locking.Coordinator {
	return coordinatorWait(t, b, strategy, lease, 3*time.Second)
}

func coordinatorWait(t *testing.T, b locking.Backend, strategy string, lease, lockTimeout time.Duration) *locking.Coordinator {
	t.Helper()
	co, err := locking.Start(ctxT(t), b, locking.Config{Strategy: strategy, Lease: lease, LockTimeout: lockTimeout, NoSweeper: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = co.Close(context.Background()) })
	return co
}

// waiter returns a coordinator with a long lease of its own that declares
// others dead after their lease plus grace: the side of a test that waits
// for a short-leased holder to die must not lose its own session to a
// heartbeat slowed past a short lease on a loaded machine.
func waiter(t *testing.T, b locking.Backend, grace, lockTimeout time.Duration) *locking.Coordinator {
	t.Helper()
	co, err := locking.Start(ctxT(t), b, locking.Config{Strategy: "tree", Lease: 10 * time.Second, Grace: grace, LockTimeout: lockTimeout, NoSweeper: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = co.Close(context.Background()) })
	return co
}

func deepPath(depth int) string {
	p := ""
	for i := 0; i < depth; i++ {
		p += "/d"
	}
	return p
}

// TestRoundTripsFlatInDepth: taking all locks of a rename is one bulk of
// creates when nobody holds them (their documents are absent), and
// releasing them one bulk, at depth 1, 8 and 32, with each strategy. When
// another mount holds one of them meanwhile, the guess fails for it and
// the acquire reads it and writes it again: one mget and one bulk more,
// still granted.
func TestRoundTripsFlatInDepth(t *testing.T) {
	st := testenv.Store(t)
	for _, strategy := range []string{"tree", "document", "global"} {
		for _, depth := range []int{1, 8, 32} {
			c := &counting{Store: st}
			co := coordinator(t, c, strategy, 10*time.Second)
			other := coordinator(t, st, strategy, 10*time.Second)
			src, dst := deepPath(depth)+"/a", deepPath(depth)+"/b"
			reqs := co.Strategy.Rename(src, dst, nil)
			txn, err := co.Begin(ctxT(t), reqs)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := c.gets.Load(), c.writes.Load(); g != 0 || w != 1 {
				t.Errorf("%s depth %d: acquire took %d mgets and %d bulks, want 0 and 1", strategy, depth, g, w)
			}
			if err := txn.End(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if w := c.writes.Load(); w != 2 {
				t.Errorf("%s depth %d: release took %d bulks, want 1", strategy, depth, w-1)
			}
			if strategy == "global" {
				continue // its one lock is exclusive: nobody shares it
			}
			// Another mount holds the source's directory shared, so its
			// document exists where this mount guesses it absent.
			dir, _ := store.Split(src)
			held, err := other.Begin(ctxT(t), []locking.Request{locking.PathLock(dir, store.Shared)})
			if err != nil {
				t.Fatal(err)
			}
			c.gets.Store(0)
			c.writes.Store(0)
			txn, err = co.Begin(ctxT(t), reqs)
			if err != nil {
				t.Fatal(err)
			}
			if g, w := c.gets.Load(), c.writes.Load(); g != 1 || w != 2 {
				t.Errorf("%s depth %d: a wrong guess cost %d mgets and %d bulks, want 1 and 2", strategy, depth, g, w)
			}
			for _, h := range []*locking.Txn{txn, held} {
				if err := h.End(ctxT(t)); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s depth %d: %d lock documents, acquire 1 request, release 1", strategy, depth, len(reqs))
		}
	}
	locks, err := st.SearchLocks(ctxT(t))
	if err != nil || len(locks) != 0 {
		t.Fatalf("lock documents left after release: %d %v", len(locks), err)
	}
}

// TestSharedAndExclusive: shared locks coexist, an exclusive one waits for
// them and gives up with ErrLocked at the deadline, and gets in once they
// are released.
func TestSharedAndExclusive(t *testing.T) {
	st := testenv.Store(t)
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	ctx := ctxT(t)
	s1, err := a.Begin(ctx, []locking.Request{locking.PathLock("/x", store.Shared)})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := b.Begin(ctx, []locking.Request{locking.PathLock("/x", store.Shared)})
	if err != nil {
		t.Fatalf("second shared lock: %v", err)
	}
	start := time.Now()
	if _, err := b.Begin(ctx, []locking.Request{locking.PathLock("/x", store.Exclusive)}); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("exclusive against shared holders: %v, want ErrLocked", err)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Fatalf("gave up after %s, before the 3s lock timeout", took)
	}
	if err := s1.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s2.End(ctx); err != nil {
		t.Fatal(err)
	}
	x, err := b.Begin(ctx, []locking.Request{locking.PathLock("/x", store.Exclusive)})
	if err != nil {
		t.Fatalf("exclusive once free: %v", err)
	}
	if _, err := a.Begin(ctx, []locking.Request{locking.PathLock("/x", store.Shared)}); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("shared against an exclusive holder: %v, want ErrLocked", err)
	}
	if err := x.End(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWaitingExclusiveBlocksYoungerShared: once an exclusive request has
// been refused and recorded, new shared requests yield to it, so a stream
// of them cannot starve it.
func TestWaitingExclusiveBlocksYoungerShared(t *testing.T) {
	st := testenv.Store(t)
	a := coordinator(t, st, "tree", 10*time.Second)
	// The exclusive request waits longer than the shared one tries.
	b := coordinatorWait(t, st, "tree", 10*time.Second, 20*time.Second)
	ctx := ctxT(t)
	s1, err := a.Begin(ctx, []locking.Request{locking.PathLock("/y", store.Shared)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		x, err := b.Begin(ctx, []locking.Request{locking.PathLock("/y", store.Exclusive)})
		if err == nil {
			err = x.End(ctx)
		}
		got <- err
	}()
	// Wait until the exclusive request has left its marker.
	deadline := time.Now().Add(2 * time.Second)
	for {
		docs, err := st.GetLocks(ctx, []string{store.LockID("/y")})
		if err == nil && len(docs[0].Waiters) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no waiting marker recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := a.Begin(ctx, []locking.Request{locking.PathLock("/y", store.Shared)}); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("a younger shared request got in past a waiting exclusive one: %v", err)
	}
	if err := s1.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the waiting exclusive request: %v", err)
	}
}

// TestDeadHolderIsRecoveredNotStripped: a holder whose session stops
// heartbeating is declared dead after its lease plus grace (on our clock),
// its operation is fenced by an ABORTED record before its entry is dropped,
// and a dead session's heartbeat fails for good.
func TestDeadHolderIsRecoveredNotStripped(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	const lease = time.Second
	// A session whose heartbeat we stop by closing it without deleting
	// its document: a mount frozen with its locks.
	frozen, err := locking.StartSession(ctx, st, locking.SessionConfig{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	mgr := locking.NewManager(st, locking.NewObserver(st, frozen.ID(), lease/2, nil), time.Second, nil)
	op, _ := frozen.BeginOp()
	if _, err := mgr.Acquire(ctx, frozen, op, []locking.Request{locking.PathLock("/z", store.Exclusive)}); err != nil {
		t.Fatal(err)
	}
	frozen.Freeze()
	live := waiter(t, st, lease/2, 3*time.Second)
	start := time.Now()
	txn, err := func() (*locking.Txn, error) {
		for {
			txn, err := live.Begin(ctx, []locking.Request{locking.PathLock("/z", store.Exclusive)})
			if !errors.Is(err, locking.ErrLocked) || time.Since(start) > 20*time.Second {
				return txn, err
			}
		}
	}()
	if err != nil {
		t.Fatalf("lock of a dead holder never freed: %v", err)
	}
	took := time.Since(start)
	t.Logf("lock of a frozen holder (lease %s) taken after %s", lease, took.Round(time.Millisecond))
	if took < lease {
		t.Fatalf("taken after %s, before the holder's lease could expire", took)
	}
	rec, err := st.GetOp(ctx, op)
	if err != nil || rec.State != store.OpDone || !rec.Aborted {
		t.Fatalf("the dead holder's operation was not fenced: %+v %v", rec, err)
	}
	if err := frozen.Check(); !errors.Is(err, locking.ErrLeaseLost) {
		t.Fatalf("frozen session still believes it may write: %v", err)
	}
	frozen.Thaw()
	select {
	case <-frozen.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("a session declared dead kept heartbeating")
	}
	if err := txn.End(ctx); err != nil {
		t.Fatal(err)
	}
}
