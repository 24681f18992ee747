package vfs

// The flush of a pending batch: taken from the pending state, staged and
// committed as one journaled operation, rolled back and tried again when it
// fails, lost (and reported) when the mount is fenced off; a change of a
// stored name whose document is damaged is left out (and reported), as
// trying again cannot mend it; see writeback.go.

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"syscall"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// take moves the pending state into a batch for a flush. Caller holds
// gate.
func (wb *writeback) take(op string) *pendingBatch {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	b := &pendingBatch{op: op, names: wb.names, removed: wb.removed, ctimes: maps.Clone(wb.ctimes), dirs: map[uint64]dirDelta{}, born: wb.born}
	for _, ino := range wb.order {
		b.inodes = append(b.inodes, *wb.inodes[ino])
	}
	for ino, dd := range wb.dirs {
		b.dirs[ino] = *dd
	}
	// Held chunks are written at the first version of the file's current
	// data generation (each chunk is its own document, so one version
	// serves them all); a try that was rolled back moved the generation
	// on (see run1), above whatever that try left or its rollback deleted.
	sess := wb.f.co.Session().ID()
	for ino, chunks := range wb.data {
		st := store.Stamp{Version: store.DataVersion(wb.inodes[ino].Dgen, 1), Session: sess}
		for c, h := range chunks {
			b.data = append(b.data, store.WriteChunk(ino, c, h.data, st))
		}
	}
	for _, h := range wb.shares {
		b.shares = append(b.shares, h)
	}
	return b
}

// landed forgets a batch that became visible (or was lost): its inodes
// are no longer pending, and the directories' attributes are as stored.
// Caller holds gate.
func (wb *writeback) landed(b *pendingBatch, settle func()) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if settle != nil {
		settle()
	}
	wb.inodes = map[uint64]*store.Inode{}
	wb.order, wb.names = nil, nil
	wb.removed, wb.storedPaths, wb.ctimes = nil, map[string]bool{}, map[uint64]int64{}
	wb.dirs = map[uint64]*dirDelta{}
	wb.born = map[uint64]*locking.Delegation{}
	wb.data, wb.dataBytes = map[uint64]map[int64]heldChunk{}, 0
	for _, h := range wb.shares {
		h.End()
	}
	wb.shares = map[uint64]*locking.Share{}
	wb.under = nil
	wb.count.Store(0)
}

// hold takes the dirty chunks of of, a pending file, into the pending
// batch instead of writing them now (see maxHeldData), and leaves of as
// writeChunks would: chunks clean, counted. It reports whether it did.
// Caller holds of.mu.
func (wb *writeback) hold(ctx context.Context, of *openFile) bool {
	if wb == nil || len(of.dirty) == 0 || !wb.pending(of.ino) {
		return false
	}
	n := int64(0)
	for _, b := range of.dirty {
		n += int64(len(b))
	}
	wb.gate.Lock()
	defer wb.gate.Unlock()
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if _, ok := wb.inodes[of.ino]; !ok || wb.unknown != nil || wb.dataBytes+n > maxHeldData {
		return false
	}
	m := wb.data[of.ino]
	if m == nil {
		m = map[int64]heldChunk{}
		wb.data[of.ino] = m
	}
	cs := of.f.st.ChunkSize()
	for c, b := range of.dirty {
		if old, had := m[c]; had {
			wb.dataBytes -= int64(len(old.data))
		} else {
			of.newChunks++
		}
		m[c] = heldChunk{data: b}
		wb.dataBytes += int64(len(b))
		of.extent = max(of.extent, c*cs+int64(len(b)))
		of.rememberWritten(c, b, -1) // its version is the batch's, at its flush
	}
	of.dirty, of.dirtyLen = map[int64][]byte{}, 0
	return true
}

