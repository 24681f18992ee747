package locking_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// recallLog records, in order, what happened across mounts: a recall
// callback's run and a change's grant, so that tests check order, not time.
type recallLog struct {
	mu     sync.Mutex
	events []string
}

func (l *recallLog) add(s string) {
	l.mu.Lock()
	l.events = append(l.events, s)
	l.mu.Unlock()
}

func (l *recallLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func watchRecalls(co *locking.Coordinator, name string, log *recallLog) {
	co.Delegations.Recall = func(ctx context.Context, d *locking.Delegation) {
		if !d.Revoked() {
			log.add(name + ": recalled while still valid")
		}
		log.add(name + " gave back")
	}
}

// TestChangeRecallsReadDelegations: two mounts hold read delegations on a
// directory; a change of it from a third waits until both gave theirs back
// (their Recall ran first), a change from a holder itself recalls only the
// others, and the holders' delegations are no longer valid afterwards.
func TestChangeRecallsReadDelegations(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	var log recallLog
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	c := coordinator(t, st, "tree", 10*time.Second)
	watchRecalls(a, "a", &log)
	watchRecalls(b, "b", &log)
	const dir = 42
	da, err := a.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg); err != nil {
		t.Fatalf("a second read delegation: %v", err)
	}
	if a.Delegations.Held(dir) != da || da.Revoked() {
		t.Fatal("a's delegation is not valid after its grant")
	}
	start := time.Now()
	txn, err := c.Begin(ctx, []locking.Request{locking.Change(dir, ""), locking.PathLock("/d/x", store.Exclusive)})
	if err != nil {
		t.Fatalf("a change with two read delegations out: %v", err)
	}
	log.add("c changed")
	t.Logf("change granted %s after asking, both holders recalled", time.Since(start).Round(time.Millisecond))
	got := log.list()
	if len(got) != 3 || got[2] != "c changed" {
		t.Fatalf("events %q: want both holders to give back before the change is granted", got)
	}
	if !da.Revoked() || a.Delegations.Held(dir) != nil {
		t.Fatal("a still believes it holds its delegation")
	}
	// A grant yields to the change in progress.
	if _, err := a.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("a read delegation granted while a change holds the directory: %v", err)
	}
	if err := txn.End(ctx); err != nil {
		t.Fatal(err)
	}

	// A holder's own change recalls the other holders only.
	if _, err := a.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg); err != nil {
		t.Fatal(err)
	}
	txn, err = a.Begin(ctx, []locking.Request{locking.Change(dir, "")})
	if err != nil {
		t.Fatal(err)
	}
	if a.Delegations.Held(dir) == nil {
		t.Fatal("a's own change revoked a's delegation")
	}
	if b.Delegations.Held(dir) != nil {
		t.Fatal("b's delegation survived a's change")
	}
	if err := txn.End(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWriteDelegationExcludes: a write delegation is granted only when no
// other mount holds any delegation on the directory, excludes read
// delegations of others, and a change from another mount recalls it.
func TestWriteDelegationExcludes(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	var log recallLog
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	watchRecalls(a, "a", &log)
	watchRecalls(b, "b", &log)
	const dir = 43
	if _, err := b.Delegations.Grant(ctx, dir, "/w", store.ReadDeleg); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Delegations.Grant(ctx, dir, "/w", store.Exclusive); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("a write delegation beside another mount's read delegation: %v", err)
	}
	if len(log.list()) != 0 {
		t.Fatalf("a grant recalled someone: %q", log.list())
	}
	b.Delegations.Give(ctx, b.Delegations.Held(dir))
	dw, err := a.Delegations.Grant(ctx, dir, "/w", store.Exclusive)
	if err != nil {
		t.Fatalf("a write delegation on a free directory: %v", err)
	}
	if d, err := a.Delegations.Grant(ctx, dir, "/w", store.ReadDeleg); err != nil || d != dw {
		t.Fatalf("asking the write holder for a read delegation should return its write one: %v %v", d, err)
	}
	if _, err := b.Delegations.Grant(ctx, dir, "/w", store.ReadDeleg); !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("a read delegation beside another mount's write delegation: %v", err)
	}
	txn, err := b.Begin(ctx, []locking.Request{locking.Change(dir, "")})
	if err != nil {
		t.Fatal(err)
	}
	if got := log.list(); len(got) != 2 || got[1] != "a gave back" {
		t.Fatalf("events %q: want a's write delegation recalled", got)
	}
	if err := txn.End(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRecalledDirectoryCools: a directory recalled again and again from a
// mount stops being granted to it for a while.
func TestRecalledDirectoryCools(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	const dir = 44
	var recalls atomic.Int32
	a.Delegations.Recall = func(context.Context, *locking.Delegation) { recalls.Add(1) }
	for i := 0; ; i++ {
		_, err := a.Delegations.Grant(ctx, dir, "/p", store.ReadDeleg)
		for tries := 0; errors.Is(err, locking.ErrLocked) && tries < 100; tries++ {
			// A's answer to the last recall may still be giving the
			// delegation back ("being recalled"): ask again.
			time.Sleep(10 * time.Millisecond)
			_, err = a.Delegations.Grant(ctx, dir, "/p", store.ReadDeleg)
		}
		if errors.Is(err, locking.ErrCooling) {
			t.Logf("cooling after %d recalls", recalls.Load())
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i == 10 {
			t.Fatalf("still granted after %d recalls", recalls.Load())
		}
		txn, err := b.Begin(ctx, []locking.Request{locking.Change(dir, "")})
		if err != nil {
			t.Fatal(err)
		}
		if err := txn.End(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Changes go ahead at once: nothing is held, so the lock document is
	// gone and one create takes it.
	c := &counting{Store: st}
	co := coordinator(t, c, "tree", 10*time.Second)
	txn, err := co.Begin(ctx, []locking.Request{locking.Change(dir, "")})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := c.gets.Load(), c.writes.Load(); g != 0 || w != 1 {
		t.Errorf("a change of a cooling directory took %d reads and %d writes, want 0 and 1", g, w)
	}
	_ = txn.End(ctx)
}

// TestUnansweredRecallWaitsForDeath: a holder that never answers (its
// heartbeat and its recall answers both stopped, as a frozen mount's) holds
// up a change until its session is declared dead, never longer; the
// change then goes ahead and the holder learns it lost the delegation.
func TestUnansweredRecallWaitsForDeath(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	const lease = time.Second
	a := coordinatorWait(t, st, "tree", lease, 20*time.Second)
	b := waiter(t, st, lease/2, 20*time.Second)
	const dir = 45
	d, err := a.Delegations.Grant(ctx, dir, "/f", store.ReadDeleg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	a.Delegations.Recall = func(context.Context, *locking.Delegation) { <-release }
	a.Session().Freeze()
	defer close(release)
	start := time.Now()
	txn, err := b.Begin(ctx, []locking.Request{locking.Change(dir, "")})
	if err != nil {
		t.Fatalf("a change behind a frozen holder: %v", err)
	}
	took := time.Since(start)
	t.Logf("change granted %s after asking (holder frozen, lease %s)", took.Round(time.Millisecond), lease)
	if took < lease {
		t.Fatalf("granted after %s, before the frozen holder's lease could expire", took)
	}
	if !d.Revoked() {
		t.Fatal("the frozen holder's delegation still looks valid to it")
	}
	_ = txn.End(ctx)
}

// TestIdleHolderPollsLess: a mount that holds a delegation but has not used
// one for a while reads its recall document at the idle pace (at most every
// 100 ms), not every 25 ms, and answers a recall all the same.
func TestIdleHolderPollsLess(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	c := &counting{Store: st}
	a := coordinator(t, c, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	const dir = 43
	if _, err := a.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg); err != nil {
		t.Fatal(err)
	}
	const window = 2 * time.Second
	reads := func() int64 {
		before := c.recallReads.Load()
		time.Sleep(window)
		return c.recallReads.Load() - before
	}
	active := reads() // granted just now: active
	time.Sleep(5 * time.Second)
	idle := reads()
	t.Logf("recall document reads in %s: %d while active, %d idle", window, active, idle)
	// At most one read per 100 ms (plus the one under way at the start),
	// whatever the machine's load; the active pace is four times that.
	if limit := int64(window/(100*time.Millisecond)) + 1; idle > limit {
		t.Errorf("an idle holder read its recall document %d times in %s, want at most %d", idle, window, limit)
	}
	start := time.Now()
	txn, err := b.Begin(ctx, []locking.Request{locking.Change(dir, "")})
	if err != nil {
		t.Fatalf("a change of a directory an idle mount holds: %v", err)
	}
	t.Logf("idle holder recalled, change granted after %s", time.Since(start).Round(time.Millisecond))
	if a.Delegations.Held(dir) != nil {
		t.Error("the idle holder still holds its delegation after the change was granted")
	}
	_ = txn.End(ctx)
}

// TestUpgradeOnlyWhenAlone: a read delegation is upgraded to a write one
// only while no other mount holds one; the upgrade replaces it (one entry
// of this mount left in the document), a refused move gives the new entry
// back, and a change from another mount then recalls the write delegation.
func TestUpgradeOnlyWhenAlone(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	var log recallLog
	a := coordinator(t, st, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	watchRecalls(a, "a", &log)
	watchRecalls(b, "b", &log)
	const dir = 43
	da, err := a.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg)
	if err != nil {
		t.Fatal(err)
	}
	db, err := b.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg)
	if err != nil {
		t.Fatal(err)
	}
	moved := func(*locking.Delegation) bool { return true }
	if w, err := a.Delegations.Upgrade(ctx, da, moved); w != nil || !errors.Is(err, locking.ErrLocked) {
		t.Fatalf("upgrade beside another mount's read delegation: %v, %v; want ErrLocked", w, err)
	}
	b.Delegations.Give(ctx, db)
	if w, err := a.Delegations.Upgrade(ctx, da, func(*locking.Delegation) bool { return false }); w != nil || err != nil {
		t.Fatalf("an upgrade whose move is refused: %v, %v; want nothing", w, err)
	}
	if a.Delegations.Held(dir) != da {
		t.Fatal("a refused move lost the read delegation")
	}
	w, err := a.Delegations.Upgrade(ctx, da, moved)
	if err != nil || w == nil || !w.Writable() {
		t.Fatalf("upgrade alone: %v, %v", w, err)
	}
	if !da.Revoked() || a.Delegations.Held(dir) != w {
		t.Fatal("the read delegation is still held beside its upgrade")
	}
	docs, err := st.GetLocks(ctx, []string{store.DelegLockID(dir)})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs[0].Holders) != 1 || docs[0].Holders[0].Mode != store.Exclusive {
		t.Fatalf("holders after the upgrade: %+v; want the write delegation alone", docs[0].Holders)
	}
	txn, err := b.Begin(ctx, []locking.Request{locking.Change(dir, "/d"), locking.PathLock("/d/x", store.Exclusive)})
	if err != nil {
		t.Fatalf("a change beside the upgraded delegation: %v", err)
	}
	_ = txn.End(ctx)
	if !w.Revoked() {
		t.Fatal("the write delegation is still valid after another mount's change")
	}
	if got := log.list(); len(got) != 2 || got[1] != "a gave back" {
		t.Fatalf("events %q: want b's give-back, then a's recall (once)", got)
	}
}

// TestRefusedGrantsAskLess: a directory whose grants are refused again
// and again (another mount keeps changing it, or holds it) is asked for
// less and less often: after the second refusal in a row, the next grant
// is refused without a request, then the next 2, 4, 8...; a grant that
// succeeds clears it.
func TestRefusedGrantsAskLess(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	c := &counting{Store: st}
	a := coordinator(t, c, "tree", 10*time.Second)
	b := coordinator(t, st, "tree", 10*time.Second)
	const dir = 47
	if _, err := b.Delegations.Grant(ctx, dir, "/r", store.Exclusive); err != nil {
		t.Fatal(err)
	}
	asked := func() int64 { return c.gets.Load() + c.writes.Load() }
	for i := 0; i < 2; i++ {
		before := asked()
		if _, err := a.Delegations.Grant(ctx, dir, "/r", store.ReadDeleg); !errors.Is(err, locking.ErrLocked) {
			t.Fatalf("a grant beside another mount's write delegation: %v", err)
		}
		if asked() == before {
			t.Fatalf("refusal %d made no request", i+1)
		}
	}
	// Then 1 skipped, one asked (refused), 2 skipped, one asked, 4
	// skipped, one asked, 8 skipped...: 4 requests in 20 grants.
	asks := 0
	for i := 0; i < 20; i++ {
		before := asked()
		if _, err := a.Delegations.Grant(ctx, dir, "/r", store.ReadDeleg); !errors.Is(err, locking.ErrLocked) {
			t.Fatalf("a grant after two refusals: %v", err)
		}
		if asked() > before {
			asks++
		}
	}
	if asks != 4 {
		t.Errorf("20 grants after two refusals asked the cluster %d times, want 4 (after skipping 1, 2, 4 and 8)", asks)
	}
	b.Delegations.Give(ctx, b.Delegations.Held(dir))
	waitUntil(t, "a granted once the holder gave it back", time.Minute, func() bool {
		_, err := a.Delegations.Grant(ctx, dir, "/r", store.ReadDeleg)
		return err == nil
	})
}
