package vfs

import (
	"context"
	"fmt"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// renameStored is a rename of a stored file (not a directory) between
// directories this mount holds for writing, made in memory (see
// writeback_remove.go): the old name is moved away, the new one made, or
// a stored file there replaced, in the batch. handled false: the
// synchronous path decides (after a settle).
//
// src and dst are the directories' states, which this mount holds for
// writing (see holdOf).
func (f *Mount) renameStored(ctx context.Context, from Dir, src *dirState, name string, to Dir, dst *dirState, newName string, noReplace bool) (handled bool, err error) {
	wb := f.wb
	if wb.pending(from.Ino()) || wb.pending(to.Ino()) {
		return false, nil
	}
	srcDir, ok1 := from.StorePath()
	dstDir, ok2 := to.StorePath()
	if !ok1 || !ok2 {
		return false, nil
	}
	srcPath, dstPath := store.Join(srcDir, name), store.Join(dstDir, newName)
	if store.CheckPath(srcPath) != nil || store.CheckPath(dstPath) != nil {
		return false, nil
	}
	e, ok := src.lookup(name)
	if !ok || e.absent || e.typ == store.TypeDir || wb.pending(e.ino) || !f.timesShown(from.Ino()) || !f.timesShown(to.Ino()) {
		return false, nil
	}
	// The file's attributes must be held too, to show its new ctime.
	attr, held := f.delegs.attr(from.Ino(), name, e.ino, nil)
	if !held {
		return false, nil
	}
	if srcPath == dstPath {
		return true, nil
	}
	target, ok := dst.lookup(newName)
	switch {
	case !ok:
		return false, nil
	case !target.absent && noReplace:
		return true, fmt.Errorf("%q: %w", dstPath, store.ErrExists)
	case !target.absent && target.ino == e.ino:
		return true, nil // two links to one inode: POSIX says do nothing
	case !target.absent && (target.typ == store.TypeDir || wb.pending(target.ino) ||
		!f.singleLink(to.Ino(), newName, target) || f.openState(target.ino) != nil):
		return false, nil // the journal replaces it, keeping an open file to its last close
	}
	// The strategy's shared locks of both names, held as leases until the
	// batch lands (see removeStored).
	var leases []*locking.Share
	defer func() {
		for _, h := range leases {
			if h != nil {
				h.End()
			}
		}
	}()
	for _, l := range []struct {
		dir        Dir
		path, name string
	}{{from, srcDir, srcPath}, {to, dstDir, dstPath}} {
		h, handled, err := f.leaseEntry(ctx, l.dir, l.path, l.name)
		if h == nil {
			return handled, err
		}
		leases = append(leases, h)
	}
	if wb.count.Load() >= 4*maxPending {
		if err := wb.flush(ctx); err != nil {
			return true, err
		}
	}
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if wb.unknownBatch() != nil || src.d.Revoked() || dst.d.Revoked() {
		return false, nil
	}
	// Looked at again under the gate: a flush or another call may have
	// run since.
	if now, ok := src.lookup(name); !ok || now.absent || now.ino != e.ino {
		return false, nil
	}
	if now, ok := dst.lookup(newName); !ok || now.absent != target.absent || now.ino != target.ino {
		return false, nil
	}
	t := now()
	wb.mu.Lock()
	if !wb.storedName(from.Ino(), srcPath, name) || !wb.storedName(to.Ino(), dstPath, newName) {
		wb.mu.Unlock()
		return false, nil
	}
	away := removedName{kind: moveAway, d: store.Dentry{Path: srcPath, Ino: e.ino, Type: e.typ}}
	if from.Ino() != to.Ino() {
		// The directory whose delegations hold its attributes follows it
		// once the batch has committed (locking.BatchSpec.Moves).
		away.move = store.ParentMove{Ino: e.ino, From: from.Ino(), To: to.Ino()}
	}
	wb.removed = append(wb.removed, away)
	if target.absent {
		d := store.Dentry{Path: dstPath, Ino: e.ino, Type: e.typ}
		d.Parent, d.Name = store.Split(dstPath)
		wb.names = append(wb.names, pendingName{dir: to.Ino(), d: d})
	} else {
		wb.removed = append(wb.removed, removedName{kind: replacement,
			d: store.Dentry{Path: dstPath, Ino: target.ino, Type: target.typ, Intent: store.Intent{NewIno: e.ino, NewType: e.typ}}})
	}
	wb.storedPaths[srcPath], wb.storedPaths[dstPath] = true, true
	wb.ctimes[e.ino] = t
	wb.touchLocked(from.Ino(), t)
	wb.touchLocked(to.Ino(), t)
	for i, l := range []Dir{from, to} {
		if wb.keepLease(l.Ino(), leases[i]) {
			leases[i] = nil
		}
	}
	wb.added(2)
	wb.mu.Unlock()
	src.changedHere(name, dirEntry{absent: true}, true, true)
	f.cache.InvalidatePath(srcPath)
	f.cache.InvalidatePath(dstPath)
	f.cache.InvalidateInode(e.ino)
	f.delegs.forgetAttr(e.ino)
	// Its attributes move with it, with the rename's ctime and, once the
	// batch lands, its new directory as Parents: this mount holds both
	// directories for writing, so nobody else sees them before.
	attr.Ctime, attr.Parents = t, []uint64{to.Ino()}
	dst.changedHere(newName, dirEntry{ino: e.ino, typ: e.typ, attr: &attr}, true, true)
	f.delegs.heldIn(e.ino, to.Ino())
	if !target.absent {
		f.cache.InvalidateInode(target.ino)
		f.delegs.forgetAttr(target.ino)
	}
	f.metrics.pendingRenames.Inc()
	return true, nil
}

// removeMoved is an unlink of name in directory parent that is the new
// name of a stored file renamed in memory (not over another file): the
// rename and the unlink become one removal of the old name, in memory
// (mdtest's rename-then-unlink, a temporary file renamed then deleted).
// It reports whether it did; false: the other paths decide.
func (f *Mount) removeMoved(parent Dir, name string) bool {
	wb := f.wb
	if wb == nil || wb.count.Load() == 0 {
		return false
	}
	st := f.delegs.state(parent.Ino())
	if st == nil || !st.d.Writable() {
		return false
	}
	e, ok := st.lookup(name)
	if !ok || e.absent || e.typ == store.TypeDir || !f.singleLink(parent.Ino(), name, e) || f.openState(e.ino) != nil {
		return false
	}
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if wb.unknown != nil || st.d.Revoked() {
		return false
	}
	wb.mu.Lock()
	k, pending := wb.pendingEntry(parent.Ino(), name)
	if !pending || wb.names[k].d.Ino != e.ino || wb.inodes[e.ino] != nil {
		wb.mu.Unlock()
		return false
	}
	src := -1
	for i, rn := range wb.removed {
		if rn.kind == moveAway && rn.d.Ino == e.ino {
			src = i
		}
	}
	if src < 0 {
		wb.mu.Unlock()
		return false
	}
	wb.dropLocked(k) // the new name: nothing of it is stored
	wb.removed[src].kind = removal
	delete(wb.ctimes, e.ino)
	wb.touchLocked(parent.Ino(), now())
	wb.mu.Unlock()
	st.changedHere(name, dirEntry{absent: true}, true, true)
	f.cache.InvalidateInode(e.ino)
	f.delegs.forgetAttr(e.ino)
	f.metrics.pendingRemoves.Inc()
	return true
}

// moved lists the files batch b renames into another directory.
func (b *pendingBatch) moved() []uint64 {
	var out []uint64
	for _, rn := range b.removed {
		if rn.kind == moveAway && rn.move.Ino != 0 {
			out = append(out, rn.move.Ino)
		}
	}
	return out
}