// heldChunk returns chunk c of ino if ino is pending: what its batch
// holds, or nothing (a hole: nothing of a pending file is stored).
func (wb *writeback) chunk(ino uint64, c int64) (data []byte, pending bool) {
	if wb == nil {
		return nil, false
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if _, ok := wb.inodes[ino]; !ok {
		return nil, false
	}
	return wb.data[ino][c].data, true
}

// flush runs one batch of everything pending; see the file's comment.
func (wb *writeback) flush(ctx context.Context) error {
	f := wb.f
	wb.gate.Lock()
	defer wb.gate.Unlock()
	if u := wb.unknownBatch(); u != nil {
		if _, err := wb.learnUntil(ctx, u); err != nil {
			return err
		}
	}
	if wb.count.Load() == 0 {
		wb.endIdleLeases()
		return nil
	}
	sess := f.co.Session()
	op, n := sess.BeginOp()
	defer sess.EndOp(n)
	b := wb.take(op)
	start := time.Now()
	err := wb.run1(ctx, sess, b)
	f.metrics.batch(len(b.names)+len(b.removed), time.Since(start), err)
	return err
}

// madeDir is a directory made in memory, with its delegation here and that
// delegation's change count when its batch was taken.
type madeDir struct {
	st      *dirState
	changes uint64
}

// run1 flushes batch b and settles the pending state by its outcome.
func (wb *writeback) run1(ctx context.Context, sess *locking.Session, b *pendingBatch) error {
	f := wb.f
	spec := locking.BatchSpec{Op: b.op, Inodes: b.inodes, Data: b.data}
	for _, pn := range b.names {
		spec.Names = append(spec.Names, pn.d)
	}
	for _, rn := range b.removed {
		switch rn.kind {
		case removal:
			spec.Removed = append(spec.Removed, rn.d)
		case moveAway:
			spec.Moved = append(spec.Moved, rn.d)
			if rn.move.Ino != 0 {
				spec.Moves = append(spec.Moves, rn.move)
			}
		case replacement:
			spec.Replaced = append(spec.Replaced, rn.d)
		}
	}
	// The directories that exist: their delegation fences the batch,
	// and their times and counts ride in the stage.
	var pls []parentLinks
	for ino, dd := range b.dirs {
		st := f.delegs.stateAny(ino)
		if st == nil || !st.d.Writable() || st.d.Lost() {
			// Its delegation went without a flush: only a lost session
			// does that, and then nothing of the batch may land. (Not
			// even looked at: the directory may be gone, removed by
			// another mount once it declared this one dead, and a read
			// of it would fail for ever while the batch's leases block
			// others; campaign of TestCrashFrozenCreatorLeavesNoOrphan.)
			wb.lose(b, fmt.Errorf("the write delegation of directory %d is gone: %w", ino, locking.ErrLeaseLost))
			return nil
		}
		spec.Under = append(spec.Under, st.d)
		op, pl, err := f.dirLinksOp(ctx, ino, dd.links, dd.t)
		if err != nil {
			return err // nothing sent: the batch stays pending
		}
		spec.Stage = append(spec.Stage, op)
		pls = append(pls, pl)
		if pl.counted {
			spec.DirLinks = append(spec.DirLinks, store.DirLinkChange{Ino: ino, Before: pl.after.Nlink - uint32(dd.links), After: pl.after.Nlink})
		}
	}
	for _, d := range b.born {
		if d.Lost() {
			wb.lose(b, fmt.Errorf("the write delegation of directory %d was made under a lost session: %w", d.Ino, locking.ErrLeaseLost))
			return nil
		}
		spec.Born = append(spec.Born, d)
	}
	// The ctimes of moved stored inodes (after the directories' writes,
	// whose results settleStage reads by place):
	// a rolled-back batch may leave one newer, as any failed rename may.
	for ino, t := range b.ctimes {
		spec.Stage = append(spec.Stage, store.SetCtime(ino, t))
	}
	var stageRes []store.BulkResult
	spec.Staged = func(res []store.BulkResult) { stageRes = res }
	var unmoved []uint64
	spec.Unmoved = func(inos []uint64) { unmoved = inos }
	// The batch's directories whose delegation here held nothing of
	// their attributes but the pending inode: once stored, the inode
	// written is theirs (the gate keeps this mount from changing them
	// meanwhile; changes counts anything else).
	var created []store.Version
	spec.Created = func(vers []store.Version) { created = vers }
	made := map[uint64]madeDir{}
	for _, a := range b.inodes {
		if a.Type == store.TypeDir {
			if st := f.delegs.state(a.Ino); st != nil {
				made[a.Ino] = madeDir{st, st.changeCount()}
			}
		}
	}
	var damaged []damagedName
	spec.Damaged = func(d store.Dentry, err error) { damaged = append(damaged, damagedName{d, err}) }
	err := f.co.Journal.Flush(ctx, sess, spec)
	switch {
	case err == nil:
		defer wb.droppedDamaged(damaged)
	case errors.Is(err, locking.ErrLeaseLost):
		// Lost, as in a crash: the next fsync says so; the call that
		// asked for this flush goes on (what it depends on may be gone,
		// which it finds out itself).
		wb.lose(b, err)
		return nil
	case errors.Is(err, locking.ErrBatchUnknown):
		wb.mu.Lock()
		wb.unknown = b
		wb.mu.Unlock()
		settled, lerr := wb.learnUntil(ctx, b)
		if lerr == nil && settled {
			wb.droppedDamaged(damaged) // landed, or lost (and told so)
		}
		if lerr == nil && !settled {
			// Still pending: the caller has not got what it asked for.
			lerr = fmt.Errorf("batch %s: %v; rolled back: %w", b.op, err, errRolledBack)
		}
		return lerr
	default:
		// Rolled back (the journal settled the try for good before it
		// returned): nothing landed, and everything stays pending for
		// the next try.
		wb.rolledBack(b)
		return err
	}
	wb.landed(b, func() {
		wb.settleStage(ctx, pls, stageRes)
		for i, a := range b.inodes {
			if d, ok := made[a.Ino]; ok && i < len(created) {
				a.Ver = created[i]
				d.st.learnSelf(a, d.changes)
			}
		}
	})
	f.delegs.unhold(unmoved)
	wb.removedLanded(b)
	return nil
}

// settleStage records what the stage wrote of directories: their
// attributes as stored now. (Born delegations' documents landed with the
// batch: locking.BatchSpec.Born.) Caller holds mu.
func (wb *writeback) settleStage(ctx context.Context, pls []parentLinks, res []store.BulkResult) {
	f := wb.f
	for i, pl := range pls {
		r := store.BulkResult{Err: errors.New("stage result unknown")}
		if i < len(res) {
			r = res[i]
		}
		f.settleDirLinks(ctx, pl, r, true)
	}
}

// errRolledBack: a batch was rolled back and stays pending.
var errRolledBack = errors.New("the batch stays pending")

// rolledBack keeps batch b, rolled back for good, pending for the next
// try. Born delegations' documents may have landed in the stage; the next
// try overwrites them. Chunks of its files may have landed too, and the
// rollback deleted them (and whatever else the file's size covers) at the
// generation after the file's: the next try writes them at the one after
// that, which every tombstone the rollback left is below. Caller holds
// gate.
func (wb *writeback) rolledBack(b *pendingBatch) {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	for _, staged := range b.inodes {
		a := wb.inodes[staged.Ino]
		if a != nil && a.Type == store.TypeFile && (staged.Size > 0 || wb.data[staged.Ino] != nil) {
			a.Dgen += 2
		}
	}
}

// damagedName is a stored name a batch changed in memory whose document
// was found damaged: its change was left out of the batch.
type damagedName struct {
	d   store.Dentry
	err error
}

// droppedDamaged reports the changes a batch that went on left out, their
// stored names being damaged (locking.BatchSpec.Damaged): each damaged
// document is logged once, with its id, and the change is a failed
// write-back, as a lost batch's (errseq.go): every open description of
// the inodes it touched (the name's, and the one a rename moved onto it)
// hears EIO at its next fsync or close, and every description's next
// fsync does (the mount made durable less than it said). Caller holds
// gate.
func (wb *writeback) droppedDamaged(damaged []damagedName) {
	if len(damaged) == 0 {
		return
	}
	f := wb.f
	var touched []uint64
	for _, dn := range damaged {
		f.NoteDamaged("flushing a pending batch", dn.err)
		touched = append(touched, dn.d.Ino)
		if dn.d.Intent.NewIno != 0 {
			touched = append(touched, dn.d.Intent.NewIno)
		}
	}
	err := fmt.Errorf("a pending change of %q was dropped: %v: %w", damaged[0].d.Path, damaged[0].err, syscall.EIO)
	f.errs.lose(err, nil, touched, f.openInodes())
}

// openInodes returns the inodes open now (errSeq.lose keeps their marks).
func (f *Mount) openInodes() map[uint64]bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	open := make(map[uint64]bool, len(f.open))
	for ino := range f.open {
		open[ino] = true
	}
	return open
}

