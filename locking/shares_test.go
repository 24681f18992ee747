package locking_test

import (
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/test/testenv"
)

// TestShareLease: concurrent and successive uses of the same shared locks
// take them once; an exclusive request of another mount revokes the lease
// and gets its lock soon although uses go on; an idle lease is given back;
// and the global strategy has no shared part.
func TestShareLease(t *testing.T) {
	st := &counting{Store: testenv.Store(t)}
	a := coordinator(t, st, "tree", 2*time.Second)
	b := coordinatorWait(t, st, "tree", 2*time.Second, 10*time.Second)
	ctx := ctxT(t)

	reqs, ok := locking.SharedPart(a.Strategy.Entry("/d/e", "/d/e/x"), "/d/e/x")
	if !ok || len(reqs) != 2 {
		t.Fatalf("shared part of a create in /d/e (tree): %v %v, want the shared locks of /d and /d/e", reqs, ok)
	}
	global, err := locking.NewStrategy("global")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := locking.SharedPart(global.Entry("/d", "/d/x"), "/d/x"); ok {
		t.Error("the global strategy has a shared part")
	}

	writes := st.writes.Load()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				h, err := a.Share(ctx, reqs)
				if err != nil {
					t.Error(err)
					return
				}
				time.Sleep(time.Millisecond)
				h.End()
			}
		}()
	}
	wg.Wait()
	if n := st.writes.Load() - writes; n != 1 {
		t.Errorf("80 uses of one lease wrote lock documents %d times, want once (the grant)", n)
	}

	// Uses go on without pause; an exclusive request on /d/e must get in.
	stop := make(chan struct{})
	var uses sync.WaitGroup
	uses.Add(1)
	go func() {
		defer uses.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			h, err := a.Share(ctx, reqs)
			if err != nil {
				continue // waiting behind the exclusive request: fine
			}
			time.Sleep(2 * time.Millisecond)
			h.End()
		}
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	txn, err := b.Begin(ctx, b.Strategy.Rename("/d/e", "/d/e2", nil))
	took := time.Since(start)
	close(stop)
	uses.Wait()
	if err != nil {
		t.Fatalf("exclusive request during a lease: %v", err)
	}
	t.Logf("an exclusive request on a leased directory was granted after %s", took.Round(time.Millisecond))
	if took > 2*time.Second {
		t.Errorf("the exclusive request waited %s for a lease in use", took)
	}
	// While it holds, a new use waits (and then gets a new lease).
	got := make(chan error, 1)
	go func() {
		h, err := a.Share(ctx, reqs)
		if err == nil {
			h.End()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a shared use was granted while an exclusive lock was held (%v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	if err := txn.End(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("shared use after the exclusive lock ended: %v", err)
	}

	// Idle leases are given back: the documents end up without holders.
	deadline := time.Now().Add(5 * time.Second)
	for {
		docs, err := st.GetLocks(ctx, []string{reqs[0].ID, reqs[1].ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(docs[0].Holders)+len(docs[1].Holders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("an idle lease still holds %v and %v", docs[0].Holders, docs[1].Holders)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
