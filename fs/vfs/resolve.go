package vfs

// Resolving a path to its entry and inode: from a delegation, the cache or
// the store, and under the locks a call holds; see fs.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// resolve returns the node at path: from the cache, or with realtime GETs.
func (f *Mount) resolve(ctx context.Context, path string) (store.Node, error) {
	if n, neg, ok := f.cache.Lookup(path); ok {
		if neg {
			return store.Node{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
		}
		return n, nil
	}
	return f.resolveFresh(ctx, path)
}

// resolveFresh reads path from the store, bypassing the cache, and caches it.
// The inode may come from the cache, except with delegations (see
// resolveNow).
func (f *Mount) resolveFresh(ctx context.Context, path string) (store.Node, error) {
	return f.resolveRead(ctx, path, f.delegs != nil)
}

// resolveRead reads path from the store, and its inode too if now (else
// from the cache if there), and caches them.
func (f *Mount) resolveRead(ctx context.Context, path string, now bool) (store.Node, error) {
	gen := f.cache.Gen()
	e, err := f.co.View.Get(ctx, path)
	if err != nil {
		return store.Node{}, err
	}
	return f.resolveEntry(ctx, path, e, now, gen)
}

// resolveWatching is resolveFresh of path in directory dirIno (at dir),
// reading in the same round trip whether another mount writes the
// directory (holds its write delegation). If one does, it recalls it
// and reports recalled, without an answer: the caller asks again, once
// the writer has flushed.
func (f *Mount) resolveWatching(ctx context.Context, dirIno uint64, dir, path string) (sn store.Node, recalled bool, err error) {
	gen := f.cache.Gen()
	d, derr, lk, err := f.st.GetDentryWithLock(ctx, path, store.DelegLockID(dirIno))
	if err != nil {
		return store.Node{}, false, err
	}
	if lk.WrittenElsewhere(f.co.Session().ID()) {
		return store.Node{}, true, f.co.Delegations.RecallWriter(ctx, dirIno, dir)
	}
	var e locking.Entry
	switch {
	case errors.Is(derr, store.ErrNotFound):
	case derr != nil:
		return store.Node{}, false, derr
	default:
		vis, ok, err := f.co.View.Resolve(ctx, d)
		if err != nil {
			return store.Node{}, false, err
		}
		e = locking.Entry{Dentry: vis, Found: ok, Stored: true}
	}
	sn, err = f.resolveEntry(ctx, path, e, true, gen)
	return sn, false, err
}

// resolveLive is resolveWatching until it has an answer: path as it is
// stored now, a mount writing its directory in memory recalled first.
func (f *Mount) resolveLive(ctx context.Context, dirIno uint64, dir, path string) (store.Node, error) {
	for {
		sn, recalled, err := f.resolveWatching(ctx, dirIno, dir, path)
		if !recalled || err != nil {
			return sn, err
		}
	}
}

// resolveReadOnly is resolve for the lookups of a read-only mount without
// delegations: a name found may come from the cache, a name missing is
// read now (as resolveLive). The kernel decides mkdir, mknod, symlink,
// link and open(O_CREAT|O_EXCL) on a read-only mount by this lookup alone
// (it asks again, past its own cache, for exactly this), where a writable
// mount's create asks the store: a missing name this mount remembers,
// made since by another mount, would be answered EROFS instead of EEXIST.
func (f *Mount) resolveReadOnly(ctx context.Context, dirIno uint64, dir, path string) (store.Node, error) {
	if n, neg, ok := f.cache.Lookup(path); ok && !neg {
		return n, nil
	}
	return f.resolveLive(ctx, dirIno, dir, path)
}

// resolveEntry is resolveRead once the path document is read (e), gen the
// cache generation read before.
func (f *Mount) resolveEntry(ctx context.Context, path string, e locking.Entry, now bool, gen uint64) (store.Node, error) {
	var err error
	if !e.Found {
		f.cache.PutNegative(path, gen)
		return store.Node{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
	}
	d := e.Dentry
	var attr store.Inode
	if now {
		attr, err = f.inodeNow(ctx, d.Ino, d.Type, path)
	} else {
		attr, err = f.inode(ctx, d.Ino, gen)
	}
	for attempt := 0; errors.Is(err, store.ErrNotFound); attempt++ {
		// Either another mount removed the entry between our two reads
		// (then it is simply gone), or a create is landing (its bulk
		// writes the path and the inode on different shards, so the path
		// can be read a moment before its inode), or a path points at a
		// missing inode (a create that failed halfway, or damage; fsck
		// removes it): only what persists is damage.
		again, aerr := f.st.GetDentry(ctx, path)
		if errors.Is(aerr, store.ErrNotFound) {
			f.cache.PutNegative(path, gen)
			return store.Node{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
		}
		if aerr == nil && again.Ino != d.Ino {
			return f.resolveRead(ctx, path, now) // replaced meanwhile
		}
		if attempt >= 6 {
			return store.Node{}, f.st.DamagedPath(path, fmt.Errorf("path %q points at missing inode %d: %w", path, d.Ino, store.ErrCorrupt))
		}
		store.Backoff(ctx, attempt, 50*time.Millisecond)
		if attr, err = f.st.GetInode(ctx, d.Ino); err == nil {
			f.cache.PutInode(attr, gen)
		}
	}
	if err != nil {
		return store.Node{}, err
	}
	if attr.Type != d.Type {
		return store.Node{}, f.st.DamagedPath(path, fmt.Errorf("path %q is a %s but inode %d is a %s: %w", path, d.Type, d.Ino, attr.Type, store.ErrCorrupt))
	}
	n := store.Node{Dentry: d, Attr: attr}
	f.cache.PutNode(n, gen)
	return n, nil
}
