package fs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// Write delegations (see locking.Delegations): a directory made by this
// mount is born write-delegated to it. Nobody else can change it, or read
// its entries, without recalling the delegation first, so what this mount
// makes in it (create, mkdir, symlink, mknod), and the attributes of what
// it made (chmod, utimes, sizes, xattrs), stay in memory, in the pending
// batch, and every call that does only that returns without a round trip.
//
// A batch is flushed as one journaled operation (locking.Journal.Flush):
// other mounts see all of it or none of it, and the batches of a mount
// land in the order they were made, so another mount, and what survives a
// crash, always shows a prefix of this mount's calls. It is flushed
//   - every Options.FlushInterval, and at once past maxPending entries;
//   - before anything else this mount changes in the store (an unlink, a
//     rename, a link, a change of an inode that is not pending, a create
//     outside a write-delegated directory): so every change lands after
//     the pending ones it may depend on;
//   - on fsync and fsyncdir of anything, and on unmount (syncfs and
//     sync(2) never reach a FUSE filesystem: the kernel sends SYNCFS to
//     virtiofs only, so `sync` alone waits for the flush interval);
//   - when a delegation is recalled (another mount wants to read or
//     change a directory this mount writes), before it is given back.
//
// A crash loses what was not flushed: at most the calls of the last
// flush interval, never a call that returned from fsync. A mount fenced
// off (declared dead while frozen) loses its pending batch the same way;
// every open file description it touched hears of it (errseq.go).
//
// A batch that fails is rolled back and tried again, and what a process
// was told is done must survive that. So nothing of a pending file is
// ever stored outside its batch: its data goes in the batch's stage
// (held, up to maxHeldData), or, when it does not fit, the batch lands
// first and the data is written as any stored file's (writeChunks). A
// rollback deletes the batch's inodes and their chunks, and those chunks
// can then only be the stage's own. And a batch is tried again only once
// the try before it is settled for good (its record DONE: rolled back, or
// fenced off before it could start): a try left half done, rolled back
// later by this mount's recovery, would delete the inodes the next try
// landed.

const (
	// DefaultFlushInterval bounds how long a call made in memory stays
	// only in memory.
	DefaultFlushInterval = 200 * time.Millisecond
	// maxPending: past this many pending entries a batch is flushed at
	// once, and creates wait for it past maxPending*4.
	maxPending = 2000
	// maxHeldData bounds the data of pending files held for their batch
	// (sent in its stage, so that a file and its bytes land together);
	// past it, a file's chunks are written when it is closed, as others.
	maxHeldData = 16 << 20
)

// heldChunk is a chunk of a pending file, written with its batch.
type heldChunk struct {
	data []byte
}

// pendingName is one name made in memory.
type pendingName struct {
	dir uint64 // its directory
	d   store.Dentry
}

// dirDelta is what pending entries change in a directory that exists in
// the store: subdirectories added, and its new times.
type dirDelta struct {
	links int
	t     int64
}

