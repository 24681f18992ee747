package vfs

// Calls made in memory in a write-delegated directory: a create, and the
// pending names that later calls find, remove and rename; see writeback.go.

import (
	"context"
	"fmt"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// createPending makes name in directory parent, which this mount holds
// for writing (st, see holdOf), in memory if every name is known there
// (handled false: the caller takes the synchronous path, after a settle).
func (f *Mount) createPending(ctx context.Context, st *dirState, parent Dir, name string, e Entry) (sn store.Node, handled bool, err error) {
	wb := f.wb
	dir, ok := parent.StorePath()
	if !ok {
		return store.Node{}, false, nil
	}
	path := store.Join(dir, name)
	if store.CheckPath(path) != nil {
		return store.Node{}, false, nil
	}
	if wb.count.Load() >= 4*maxPending {
		if err := wb.flush(ctx); err != nil {
			return store.Node{}, true, err
		}
	}
	pattr, ok := wb.overlay(parent.Ino(), func() (store.Inode, bool) { return f.delegs.selfAttr(parent.Ino(), nil) })
	if !ok {
		return store.Node{}, false, nil
	}
	// The strategy's shared locks of the entry, held as a lease until
	// the batch lands: the same that a create made at once holds while it
	// writes, so that renames of ancestors by other mounts wait for it.
	// An entry of a pending directory is covered by the lease its parent's
	// entry holds in the same batch.
	var lease *locking.Share
	if !wb.pending(parent.Ino()) {
		h, handled, err := f.leaseEntry(ctx, parent, dir, path)
		if h == nil {
			return store.Node{}, handled, err // the global strategy has no shared part
		}
		lease = h
	}
	keep := false
	defer func() {
		if lease != nil && !keep {
			lease.End()
		}
	}()
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if wb.unknownBatch() != nil {
		// A batch's outcome is still unknown: nothing is added until it
		// is learnt (the synchronous path's settle reports it).
		return store.Node{}, false, nil
	}
	if st.d.Revoked() {
		// Recalled since we looked: the recall's flush may have run
		// already, so nothing may be added under it.
		return store.Node{}, false, nil
	}
	if lease == nil && !wb.pending(parent.Ino()) {
		// The directory was pending, and its batch landed since we
		// looked: no lease covers the name, and a rename of an ancestor
		// may have moved it already (its path would be stale).
		return store.Node{}, false, nil
	}
	if now, ok := parent.StorePath(); !ok || now != dir {
		return store.Node{}, false, nil // moved since we looked
	}
	known, ok := st.lookup(name)
	switch {
	case !ok:
		return store.Node{}, false, nil // not known complete
	case !known.absent:
		return store.Node{}, true, fmt.Errorf("%q: %w", path, store.ErrExists)
	case wb.storedPending(path):
		return store.Node{}, false, nil // its removal lands first
	}
	typ, mode, uid, gid := e.Type, e.Mode, e.Uid, e.Gid
	if pattr.Mode&syscall.S_ISGID != 0 {
		gid = pattr.Gid
		if typ == store.TypeDir {
			mode |= syscall.S_ISGID
		}
	}
	t := now()
	a := NewInode(Entry{Type: typ, Mode: mode, Uid: uid, Gid: gid, Target: e.Target, Rdev: e.Rdev}, parent.Ino(), t)
	if err := store.CreateInode(a).Err(); err != nil {
		return store.Node{}, true, err
	}
	d := NewDentry(path, a)
	if err := store.CreateDentry(d).Err(); err != nil {
		return store.Node{}, true, err
	}
	d.Parent, d.Name = store.Split(path)
	subdirs := 0
	if typ == store.TypeDir {
		subdirs = 1
	}
	var born *locking.Delegation
	if typ == store.TypeDir {
		born = f.co.Delegations.BornInBatch(a.Ino, path)
	}
	wb.mu.Lock()
	c := a
	wb.inodes[a.Ino] = &c
	wb.order = append(wb.order, a.Ino)
	wb.names = append(wb.names, pendingName{dir: parent.Ino(), d: d})
	if p, ok := wb.inodes[parent.Ino()]; ok {
		if p.DirLinksCounted() {
			p.Nlink += uint32(subdirs)
		}
		p.Mtime, p.Ctime = t, t
	} else {
		dd := wb.dirs[parent.Ino()]
		if dd == nil {
			dd = &dirDelta{}
			wb.dirs[parent.Ino()] = dd
		}
		dd.links += subdirs
		dd.t = t
	}
	if born != nil {
		wb.born[a.Ino] = born
	}
	if lease != nil {
		keep = wb.keepLease(parent.Ino(), lease)
	}
	wb.added(1)
	wb.mu.Unlock()
	st.changedHere(name, dirEntry{ino: a.Ino, typ: typ}, true, true)
	if born != nil {
		f.delegs.born(born)
	} else {
		f.delegs.learnAttr(st, name, a)
	}
	f.metrics.pendingCreates.Inc()
	return store.Node{Dentry: d, Attr: a}, true, nil
}

// pendingEntry finds the pending name of directory dir called name (its
// index in names), if any. Caller holds mu.
func (wb *writeback) pendingEntry(dir uint64, name string) (int, bool) {
	for i := len(wb.names) - 1; i >= 0; i-- {
		pn := wb.names[i]
		if pn.dir == dir && pn.d.Name == name {
			return i, true
		}
	}
	return 0, false
}

// dropLocked forgets pending entry i (a file: nothing was stored of it)
// and its data. Caller holds gate and mu.
func (wb *writeback) dropLocked(i int) {
	pn := wb.names[i]
	wb.names = append(wb.names[:i:i], wb.names[i+1:]...)
	delete(wb.inodes, pn.d.Ino)
	for k, ino := range wb.order {
		if ino == pn.d.Ino {
			wb.order = append(wb.order[:k:k], wb.order[k+1:]...)
			break
		}
	}
	for _, h := range wb.data[pn.d.Ino] {
		wb.dataBytes -= int64(len(h.data))
	}
	delete(wb.data, pn.d.Ino)
	wb.count.Add(-1)
}

// touchLocked sets the times of directory dir, pending or not, to t.
// Caller holds mu.
func (wb *writeback) touchLocked(dir uint64, t int64) {
	if p, ok := wb.inodes[dir]; ok {
		p.Mtime, p.Ctime = t, t
		return
	}
	dd := wb.dirs[dir]
	if dd == nil {
		dd = &dirDelta{}
		wb.dirs[dir] = dd
	}
	dd.t = t
}

// pendingFile reports whether name in directory dir is a file made in
// memory and not stored yet, which no other mount can know: the calls
// below change it in memory too. Unless open is allowed (a rename keeps
// the inode), a file open here is left to the synchronous path, which
// keeps it alive to its last close.
func (f *Mount) pendingFile(parent Dir, name string, open bool) (*dirState, bool) {
	if f.wb == nil || f.wb.count.Load() == 0 {
		return nil, false
	}
	st := f.delegs.state(parent.Ino())
	if st == nil || !st.d.Writable() {
		return nil, false
	}
	f.wb.mu.Lock()
	i, ok := f.wb.pendingEntry(parent.Ino(), name)
	var pn pendingName
	if ok {
		pn = f.wb.names[i]
	}
	f.wb.mu.Unlock()
	if !ok || pn.d.Type == store.TypeDir || !f.wb.pending(pn.d.Ino) || !open && f.openState(pn.d.Ino) != nil {
		return nil, false // a stored inode moved here in memory is not pending
	}
	return st, true
}

// removePending is unlink of a file made in memory: it is forgotten
// (handled false: the synchronous path decides).
func (f *Mount) removePending(parent Dir, name string) bool {
	st, ok := f.pendingFile(parent, name, false)
	if !ok {
		return false
	}
	wb := f.wb
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if st.d.Revoked() || wb.unknown != nil {
		return false
	}
	wb.mu.Lock()
	i, ok := wb.pendingEntry(parent.Ino(), name)
	ok = ok && wb.names[i].d.Type != store.TypeDir && wb.inodes[wb.names[i].d.Ino] != nil
	if ok {
		wb.dropLocked(i)
		wb.touchLocked(parent.Ino(), now())
	}
	wb.mu.Unlock()
	if ok {
		st.changedHere(name, dirEntry{absent: true}, true, true)
	}
	return ok
}

// renamePending is a rename of a file made in memory to a name in a
// directory this mount writes in memory too, under a lease (pending, or
// with a pending entry of its own): it happens in memory. A pending file
// at the destination is replaced. handled false: the synchronous path
// decides.
// dst is the destination's state, which this mount holds for writing
// (see holdOf).
func (f *Mount) renamePending(from Dir, name string, to Dir, dst *dirState, newName string, noReplace bool) (handled bool, err error) {
	src, ok := f.pendingFile(from, name, true)
	if !ok {
		return false, nil
	}
	dstDir, ok := to.StorePath()
	if !ok || store.CheckPath(store.Join(dstDir, newName)) != nil {
		return false, nil
	}
	wb := f.wb
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if src.d.Revoked() || dst.d.Revoked() || wb.unknown != nil {
		return false, nil
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	_, dstPending := wb.inodes[to.Ino()]
	if _, leased := wb.shares[to.Ino()]; !dstPending && !leased {
		return false, nil // no lease covers the new name
	}
	i, ok := wb.pendingEntry(from.Ino(), name)
	if !ok || wb.names[i].d.Type == store.TypeDir || wb.inodes[wb.names[i].d.Ino] == nil {
		return false, nil
	}
	target, known := dst.lookup(newName)
	switch {
	case !known || wb.storedPaths[store.Join(dstDir, newName)]:
		return false, nil
	case !target.absent && noReplace:
		return true, fmt.Errorf("%q: %w", newName, store.ErrExists)
	case !target.absent:
		k, pending := wb.pendingEntry(to.Ino(), newName)
		if !pending || wb.names[k].d.Type == store.TypeDir || wb.inodes[wb.names[k].d.Ino] == nil || f.openState(wb.names[k].d.Ino) != nil {
			return false, nil // a stored entry, or one open here: the journal replaces it
		}
		if target.ino == wb.names[i].d.Ino {
			return true, nil // the same file
		}
		wb.dropLocked(k)
		if k < i {
			i--
		}
	}
	pn := wb.names[i]
	path := store.Join(dstDir, newName)
	moved := NewDentry(path, *wb.inodes[pn.d.Ino])
	moved.Parent, moved.Name = store.Split(path)
	// Moved to the end: the batch keeps the order of the calls.
	wb.names = append(wb.names[:i:i], wb.names[i+1:]...)
	wb.names = append(wb.names, pendingName{dir: to.Ino(), d: moved})
	t := now()
	// Not stored yet: its inode lands with its new directory in it.
	wb.inodes[pn.d.Ino].Ctime, wb.inodes[pn.d.Ino].Parents = t, []uint64{to.Ino()}
	wb.touchLocked(from.Ino(), t)
	wb.touchLocked(to.Ino(), t)
	src.changedHere(name, dirEntry{absent: true}, true, true)
	dst.changedHere(newName, dirEntry{ino: pn.d.Ino, typ: pn.d.Type}, true, true)
	f.delegs.forgetAttr(pn.d.Ino)
	return true, nil
}
