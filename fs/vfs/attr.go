package vfs

import (
	"context"
	"syscall"

	"github.com/esfs/esfs/store"
)

// ChunkSize is the size of the chunks files are stored in: the allocation
// unit the adapter reports (st_blocks, st_blksize, holes).
func (f *Mount) ChunkSize() int64 { return f.st.ChunkSize() }

// Current returns a as this mount shows it: an open file's size and times
// are its own (what it has buffered, written or truncated).
func (f *Mount) Current(a store.Inode) store.Inode {
	if of := f.openState(a.Ino); of != nil {
		return of.current(a)
	}
	return a
}

// OpenAttr returns the last attributes of inode ino if a file open here
// holds it: such a file lives on in memory until its last close, also once
// its inode is gone from the store.
func (f *Mount) OpenAttr(ino uint64) (store.Inode, bool) {
	if of := f.openState(ino); of != nil {
		return of.lastAttr(), true
	}
	return store.Inode{}, false
}

// Getattr returns n's attributes, and whether the kernel may keep them
// (with delegations, only those a delegation holds, told under it to kn,
// the kernel's node, so that a recall makes it forget them; without, for
// the mount's timeout). store.ErrNotFound: n's inode is gone.
func (f *Mount) Getattr(ctx context.Context, n Node, kn KernelNode) (store.Inode, bool, error) {
	if of := f.openState(n.Ino()); of != nil {
		// The size an open file shows is its own (Current): up to the
		// store first if a lock grant left that to be done.
		octx, cancel := f.ctxOf(ctx)
		of.mu.Lock()
		err := of.owed(octx)
		of.mu.Unlock()
		cancel()
		if err != nil {
			return store.Inode{}, false, err
		}
	}
	if f.delegs != nil {
		return f.getattrDelegated(ctx, n, kn)
	}
	if a, ok := f.cache.Inode(n.Ino()); ok {
		return a, true, nil
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	a, err := f.inode(ctx, n.Ino(), f.cache.Gen())
	return a, true, err
}

// getattrDelegated is Getattr with delegations: from the delegation that
// holds the attributes (the directory's own for a directory, its
// parent's for a file), else read in real time and not kept by the
// kernel, since nothing would tell us when they change.
func (f *Mount) getattrDelegated(ctx context.Context, n Node, kn KernelNode) (store.Inode, bool, error) {
	if a, ok := f.heldAttrs(n, kn); ok {
		return a, true, nil
	}
	ds := f.delegs
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	var st *dirState
	var changes uint64
	if n.IsDir() {
		if st = ds.state(n.Ino()); st != nil {
			changes = st.changeCount()
		}
	}
	var a store.Inode
	var err error
	if n.IsDir() {
		if err := f.settleDir(ctx, n.Ino()); err != nil {
			return store.Inode{}, false, err
		}
		path, _ := n.StorePath() // for display only: the recall is by inode
		a, err = f.inodeNow(ctx, n.Ino(), store.TypeDir, path)
	} else {
		a, err = f.freshInode(ctx, n.Ino())
	}
	if err != nil {
		return store.Inode{}, false, err
	}
	if st != nil {
		st.learnSelf(a, changes)
		if _, ok := f.heldAttrs(n, kn); ok {
			return a, true, nil
		}
	}
	return a, false, nil
}

// Truncate sets the size of n, a file (truncate(2), ftruncate(2)).
func (f *Mount) Truncate(ctx context.Context, n Node, size int64) error {
	if f.opts.ReadOnly {
		return syscall.EROFS
	}
	if n.IsDir() {
		return syscall.EISDIR
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	return f.truncate(ctx, n.Ino(), size, nil)
}

// AttrChange is a change of attributes (chmod, chown, utimes): only what
// it has set changes. Times are in nanoseconds since 1970.
type AttrChange struct {
	Mode, Uid, Gid uint32
	Atime, Mtime   int64
	HasMode        bool
	HasUid, HasGid bool
	HasAtime       bool
	HasMtime       bool
}

// Empty reports whether c changes nothing.
func (c AttrChange) Empty() bool {
	return !c.HasMode && !c.HasUid && !c.HasGid && !c.HasAtime && !c.HasMtime
}

// Setattr changes n's attributes and returns them, and whether the kernel
// may keep them (as Getattr).
func (f *Mount) Setattr(ctx context.Context, n Node, c AttrChange) (store.Inode, bool, error) {
	if f.opts.ReadOnly {
		return store.Inode{}, false, syscall.EROFS
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	t := now()
	if c.HasMtime {
		// An explicit mtime wins over the writes made before it: set
		// before the inode, so that no flush in between writes theirs.
		// (Not in change: that may run under the pending batch's lock,
		// which a flush takes while it holds the open file.)
		if of := f.openState(n.Ino()); of != nil {
			of.setMtime(c.Mtime)
		}
	}
	a, err := f.updateInode(ctx, n.Ino(), func(a *store.Inode) error {
		if c.HasMode {
			a.Mode = c.Mode & 0o7777
		}
		if c.HasUid {
			a.Uid = c.Uid
		}
		if c.HasGid {
			a.Gid = c.Gid
		}
		if c.HasAtime {
			a.Atime = c.Atime
		}
		if c.HasMtime {
			a.Mtime = c.Mtime
		}
		a.Ctime = t
		return nil
	})
	if err != nil {
		return store.Inode{}, false, err
	}
	f.noteInode(a)
	// With delegations, nothing would tell the kernel when they change
	// (see getattrDelegated).
	return a, f.delegs == nil, nil
}