// writeback is the pending batch of this mount.
type writeback struct {
	f *FS
	// gate is held by a flush for its whole run, and by every change of
	// the pending state: a change waits for the flush under way.
	gate sync.Mutex
	mu   sync.Mutex // protects the fields below; never held across a request
	// inodes: the pending inodes, in the order made.
	inodes map[uint64]*store.Inode
	order  []uint64
	names  []pendingName
	// removed: stored names removed, moved away or replaced in memory
	// (see writeback_remove.go), in call order; storedPaths: their paths,
	// and the new names of stored inodes moved in memory, which nothing
	// else may change before the batch lands (a path is one document:
	// a batch holds one change of it).
	removed     []removedName
	storedPaths map[string]bool
	// ctimes: the new ctimes of stored inodes moved in memory.
	ctimes map[uint64]int64
	// dirs: deltas of directories that exist in the store.
	dirs map[uint64]*dirDelta
	// born: write delegations of directories made in memory.
	born map[uint64]*locking.Delegation
	// data: chunks of pending files, and their total size.
	data      map[uint64]map[int64]heldChunk
	dataBytes int64
	// shares are the leases of the strategy's shared locks that the
	// pending entries are made under, one per directory that exists in
	// the store (an entry of a pending directory is covered by its
	// parent's): a rename of an ancestor by another mount, which waits
	// for them, finds the batch landed first (a revoked lease flushes).
	shares map[uint64]*locking.Share
	// unknown: a batch whose outcome is not known yet, with what it held;
	// the next flush learns it before it goes on.
	unknown *pendingBatch

	count    atomic.Int64 // len(names) + len(removed), read without mu
	kick     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// pendingBatch is a batch taken for a flush.
type pendingBatch struct {
	op      string
	inodes  []store.Inode
	names   []pendingName
	removed []removedName
	ctimes  map[uint64]int64
	dirs    map[uint64]dirDelta
	born    map[uint64]*locking.Delegation
	data    []store.BulkOp
	shares  []*locking.Share
}

func newWriteback(f *FS) *writeback {
	wb := &writeback{f: f, inodes: map[uint64]*store.Inode{}, storedPaths: map[string]bool{}, ctimes: map[uint64]int64{}, dirs: map[uint64]*dirDelta{}, data: map[uint64]map[int64]heldChunk{}, shares: map[uint64]*locking.Share{},
		born: map[uint64]*locking.Delegation{}, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go wb.run()
	return wb
}

// run flushes every flush interval, or at once when kicked.
func (wb *writeback) run() {
	defer close(wb.done)
	t := time.NewTicker(wb.f.opts.FlushInterval)
	defer t.Stop()
	// A lease the batch holds that another mount waits for (see shares)
	// is looked for more often than batches are flushed.
	revoked := time.NewTicker(min(wb.f.opts.FlushInterval, 100*time.Millisecond))
	defer revoked.Stop()
	for {
		select {
		case <-wb.stop:
			return
		case <-t.C:
		case <-wb.kick:
		case <-revoked.C:
			if !wb.leaseWanted() {
				continue
			}
		}
		if wb.count.Load() == 0 && wb.unknownBatch() == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), 2*wb.f.st.Timeout()+wb.f.opts.LockTimeout)
		if err := wb.flush(ctx); err != nil {
			wb.f.log.Warn("flushing the pending batch failed; retrying", "err", err)
		}
		cancel()
	}
}

// leaseWanted reports whether another mount waits for a lease the pending
// batch holds.
func (wb *writeback) leaseWanted() bool {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	for _, h := range wb.shares {
		if h.Revoked() {
			return true
		}
	}
	return false
}

func (wb *writeback) unknownBatch() *pendingBatch {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	return wb.unknown
}

// close stops the background flushes (after the last flush, at unmount).
func (wb *writeback) close() {
	if wb == nil {
		return
	}
	wb.stopOnce.Do(func() { close(wb.stop) })
	<-wb.done
}

// settleTries bounds how often settle tries a batch that was rolled back
// (an Elasticsearch hiccup: a lost answer, a 429) before it reports the
// failure; the batch stays pending either way.
const settleTries = 3

// settle flushes whatever is pending: the caller is about to change the
// store, or must make everything durable. Nothing pending costs nothing.
// A batch rolled back is tried again at once, a few times: nothing of it
// is visible, and one hiccup should not fail the call that needs it.
func (f *FS) settle(ctx context.Context) error {
	wb := f.wb
	for attempt := 0; ; attempt++ {
		if wb == nil || (wb.count.Load() == 0 && wb.unknownBatch() == nil) {
			return nil
		}
		err := wb.flush(ctx)
		if err == nil || attempt+1 >= settleTries || ctx.Err() != nil {
			return err
		}
		f.log.Warn("flushing the pending batch failed; trying again", "err", err)
		store.Backoff(ctx, attempt+6, time.Second)
	}
}

// settleAll is settle at unmount, the last chance of what is pending: it
// tries again until the batch lands, is lost, or ctx ends.
func (f *FS) settleAll(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		err := f.settle(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		store.Backoff(ctx, attempt+8, 2*time.Second)
	}
}

// sync is settle for fsync and fsyncdir through description since, open
// on ino: it also reports what the description has not reported yet of a
// write-back error, of ino or of a batch lost (see errseq.go).
func (f *FS) sync(ctx context.Context, ino uint64, since *errSince) error {
	if err := f.settle(ctx); err != nil {
		return err
	}
	return f.errs.check(ino, since, true)
}

