package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// RemoveAt deletes the path name of directory parent (unlink, or rmdir if
// wantDir): its path document (with compare-and-set on the version just
// read), then one link of its inode.
//
// An rmdir also takes the change lock of the directory it removes, which
// recalls the other mounts' delegations on it: they answer its attributes,
// and its listing, from memory, and a process there may hold it open.
// sub is the caller's guess at its inode (0: none); a wrong guess is found
// under the locks and the rmdir runs again with the right one.
func (f *Mount) RemoveAt(ctx context.Context, parent Dir, name string, wantDir bool, sub uint64) error {
	if f.opts.ReadOnly {
		return syscall.EROFS
	}
	if err := store.CheckName(name); err != nil {
		return err
	}
	if !wantDir && (f.removePending(parent, name) || f.removeMoved(parent, name)) {
		return nil // made or moved in memory: forgotten there
	}
	if st, how := f.holdOf(parent.Ino()); how == holdWrite {
		if handled, err := f.removeStored(ctx, st, parent, name, wantDir); handled {
			return err // removed in memory, flushed with the batch
		}
	}
	defer f.changing.begin(parent.Ino())()
	var err error
	for attempt := 0; ; attempt++ {
		dir, path, txn, lerr := f.lockEntryOf(ctx, parent, name, sub)
		if lerr != nil {
			return lerr
		}
		var ino uint64
		ino, err = f.removeLocked(ctx, parent, dir, path, wantDir, sub)
		if errors.Is(err, errOtherSub) && attempt < 5 {
			_ = txn.End(ctx)
			sub = ino
			continue
		}
		if err == nil {
			err = f.dropLinkAndEnd(ctx, txn, ino, parent.Ino())
		} else {
			f.end(ctx, txn, &err)
		}
		break
	}
	// The directory's own document was written through dirLinksOp only,
	// which follows it.
	f.delegs.changedThroughDirLinks(parent.Ino(), name, dirEntry{absent: true}, err == nil)
	return err
}

// errOtherSub: the directory an rmdir found is not the one whose change
// lock it holds (remove's sub); it removed nothing.
var errOtherSub = errors.New("the directory to remove is another inode than its locks are for")

// removeLocked removes the name under the caller's locks and returns the
// inode whose link the caller drops next. An rmdir holds the change lock
// of directory sub: errOtherSub (and the inode found) if that is not the
// one.
func (f *Mount) removeLocked(ctx context.Context, parent Dir, dir, path string, wantDir bool, sub uint64) (uint64, error) {
	for attempt := 0; ; attempt++ {
		// The directory and the entry in one read; the inode is not
		// needed to remove the name (the path document has its type), and
		// dropLink acts on it at the version it finds.
		d, err := f.entryUnder(ctx, parent.Ino(), dir, path)
		if err != nil {
			return 0, err
		}
		if wantDir && d.Type != store.TypeDir {
			return 0, syscall.ENOTDIR
		}
		if !wantDir && d.Type == store.TypeDir {
			return 0, syscall.EISDIR
		}
		if wantDir && d.Ino != sub {
			return d.Ino, errOtherSub
		}
		if wantDir && !f.knownEmpty(d.Ino) {
			empty, err := f.isEmptyDir(ctx, path)
			if err != nil {
				return 0, err
			}
			if !empty {
				return 0, syscall.ENOTEMPTY
			}
		}
		err = f.deleteEntry(ctx, parent.Ino(), path, d)
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue // changed between our read and delete: look again
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			return 0, fmt.Errorf("%q changed while being removed: %w", path, store.ErrNotFound)
		}
		if err != nil {
			return 0, err
		}
		return d.Ino, nil
	}
}

