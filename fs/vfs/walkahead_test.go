package vfs

import (
	"fmt"
	"slices"
	"testing"

	"github.com/esfs/esfs/test/testenv"
)

// TestDelegationsMakeRoomForAWalk: a walk of more directories than a mount
// may hold delegations on lists each under a delegation of its own (its
// entries go to the kernel to keep), the ones used least recently given
// back to make room, never more held than the bound.
func TestDelegationsMakeRoomForAWalk(t *testing.T) {
	ctx := ctxT(t)
	st := testenv.Store(t)
	maker, closeMaker := newMountOn(t, st, "tree", Options{})
	walker, _ := newMountOn(t, st, "tree", Options{Delegations: true})
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
