package vfs

import (
	"context"
	"errors"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/locking/lockorder"
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
	f *Mount
	// gate is held by a flush for its whole run, and by every change of
	// the pending state: a change waits for the flush under way.
	gate lockorder.Mutex
	mu   lockorder.Mutex // protects the fields below; never held across a request
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
	// under: the session the pending state began under; once it is
	// declared dead, nothing of the batch can land (doomed).
	under *locking.Session

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

func newWriteback(f *Mount) *writeback {
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
			wb.gate.Lock()
			wb.endIdleLeases()
			wb.gate.Unlock()
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
func (f *Mount) settle(ctx context.Context) error {
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
func (f *Mount) settleAll(ctx context.Context) error {
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
func (f *Mount) sync(ctx context.Context, ino uint64, since *ErrSince) error {
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

// doomed reports whether the pending batch began under a session since
// declared dead: it can only be lost (at the next flush), and a write to
// one of its files must fail now rather than be acknowledged and lost.
func (wb *writeback) doomed() bool {
	if wb == nil || wb.count.Load() == 0 {
		return false
	}
	wb.mu.Lock()
	defer wb.mu.Unlock()
	return wb.under != nil && wb.under.Declared()
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
func (f *Mount) settleDir(ctx context.Context, ino uint64) error {
	if !f.wb.touches(ino) {
		return nil
	}
	return f.settle(ctx)
}

// errOutcomeUnknown: the batch that holds a pending inode has an outcome
// not learnt yet (see update).
var errOutcomeUnknown = errors.New("the outcome of the pending batch is not known yet")

// update applies change to a pending inode in memory (ok false: ino is
// not pending; errOutcomeUnknown: settle, then ask again). change runs
// under gate and mu, and must take no other lock: a flush holds an open
// file's lock and then asks the batch (pending, hold).
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

// endIdleLeases gives back the leases kept for a batch that has nothing
// left in it: a file made and removed in memory before a flush leaves the
// lease its create took, and no batch lands to end it, so that another
// mount's rename or rmdir of the directory waited for it as long as this
// mount lived, and failed with EAGAIN (the campaign's stuck-lock, seed
// 814943796). Caller holds gate.
func (wb *writeback) endIdleLeases() {
	wb.mu.Lock()
	defer wb.mu.Unlock()
	if wb.count.Load() != 0 || len(wb.shares) == 0 {
		return
	}
	for _, h := range wb.shares {
		h.End()
	}
	wb.shares = map[uint64]*locking.Share{}
}
