package locking_test

import (
	"context"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// nudgeCoordinator starts a coordinator that takes nudges on loopback and
// publishes host (empty: loopback), with its metrics in a registry of its
// own.
func nudgeCoordinator(t *testing.T, b locking.Backend, host string) (*locking.Coordinator, *locking.Metrics) {
	t.Helper()
	m := locking.NewMetrics(prometheus.NewRegistry())
	co, err := locking.Start(ctxT(t), b, locking.Config{Strategy: "tree", Lease: 10 * time.Second, LockTimeout: 30 * time.Second,
		NoSweeper: true, Metrics: m, NudgeListen: "127.0.0.1:0", NudgeHost: host})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = co.Close(context.Background()) })
	return co, m
}

// TestNudgedRecall: a change of a directory another mount holds nudges
// the holder (which reads its recall document at once, idle or not), and
// the holder nudges the changer once it gave the delegation back. When
// the nudges are lost (the holder publishes an address nothing answers
// at), the recall is answered all the same, at the holder's next poll.
func TestNudgedRecall(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	for _, lost := range []bool{false, true} {
		name := map[bool]string{false: "delivered", true: "lost"}[lost]
		t.Run(name, func(t *testing.T) {
			host := ""
			if lost {
				host = "192.0.2.1" // TEST-NET-1: datagrams go nowhere
			}
			a, am := nudgeCoordinator(t, st, host)
			b, bm := nudgeCoordinator(t, st, "")
			dir := uint64(time.Now().UnixNano() & 0xffffff)
			if _, err := a.Delegations.Grant(ctx, dir, "/d", store.ReadDeleg); err != nil {
				t.Fatal(err)
			}
			txn, err := b.Begin(ctx, []locking.Request{locking.Change(dir, "")})
			if err != nil {
				t.Fatalf("a change of a directory another mount holds: %v", err)
			}
			if a.Delegations.Held(dir) != nil {
				t.Error("the holder still holds its delegation after the change was granted")
			}
			if err := txn.End(ctx); err != nil {
				t.Fatal(err)
			}
			sent := testutil.ToFloat64(locking.NudgeCounter(bm, "recall", "sent")) + testutil.ToFloat64(locking.NudgeCounter(bm, "recall", "failed"))
			took := testutil.ToFloat64(locking.NudgeCounter(am, "recall", "received"))
			t.Logf("recall nudges sent (or tried) %v, taken %v", sent, took)
			if sent < 1 {
				t.Errorf("the changer sent or tried %v recall nudges, want at least one", sent)
			}
			if want := map[bool]bool{false: true, true: false}[lost]; (took >= 1) != want {
				t.Errorf("the holder took %v recall nudges (nudges %s)", took, name)
			}
			if !lost {
				// The wake is sent once the delegation is given back,
				// which may be after the changer's own poll found it.
				waitUntil(t, "the changer woken", time.Minute, func() bool {
					return testutil.ToFloat64(locking.NudgeCounter(bm, "wake", "received")) >= 1
				})
			}
		})
	}
}