// lose drops batch b, which can never land (this mount was fenced): what
// it made is lost, as in a crash. Every open file description it touched
// is told, at its next fsync or close (errseq.go); the files it made are
// gone, and their descriptions fail from now on. Caller holds gate.
func (wb *writeback) lose(b *pendingBatch, err error) {
	wb.f.log.Error("a pending batch was lost: this mount lost its delegations (it was cut off past its lease)",
		"entries", len(b.names), "err", err)
	wb.mu.Lock()
	wb.unknown = nil
	wb.mu.Unlock()
	wb.landed(b, nil)
	for _, d := range b.born {
		wb.f.co.Delegations.Landed(d, store.BulkResult{Err: err})
	}
	made := make([]uint64, 0, len(b.inodes))
	for _, a := range b.inodes {
		made = append(made, a.Ino)
	}
	var touched []uint64
	for ino := range b.dirs {
		touched = append(touched, ino)
	}
	for ino := range b.ctimes {
		touched = append(touched, ino)
	}
	for _, rn := range b.removed {
		touched = append(touched, rn.d.Ino)
	}
	wb.f.errs.lose(lostErr(len(b.names)+len(b.removed), err), made, touched, wb.f.openInodes())
}

// learnUntil learns the outcome of batch u, trying until ctx ends or this
// mount's session is lost (then recovery settles it, and it is lost to
// us). settled: u is no longer pending (it landed, or was lost); false
// with no error: it was rolled back, and is pending again. Caller holds
// gate.
func (wb *writeback) learnUntil(ctx context.Context, u *pendingBatch) (settled bool, err error) {
	for attempt := 0; ; attempt++ {
		if err := wb.f.co.Session().Check(); err != nil {
			wb.lose(u, err)
			return true, nil
		}
		settled, err := wb.learn(ctx, u)
		if err == nil || ctx.Err() != nil {
			return settled, err
		}
		store.Backoff(ctx, attempt, 100*time.Millisecond)
	}
}