// inode returns a pending inode.
func (wb *writeback) inode(ino uint64) (store.Inode, bool) {
	if wb == nil {
		return store.Inode{}, false
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	a, ok := wb.inodes[ino]
	if !ok {
		return store.Inode{}, false
	}
	c := *a
	c.Xattrs = maps.Clone(a.Xattrs)
	return c, true
}

// pending reports whether ino is pending.
func (wb *writeback) pending(ino uint64) bool {
	if wb == nil {
		return false
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	_, ok := wb.inodes[ino]
	return ok
}

// touches reports whether the pending state changes directory ino: the
// directory itself, or entries in it (every pending change of a
// directory's entries moves its times, so it is in dirs or inodes).
func (wb *writeback) touches(ino uint64) bool {
	if wb == nil || wb.count.Load() == 0 {
		return false
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	_, pending := wb.inodes[ino]
	return pending || wb.dirs[ino] != nil
}

// settleDir makes what this mount changed in memory in directory ino land
// before the store is read for it: a read that no delegation answers (its
// write delegation is being recalled, and its flush may be under way)
// would otherwise miss this mount's own calls.
func (f *FS) settleDir(ctx context.Context, ino uint64) error {
	if !f.wb.touches(ino) {
		return nil
	}
	return f.settle(ctx)
}

// errOutcomeUnknown: the batch that holds a pending inode has an outcome
// not learnt yet (see update).
var errOutcomeUnknown = errors.New("the outcome of the pending batch is not known yet")

// update applies change to a pending inode in memory (ok false: ino is
// not pending; errOutcomeUnknown: settle, then ask again).
func (wb *writeback) update(ino uint64, change func(*store.Inode) error) (a store.Inode, ok bool, err error) {
	if wb == nil || wb.count.Load() == 0 {
		return store.Inode{}, false, nil
	}
	wb.gate.Lock()
	defer wb.gate.Unlock()
	wb.mu.Lock()
	defer wb.mu.Unlock()
	p, ok := wb.inodes[ino]
	if !ok {
		return store.Inode{}, false, nil
	}
	if wb.unknown != nil {
		// The batch may have landed, and then the inode is no longer
		// pending: the caller learns the outcome (settle) and asks again.
		return store.Inode{}, true, errOutcomeUnknown
	}
	c := *p
	c.Xattrs = maps.Clone(p.Xattrs)
	if err := change(&c); err != nil {
		return store.Inode{}, true, err
	}
	*p = c
	out := c
	out.Xattrs = maps.Clone(c.Xattrs)
	return out, true, nil
}

// overlay returns directory ino's attributes as this mount shows them:
// base (as stored), with what the pending entries change.
func (wb *writeback) overlay(ino uint64, base func() (store.Inode, bool)) (store.Inode, bool) {
	if wb == nil {
		return base()
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if p, ok := wb.inodes[ino]; ok {
		return *p, true
	}
	a, ok := base()
	if !ok {
		return a, false
	}
	if dd := wb.dirs[ino]; dd != nil {
		a, _ = store.WithDirLinks(a, dd.links, dd.t)
		if !a.DirLinksCounted() {
			a.Mtime, a.Ctime = max(a.Mtime, dd.t), max(a.Ctime, dd.t)
		}
	}
	return a, true
}

// createPending makes name in directory parent in memory, if parent is
// write-delegated here with every name known (handled false: the caller
// takes the synchronous path, after a settle).
func (f *FS) createPending(ctx context.Context, parent dirRef, name string, e Entry) (sn store.Node, handled bool, err error) {
	wb := f.wb
	if wb == nil {
		return store.Node{}, false, nil
	}
	st := f.delegs.state(parent.ino())
	if st == nil || !st.d.Writable() {
		return store.Node{}, false, nil
	}
	dir, ok := parent.path()
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
	pattr, ok := wb.overlay(parent.ino(), func() (store.Inode, bool) { return f.delegs.selfAttr(parent.ino(), nil) })
	if !ok {
		return store.Node{}, false, nil
	}
	// The strategy's shared locks of the entry, held as a lease until
	// the batch lands: the same that a create made at once holds while it
	// writes, so that renames of ancestors by other mounts wait for it.
	// An entry of a pending directory is covered by the lease its parent's
	// entry holds in the same batch.
	var lease *locking.Share
	if !wb.pending(parent.ino()) {
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
	if lease == nil && !wb.pending(parent.ino()) {
		// The directory was pending, and its batch landed since we
		// looked: no lease covers the name, and a rename of an ancestor
		// may have moved it already (its path would be stale).
		return store.Node{}, false, nil
	}
	if now, ok := parent.path(); !ok || now != dir {
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
	a := NewInode(Entry{Type: typ, Mode: mode, Uid: uid, Gid: gid, Target: e.Target, Rdev: e.Rdev}, parent.ino(), t)
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
	wb.names = append(wb.names, pendingName{dir: parent.ino(), d: d})
	if p, ok := wb.inodes[parent.ino()]; ok {
		if p.DirLinksCounted() {
			p.Nlink += uint32(subdirs)
		}
		p.Mtime, p.Ctime = t, t
	} else {
		dd := wb.dirs[parent.ino()]
		if dd == nil {
			dd = &dirDelta{}
			wb.dirs[parent.ino()] = dd
		}
		dd.links += subdirs
		dd.t = t
	}
	if born != nil {
		wb.born[a.Ino] = born
	}
	if lease != nil {
		keep = wb.keepLease(parent.ino(), lease)
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
		of.remember(c, b)
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
		if st == nil || !st.d.Writable() {
			// Its delegation went without a flush: only a lost session
			// does that, and then nothing of the batch may land.
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
	err := f.co.Journal.Flush(ctx, sess, spec)
	switch {
	case err == nil:
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
	f := wb.f
	f.mu.Lock()
	open := make(map[uint64]bool, len(f.open))
	for ino := range f.open {
		open[ino] = true
	}
	f.mu.Unlock()
	f.errs.lose(lostErr(len(b.names)+len(b.removed), err), made, touched, open)
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
func (f *FS) settleForRecall(ctx context.Context, d *locking.Delegation) {
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
func (f *FS) pendingFile(parent dirRef, name string, open bool) (*dirState, bool) {
	if f.wb == nil || f.wb.count.Load() == 0 {
		return nil, false
	}
	st := f.delegs.state(parent.ino())
	if st == nil || !st.d.Writable() {
		return nil, false
	}
	f.wb.mu.Lock()
	i, ok := f.wb.pendingEntry(parent.ino(), name)
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
func (f *FS) removePending(parent dirRef, name string) bool {
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
	i, ok := wb.pendingEntry(parent.ino(), name)
	ok = ok && wb.names[i].d.Type != store.TypeDir && wb.inodes[wb.names[i].d.Ino] != nil
	if ok {
		wb.dropLocked(i)
		wb.touchLocked(parent.ino(), now())
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
func (f *FS) renamePending(from dirRef, name string, to dirRef, newName string, noReplace bool) (handled bool, err error) {
	src, ok := f.pendingFile(from, name, true)
	if !ok {
		return false, nil
	}
	dst := f.delegs.state(to.ino())
	dstDir, ok := to.path()
	if dst == nil || !dst.d.Writable() || !ok || store.CheckPath(store.Join(dstDir, newName)) != nil {
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
	_, dstPending := wb.inodes[to.ino()]
	if _, leased := wb.shares[to.ino()]; !dstPending && !leased {
		return false, nil // no lease covers the new name
	}
	i, ok := wb.pendingEntry(from.ino(), name)
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
		k, pending := wb.pendingEntry(to.ino(), newName)
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
	wb.names = append(wb.names, pendingName{dir: to.ino(), d: moved})
	t := now()
	// Not stored yet: its inode lands with its new directory in it.
	wb.inodes[pn.d.Ino].Ctime, wb.inodes[pn.d.Ino].Parents = t, []uint64{to.ino()}
	wb.touchLocked(from.ino(), t)
	wb.touchLocked(to.ino(), t)
	src.changedHere(name, dirEntry{absent: true}, true, true)
	dst.changedHere(newName, dirEntry{ino: pn.d.Ino, typ: pn.d.Type}, true, true)
	f.delegs.forgetAttr(pn.d.Ino)
	return true, nil
}
