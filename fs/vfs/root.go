package vfs

import (
	"context"
	"fmt"
	"strings"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// FindRoot looks up stored path p, to be a mount's root (Options.Root), as
// the kernel's lookups from "/" would find it: one name at a time, each
// read with its directory's delegation document, so that a mount writing
// that directory in memory is recalled (flushes) first. A directory made
// on any mount just before is then found, as a lookup would find it. The
// node returned may be of any type; a name on the way that is not a
// directory makes p not found.
func FindRoot(ctx context.Context, st *store.Store, co *locking.Coordinator, p string) (store.Dentry, error) {
	if err := store.CheckPath(p); err != nil {
		return store.Dentry{}, err
	}
	d := store.Dentry{Path: "/", Ino: store.RootIno, Type: store.TypeDir}
	if p == "/" {
		return d, nil
	}
	for _, name := range strings.Split(p[1:], "/") {
		if d.Type != store.TypeDir {
			return store.Dentry{}, fmt.Errorf("%q is a %s: %w", d.Path, d.Type, store.ErrNotFound)
		}
		next, err := findEntry(ctx, st, co, d, store.Join(d.Path, name))
		if err != nil {
			return store.Dentry{}, err
		}
		d = next
	}
	return d, nil
}

// findEntry reads path, an entry of directory dir, as readers see it, once
// no other mount writes dir in memory.
func findEntry(ctx context.Context, st *store.Store, co *locking.Coordinator, dir store.Dentry, path string) (store.Dentry, error) {
	for attempt := 0; ; attempt++ {
		d, derr, lk, err := st.GetDentryWithLock(ctx, path, store.DelegLockID(dir.Ino))
		if err != nil {
			return store.Dentry{}, err
		}
		if lk.WrittenElsewhere(co.Session().ID()) && attempt < 5 {
			if err := co.Delegations.RecallWriter(ctx, dir.Ino, dir.Path); err != nil {
				return store.Dentry{}, err
			}
			continue // the writer has flushed: read again
		}
		if derr != nil {
			return store.Dentry{}, derr
		}
		vis, ok, err := co.View.Resolve(ctx, d)
		if err != nil {
			return store.Dentry{}, err
		}
		if !ok {
			return store.Dentry{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
		}
		return vis, nil
	}
}
