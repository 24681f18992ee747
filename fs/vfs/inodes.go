package vfs

// Reading an inode (from the pending batch, a delegation, the cache or the
// store) and changing it with compare-and-set; see fs.go.

import (
	"context"
	"errors"
	"maps"

	"github.com/esfs/esfs/store"
)

// inode returns the attributes of ino, from the cache or the store. gen is
// the cache generation read before the caller's first store read.
func (f *Mount) inode(ctx context.Context, ino uint64, gen uint64) (store.Inode, error) {
	if a, ok := f.wb.inode(ino); ok {
		return a, nil
	}
	if n, ok := f.cache.Inode(ino); ok {
		return n, nil
	}
	n, err := f.st.GetInode(ctx, ino)
	if err != nil {
		return store.Inode{}, err
	}
	f.cache.PutInode(n, gen)
	return n, nil
}

// freshInode reads the attributes of ino from the store, bypassing the cache.
func (f *Mount) freshInode(ctx context.Context, ino uint64) (store.Inode, error) {
	if a, ok := f.wb.inode(ino); ok {
		return a, nil // pending: this mount's memory is where it lives
	}
	gen := f.cache.Gen()
	n, err := f.st.GetInode(ctx, ino)
	if err != nil {
		return store.Inode{}, err
	}
	f.cache.PutInode(n, gen)
	return n, nil
}

// watched returns whether a real-time read of directory ino must come
// with its delegation document: with delegations, unless a delegation of
// this mount covers it (then no other mount writes it) or it is this
// mount's own, not flushed yet.
func (f *Mount) watched(ino uint64) bool {
	if f.delegs == nil || f.delegs.state(ino) != nil {
		return false
	}
	_, pending := f.wb.inode(ino)
	return !pending
}

// inodesNow reads the attributes of inos in real time, and caches them.
// Those of a directory in dirs (its path by inode, see watched) come with
// its delegation document in the same round trip: a directory another
// mount writes in memory changes its link count and times with what that
// mount makes there, so that mount is recalled (it flushes first) and
// the attributes are read again.
func (f *Mount) inodesNow(ctx context.Context, inos []uint64, dirs map[uint64]string) ([]store.InodeResult, error) {
	gen := f.cache.Gen()
	watch := make([]uint64, 0, len(dirs))
	ids := make([]string, 0, len(dirs))
	for ino := range dirs {
		watch, ids = append(watch, ino), append(ids, store.DelegLockID(ino))
	}
	res, locks, lockErrs, err := f.st.GetInodesWithLocks(ctx, inos, ids)
	if err != nil {
		return nil, err
	}
	// A damaged delegation document fails its directory's attributes
	// alone: who writes there is not known.
	failed := map[uint64]error{}
	for i, lerr := range lockErrs {
		if lerr != nil {
			failed[watch[i]] = lerr
		}
	}
	recalled := false
	for i, lk := range locks {
		if lk.WrittenElsewhere(f.co.Session().ID()) {
			if err := f.co.Delegations.RecallWriter(ctx, watch[i], dirs[watch[i]]); err != nil {
				return nil, err
			}
			recalled = true
		}
	}
	if recalled {
		gen = f.cache.Gen()
		if res, err = f.st.GetInodes(ctx, inos); err != nil {
			return nil, err
		}
	}
	for i, r := range res {
		if lerr, ok := failed[inos[i]]; ok {
			res[i] = store.InodeResult{Err: lerr}
		} else if r.Err == nil {
			f.cache.PutInode(r.Inode, gen)
		}
	}
	return res, nil
}

// inodeNow is freshInode of ino, a file or a directory (typ) at path: a
// directory's read comes with its delegation document (inodesNow).
func (f *Mount) inodeNow(ctx context.Context, ino uint64, typ store.FileType, path string) (store.Inode, error) {
	if typ != store.TypeDir || !f.watched(ino) {
		return f.freshInode(ctx, ino)
	}
	res, err := f.inodesNow(ctx, []uint64{ino}, map[uint64]string{ino: path})
	if err != nil {
		return store.Inode{}, err
	}
	return res[0].Inode, res[0].Err
}

// updateInode applies change to the attributes of ino with compare-and-set,
// re-reading and re-applying on conflict: concurrent setattrs, writes and
// link count changes from any mount all serialize on the inode document.
func (f *Mount) updateInode(ctx context.Context, ino uint64, change func(*store.Inode) error) (store.Inode, error) {
	if n, ok := f.cache.Inode(ino); ok {
		return f.updateInodeFrom(ctx, ino, &n, change)
	}
	return f.updateInodeFrom(ctx, ino, nil, change)
}

// updateInodeFrom is updateInode whose first attempt starts from known (if
// not nil), a copy of the inode as this mount last read or wrote it,
// instead of reading it: one round trip instead of two while nobody else
// changed it, and the usual re-read if someone did.
func (f *Mount) updateInodeFrom(ctx context.Context, ino uint64, known *store.Inode, change func(*store.Inode) error) (store.Inode, error) {
	for {
		a, ok, err := f.wb.update(ino, change)
		if !ok {
			break
		}
		if errors.Is(err, errOutcomeUnknown) {
			if err := f.settle(ctx); err != nil {
				return store.Inode{}, err
			}
			continue
		}
		if err == nil {
			f.delegs.updateAttr(ino, a)
		}
		return a, err
	}
	// Anything pending lands first: this change may depend on it.
	if err := f.settle(ctx); err != nil {
		return store.Inode{}, err
	}
	var lock attrLock
	defer lock.release()
	f.delegs.forgetAttr(ino)
	for attempt := 0; ; attempt++ {
		var n store.Inode
		remembered := attempt == 0 && known != nil && known.Ino == ino && known.Ver.Known()
		if remembered {
			n = *known
			n.Xattrs = maps.Clone(known.Xattrs) // change must not write through to known
		} else {
			var err error
			if n, err = f.freshInode(ctx, ino); err != nil {
				return store.Inode{}, err
			}
		}
		// Which delegations may hold what is overwritten, from the
		// inode as this write replaces it (see attrLock).
		holder := n.HeldBy()
		if err := change(&n); err != nil {
			if remembered {
				// Refused on what this mount remembers, which may be
				// stale (another mount chowned it): decide on a fresh read.
				continue
			}
			return store.Inode{}, err
		}
		if err := lock.hold(ctx, f, holder); err != nil {
			return store.Inode{}, err
		}
		f.cache.InvalidateInode(ino)
		v, err := f.st.Write(ctx, store.PutInode(n, n.Ver))
		if errors.Is(err, store.ErrConflict) && attempt < 50 {
			if !remembered {
				store.Backoff(ctx, attempt, store.InodeBackoff)
			}
			continue
		}
		if err != nil {
			return store.Inode{}, err
		}
		n.Ver = v
		f.cache.PutInode(n, f.cache.Gen())
		f.delegs.forgetAttr(ino) // a lookup may have learned it meanwhile
		return n, nil
	}
}
