package mounttest

// Mounts with a short lease and no caches, the time bounds that lease
// implies for recovery and staleness, and the waits tests bound with them.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

const (
	// Lease is the --lease of MountUncached's mounts.
	Lease = 2 * time.Second
	// declaredDeadWithin: the latest moment after a mount's death at which
	// a correct survivor declares it dead. The dead mount fell silent up to
	// one heartbeat (lease/3) before it died, the survivor's sweeper first
	// sees its last counter up to one sweeper period (lease/3) after that,
	// must see it unchanged for lease + grace (lease/2), and checks again
	// only at its next tick (another lease/3).
	declaredDeadWithin = Lease + Lease/2 + 3*(Lease/3)
	// RecoveredWithin: a survivor must have finished recovering a dead
	// mount's work this long after the death: declaredDeadWithin, then one
	// sweeper round that recovers, which on a loaded 2-core machine (load 10
	// and more, -race) has been seen to need more than a second more than on
	// an idle one; two leases leave room for that. A survivor that waits for
	// a lock's timeout (30s) or for someone to trip over the leftovers still
	// fails the bound.
	RecoveredWithin = declaredDeadWithin + 2*Lease
	// StaleWithin: the README's bound on how stale another mount's listing
	// may be (3s with default flags), plus slack for a loaded machine.
	StaleWithin = 5 * time.Second
)

// uncachedFlags: a short lease and no caching anywhere, so that what a
// mount shows is what the index holds.
var uncachedFlags = append([]string{"--lease", Lease.String()}, NoCache...)

// MountUncached mounts with uncachedFlags (plus extra) and env.
func MountUncached(t testing.TB, f *FS, env []string, extra ...string) *Mount {
	t.Helper()
	flags := append(append([]string{}, uncachedFlags...), extra...)
	return f.MountAt(t, t.TempDir(), env, flags...)
}

// MountLocking mounts f with a strategy and a short lease (so that the
// invariant check does not wait long for anything a mount left behind).
func MountLocking(t testing.TB, f *FS, strategy string, cached bool, extra ...string) *Mount {
	t.Helper()
	args := []string{"--locking", strategy, "--lease", "2s"}
	if !cached {
		args = append(args, NoCache...)
	}
	return f.Mount(t, append(args, extra...)...)
}

// Sessions lists f's session documents, live and dead.
func Sessions(t testing.TB, f *FS) []store.SessionDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := f.Store.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return all
}

// Session returns the live session document of mount m.
func Session(t testing.TB, f *FS, m *Mount) store.SessionDoc {
	t.Helper()
	all := Sessions(t, f)
	for _, s := range all {
		if s.Pid == m.Pid() && !s.Dead {
			return s
		}
	}
	t.Fatalf("no live session of the mount at %s (pid %d) among %+v", m.Dir, m.Pid(), all)
	return store.SessionDoc{}
}

// WaitLog waits until the mount's log contains s.
func WaitLog(t testing.TB, m *Mount, s string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !strings.Contains(m.Log(), s) {
		if time.Since(start) > limit {
			t.Fatalf("the mount at %s did not log %q within %s", m.Dir, s, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// WaitFor polls cond until it holds or limit passes, and returns how long
// it took.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not seen within %s", what, limit)
		}
		time.Sleep(25 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%s: seen after %s", what, took.Round(time.Millisecond))
	return took
}

// Alive checks, at the end of a test, that its mount still serves.
func Alive(t testing.TB, m *Mount) {
	t.Helper()
	if m.Exited() {
		t.Fatalf("the mount at %s died:\n%s", m.Dir, m.Log())
	}
	if _, err := os.ReadDir(m.Dir); err != nil {
		t.Fatalf("the mount at %s no longer answers: %v", m.Dir, err)
	}
}

// LateTimeout is the --es-timeout of a mount whose request the fault
// proxy holds: every other request of that mount must finish within it
// too, and under load (load 10 and more on 2 cores) a refresh has taken
// more than a second; 4s leaves room for that.
//
// LateDelay: how long the fault proxy holds the chosen request. Past the
// mount's deadline, so the sender has given up when the request lands, and
// far enough past it that what the test does after the failure (the
// mount's rollback, newer writes of the same bytes) comes first even on a
// loaded machine.
const (
	LateTimeout = 4 * time.Second
	LateDelay   = LateTimeout + 8*time.Second
)

// WaitLanded waits for fault to fire and fails the test unless the
// request it delayed was then answered 200 by the cluster.
func WaitLanded(t testing.TB, fault *Fault) {
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