// learn settles a batch whose outcome was unknown: visible, rolled back
// for good (pending again, for the next try), or lost (this mount was
// declared dead, and whoever did settles it). Caller holds gate.
func (wb *writeback) learn(ctx context.Context, u *pendingBatch) (settled bool, err error) {
	visible, err := wb.f.co.Journal.SettleBatch(ctx, wb.f.co.Session(), u.op)
	if errors.Is(err, locking.ErrLeaseLost) {
		wb.lose(u, err)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if visible {
		// It landed (the sweeper or recovery finishes it): the
		// directories' attributes are read again.
		wb.landed(u, func() {
			for ino := range u.dirs {
				wb.f.cache.InvalidateInode(ino)
				wb.f.delegs.forgetAttr(ino)
			}
			for _, d := range u.born {
				wb.f.co.Delegations.Landed(d, store.BulkResult{})
			}
		})
		wb.f.delegs.unhold(u.moved()) // whether their directory was recorded is not known
		wb.removedLanded(u)
	} else {
		// Rolled back: still pending, flushed again.
		wb.rolledBack(u)
	}
	wb.mu.Lock()
	wb.unknown = nil
	wb.mu.Unlock()
	return visible, nil
}

// settleForRecall flushes before write delegation d is given back,
// trying again while this mount's session lives: giving it back with
// entries pending would let others miss them.
func (f *Mount) settleForRecall(ctx context.Context, d *locking.Delegation) {
	// d is revoked already, but a change that found it valid may still be
	// adding its entry under the gate, where settle's look at the pending
	// count does not wait: wait for it, so that the flush takes it. Any
	// change after this one sees d revoked and adds nothing under it.
	// (Without this wait, a create racing a recall stayed pending under a
	// delegation given back, and its batch was lost.)
	f.wb.gate.Lock()
	f.wb.gate.Unlock() //nolint:staticcheck // an empty critical section: a barrier
	for attempt := 0; ; attempt++ {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*f.st.Timeout()+f.opts.LockTimeout)
		err := f.settle(fctx)
		cancel()
		if err == nil || f.co.Session().Check() != nil {
			return
		}
		f.log.Warn("flushing before giving back a write delegation failed; retrying", "dir", d.Path, "err", err)
		store.Backoff(context.WithoutCancel(ctx), attempt, time.Second)
	}
}
