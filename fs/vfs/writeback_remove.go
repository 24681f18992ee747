package vfs

import (
	"context"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// Removals and renames in memory: an unlink of a stored file, an rmdir of
// a stored empty directory, or a rename of a stored file (over another
// one or not), between directories this mount holds for writing, is
// recorded in the pending batch and returns without a request. The batch
// stages the name with the intent {op, src} (readers see it until the
// record commits, and not after), and once it has committed the inode
// loses its link, with its data when none is left (locking.Journal.Flush,
// OpRecord.DropInos). A rename's source is staged the same way, its new
// name as a new name of the batch ({op, dst}), and a name it replaces with
// {op, ovr} (the replaced inode is dropped as a removed one). So `rm -rf`
// of a tree this mount made costs a batch per flush interval, not a chain
// of requests per entry, and what another mount sees, or a crash leaves,
// is still a prefix of this mount's calls.
//
// What stays on the synchronous path: a file open here that would lose
// its last link (it must outlive its name until its last close); a file
// losing a link with several links or whose link count is not known (its
// other names may be in directories others read); a directory not known
// empty under a write delegation of its own (only that keeps other mounts
// from adding to it before the batch lands); a rename of a directory (its
// subtree's paths move); a change in a directory whose own attributes
// this mount does not hold (a stat would not show it); and anything made
// in memory and not flushed yet that is not a file. A path changes at
// most once per batch (writeback.storedPaths): a second change of it
// flushes first.

// storedChange is what a removedName does to its stored name.
type storedChange int

const (
	removal     storedChange = iota // unlink, rmdir: the inode loses a link
	moveAway                        // a rename's source: the inode is named elsewhere
	replacement                     // a rename's target: names the moved inode, the old one loses a link
)

// removedName is a stored name removed, moved away or replaced in memory.
type removedName struct {
	kind storedChange
	// d is the name as stored (Path, Ino and Type); a replacement's
	// Intent has the inode moved there (NewIno, NewType).
	d store.Dentry
	// deleg is the write delegation of a removed directory, given back
	// once the batch has landed (nothing is left to cover).
	deleg *locking.Delegation
	// move is, for a rename's source (moveAway) into another directory,
	// what the batch does to the file's Parents (Ino 0: nothing).
	move store.ParentMove
}

// storedPending reports whether the batch changes path, stored (see
// storedPaths).
func (wb *writeback) storedPending(path string) bool {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	return wb.storedPaths[path]
}

// storedName reports whether name in directory dir is a stored name the
// batch does not change yet: neither made in memory nor in storedPaths.
// Caller holds mu.
func (wb *writeback) storedName(dir uint64, path, name string) bool {
	_, pending := wb.pendingEntry(dir, name)
	return !pending && !wb.storedPaths[path]
}

// removeStored removes name of directory parent, which this mount holds
// for writing (st, see holdOf), in memory, if it is a stored entry this
// mount may remove there (see the file's comment). handled false: the
// synchronous path decides (after a settle).
func (f *Mount) removeStored(ctx context.Context, st *dirState, parent Dir, name string, wantDir bool) (handled bool, err error) {
	wb := f.wb
	if wb.pending(parent.Ino()) {
		return false, nil
	}
	dir, ok := parent.StorePath()
	if !ok {
		return false, nil
	}
	path := store.Join(dir, name)
	if store.CheckPath(path) != nil {
		return false, nil
	}
	e, ok := st.lookup(name)
	if !ok || e.absent || (e.typ == store.TypeDir) != wantDir || wb.pending(e.ino) || wb.storedPending(path) {
		return false, nil
	}
	if !f.timesShown(parent.Ino()) {
		return false, nil
	}
	var child *dirState
	if wantDir {
		if child = f.delegs.state(e.ino); child == nil || !child.d.Writable() || !f.knownEmpty(e.ino) {
			return false, nil
		}
	} else if !f.singleLink(parent.Ino(), name, e) || f.openState(e.ino) != nil {
		return false, nil
	}
	// The strategy's shared locks of the entry, held as a lease until the
	// batch lands, as for a create made in memory: a rename of an
	// ancestor by another mount waits for the removal to land.
	lease, handled, err := f.leaseEntry(ctx, parent, dir, path)
	if lease == nil {
		return handled, err
	}
	keep := false
	defer func() {
		if !keep {
			lease.End()
		}
	}()
	if wb.count.Load() >= 4*maxPending {
		if err := wb.flush(ctx); err != nil {
			return true, err
		}
	}
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if wb.unknownBatch() != nil || st.d.Revoked() || child != nil && child.d.Revoked() {
		return false, nil
	}
	// Looked at again under the gate: a flush or another call may have
	// run since.
	if now, ok := st.lookup(name); !ok || now.absent || now.ino != e.ino {
		return false, nil
	}
	if child != nil && !f.knownEmpty(e.ino) {
		return false, nil
	}
	t := now()
	wb.mu.Lock()
	if !wb.storedName(parent.Ino(), path, name) {
		wb.mu.Unlock()
		return false, nil
	}
	rn := removedName{kind: removal, d: store.Dentry{Path: path, Ino: e.ino, Type: e.typ}}
	if child != nil {
		rn.deleg = child.d
		// Its own times, changed by removals in it, go with it.
		delete(wb.dirs, e.ino)
	}
	wb.removed = append(wb.removed, rn)
	wb.storedPaths[path] = true
	wb.touchLocked(parent.Ino(), t)
	if wantDir {
		wb.dirs[parent.Ino()].links--
	}
	keep = wb.keepLease(parent.Ino(), lease)
	wb.added(1)
	wb.mu.Unlock()
	st.changedHere(name, dirEntry{absent: true}, true, true)
	f.cache.InvalidatePath(path)
	f.cache.InvalidateInode(e.ino)
	f.delegs.forgetAttr(e.ino)
	f.metrics.pendingRemoves.Inc()
	return true, nil
}

// timesShown reports whether this mount knows the attributes of directory
// dir it shows (its own delegation holds them): only then does a change
// in memory show in them, as the pending batch changes them (a stat that
// reads the store would show them as of the last flush).
func (f *Mount) timesShown(dir uint64) bool {
	_, ok := f.wb.overlay(dir, func() (store.Inode, bool) { return f.delegs.selfAttr(dir, nil) })
	return ok
}

// keepLease keeps lease as the batch's lease of directory dir, unless it
// has one; it reports whether it did. Caller holds mu.
func (wb *writeback) keepLease(dir uint64, lease *locking.Share) bool {
	if wb.shares[dir] != nil {
		return false
	}
	wb.shares[dir] = lease
	return true
}

// added counts n more pending entries, and kicks a flush past
// maxPending. Caller holds mu.
func (wb *writeback) added(n int64) {
	if wb.under == nil {
		wb.under = wb.f.co.Session()
	}
	if wb.count.Add(n) >= maxPending {
		wb.flushSoon()
	}
}

// flushSoon asks the background flush to run now.
func (wb *writeback) flushSoon() {
	select {
	case wb.kick <- struct{}{}:
	default:
	}
}

// singleLink reports whether the file of entry e (name in directory dir)
// is known to have one link: from the attributes its delegation holds,
// or else from the cache.
func (f *Mount) singleLink(dir uint64, name string, e dirEntry) bool {
	if a, ok := f.delegs.attr(dir, name, e.ino, nil); ok {
		return a.Nlink == 1
	}
	a, ok := f.cache.Inode(e.ino)
	return ok && a.Ino == e.ino && a.Nlink == 1 && a.Type == e.typ
}

// removedLanded finishes what batch b removed, once it landed: the
// delegations of the directories it removed are given back, in the
// background (each is a request, and nothing waits for it).
func (wb *writeback) removedLanded(b *pendingBatch) {
	var gone []*locking.Delegation
	for _, rn := range b.removed {
		if rn.deleg != nil {
			wb.f.delegs.drop(rn.deleg)
			gone = append(gone, rn.deleg)
		}
	}
	if len(gone) == 0 {
		return
	}
	go func() {
		for _, d := range gone {
			ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), wb.f.co.Session().Lease()+time.Second)
			wb.f.co.Delegations.Drop(ctx, d)
			cancel()
		}
	}()
}

// drop forgets the state of delegation d, whose directory is gone.
func (ds *delegs) drop(d *locking.Delegation) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if st := ds.by[d.Ino]; st != nil && st.d == d {
		delete(ds.by, d.Ino)
	}
}
