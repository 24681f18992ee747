package vfs

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// newMountOn is a mount of the filesystem in st with options o, as newFS
// makes one (its own session), and what ends its session (once; the
// test's end does too).
func newMountOn(t *testing.T, st *store.Store, o Options) (*Mount, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	co, err := locking.Start(ctxT(t), st, locking.Config{Strategy: "tree", Lease: 10 * time.Second,
		LockTimeout: 10 * time.Second, Mount: "(in-process test)", Log: log, NoSweeper: true})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := func() { once.Do(func() { _ = co.Close(context.Background()) }) }
	t.Cleanup(end)
	c, err := cache.New(16<<20, time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	o.LockTimeout, o.Logger = 10*time.Second, log
	return New(st, co, c, o), end
}

// TestDelegationsMakeRoomForAWalk: a walk of more directories than a mount
// may hold delegations on lists each under a delegation of its own (its
// entries go to the kernel to keep), the ones used least recently given
// back to make room, never more held than the bound.
func TestDelegationsMakeRoomForAWalk(t *testing.T) {
	ctx := ctxT(t)
	st := testenv.Store(t)
	maker, closeMaker := newMountOn(t, st, Options{})
	walker, _ := newMountOn(t, st, Options{Delegations: true})
	const bound, dirs = 4, 10
	walker.delegs.maxDirs = bound
	inos := make([]uint64, dirs)
	for i := range dirs {
		n, err := maker.Create(ctx, fmt.Sprintf("/d%02d", i), dir(0o755))
		must(t, "mkdir", err)
		inos[i] = n.Ino
		_, err = maker.Create(ctx, fmt.Sprintf("/d%02d/f", i), file(0o644))
		must(t, "create", err)
	}
	// The maker's shared locks (a lease) would refuse the grants.
	closeMaker()
	held := func() int {
		walker.delegs.mu.Lock()
		defer walker.delegs.mu.Unlock()
		return len(walker.delegs.by)
	}
	for round := range 2 {
		for i := range dirs {
			p := fmt.Sprintf("/d%02d", i)
			l, err := walker.OpenDir(ctx, pathDir{p, inos[i]}, nil)
			must(t, "opendir "+p, err)
			var names []string
			for {
				page, err := l.Next(ctx)
				must(t, "readdir "+p, err)
				if page == nil {
					break
				}
				for _, e := range page {
					names = append(names, e.Name)
				}
			}
			if !l.Kept() {
				t.Errorf("round %d: %s listed without a delegation (%d held, bound %d)", round, p, held(), bound)
			}
			l.Close()
			if !slices.Equal(names, []string{"f"}) {
				t.Errorf("round %d: %s lists %q", round, p, names)
			}
			if n := held(); n > bound {
				t.Errorf("round %d: %d delegations held after %s, bound %d", round, n, p, bound)
			}
		}
	}
	// The ones kept are those used last.
	for i := range dirs {
		if got, want := walker.co.Delegations.Held(inos[i]) != nil, i >= dirs-bound; got != want {
			t.Errorf("delegation on /d%02d held: %v, want %v", i, got, want)
		}
	}
}