// deleteEntry deletes d, the name at path in directory dir as read under
// the caller's locks, with the directory's times (and count, for a
// subdirectory) riding in the same bulk. A delete whose outcome is
// unknown (its answer lost, refused, held past the timeout) is settled
// here by reading the name again, which nobody else changes while the
// caller holds its lock: gone, the delete landed, and the caller goes on
// to drop the inode's link (answering EIO instead left the inode with a
// link no name holds, unreachable: campaign seed 189815862); still there
// at the version read, it did not land (yet), and is sent again at that
// version, so that a late copy of the first finds nothing left to delete.
// After a few unknown outcomes in a row the error is returned (EIO): the
// name may still go later, leaving an inode fsck --repair removes.
func (f *Mount) deleteEntry(ctx context.Context, dir uint64, path string, d store.Dentry) error {
	opPath := store.DeleteDentry(path, d.Ver)
	if err := opPath.Err(); err != nil {
		return err
	}
	subdirs := 0
	if d.Type == store.TypeDir {
		subdirs = -1
	}
	for try := 0; ; try++ {
		opParent, pl, err := f.dirLinksOp(ctx, dir, subdirs, now())
		if err != nil {
			return err
		}
		f.cache.InvalidatePath(path)
		f.noteWrite()
		res, err := f.st.Bulk(ctx, []store.BulkOp{opPath, opParent})
		parentRes := store.BulkResult{Err: err}
		if err == nil {
			err, parentRes = res[0].Err, res[1]
		}
		// A second try that finds the name changed or gone may have been
		// beaten by the first, landing late: the name tells too.
		unknown := errors.Is(err, store.ErrUnavailable) ||
			try > 0 && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound))
		if unknown && try < 3 {
			cur, gerr := f.st.GetDentry(ctx, path)
			switch {
			case errors.Is(gerr, store.ErrNotFound):
				f.log.Info("a removal whose answer was lost had landed", "path", path, "err", err)
				f.settleDirLinks(ctx, pl, parentRes, true)
				return nil
			case gerr == nil && cur.Ver == d.Ver:
				f.settleDirLinks(ctx, pl, parentRes, false)
				continue
			}
		}
		f.settleDirLinks(ctx, pl, parentRes, err == nil)
		return err
	}
}

// knownEmpty reports that directory ino has no entries, known without a
// request: this mount holds a delegation on it whose listing is complete
// and empty, and makes no change in it now. The caller holds the locks of
// removing it, which every entry change in it, from any mount, conflicts
// with; a change another mount made before recalled the delegation first
// (a new one is complete only after a listing that sees the change), and
// one of this mount's own is in the listing once it is no longer under
// way.
func (f *Mount) knownEmpty(ino uint64) bool {
	if f.changing.busy(ino) {
		return false
	}
	st := f.delegs.state(ino)
	if st == nil {
		return false
	}
	names, _, complete := st.listing()
	return complete && len(names) == 0
}

// entryChanges counts this mount's entry changes under way (from before
// their locks to after their outcome is recorded), by directory inode.
type entryChanges struct {
	mu lockorder.Mutex
	n  map[uint64]int
}

// begin counts a change of the entries of dirs; the returned func ends it.
func (c *entryChanges) begin(dirs ...uint64) func() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[uint64]int{}
	}
	for _, d := range dirs {
		c.n[d]++
	}
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, d := range dirs {
			if c.n[d]--; c.n[d] <= 0 {
				delete(c.n, d)
			}
		}
	}
}

// busy reports a change of dir's entries under way.
func (c *entryChanges) busy(dir uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[dir] > 0
}

// isEmptyDir reports whether a directory has no entries. The search must
// see every committed child, so it refreshes first.
func (f *Mount) isEmptyDir(ctx context.Context, path string) (bool, error) {
	if err := f.st.Refresh(ctx, store.SearchedPaths); err != nil {
		return false, err
	}
	f.refreshed.Store(f.writes.Load())
	sc := f.co.View.List(path, 16)
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return false, err
		}
		if len(bad) > 0 {
			return false, bad[0] // a corrupt child still makes it non-empty
		}
		if page == nil {
			return true, nil
		}
		if len(page) > 0 {
			return false, nil
		}
	}
}
