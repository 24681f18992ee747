package locking

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Advisory file locks across mounts: flock(2), fcntl record locks and OFD
// locks, which the kernel passes to FUSE with the lock owner it chose (a
// process's file table for POSIX locks, the open file for flock and OFD
// locks). They live in one lock document per inode (store.FileLockID), so
// a rename keeps them, with one holder entry per (session, owner, kind)
// and range, under the session's lease operation: entries of a dead mount
// are dropped like any other dead holder's (Manager.HolderGone, the
// sweeper), once its death is declared (lease plus grace). Conflicts are
// decided on the document as read now, and a grant is a compare-and-set
// of it, so two mounts never both get conflicting locks.
//
// A blocking request that is refused leaves a waiting marker (a Waiter
// with its range) under an operation of its own, and polls with backoff;
// a later request of another owner that would conflict with an older
// marker yields to it, so that a stream of short holders cannot starve a
// waiter. The marker goes when the wait ends (or its operation's end is
// published, or its session dies).
//
// Only this mount writes its own entries (until it is declared dead), so
// it is their authority: each owner's entries are kept here as its
// process was told (FileLocks.owned), every grant writes the owner's
// entries whole from that, and a document that holds more of this
// mount's entries than that (a grant whose answer was lost and whose
// caller was told it failed, a release that did not land, a write that
// landed late) is mended down to it in the background (the mender, and
// the sweeper's look at every lock document), until that lands or the
// session ends. What a caller is told when an answer is lost: see Set.

// FileLock is a lock asked for or held on a file's bytes.
type FileLock struct {
	Owner uint64
	// Start and End are the range, both included; End math.MaxInt64 is
	// to the end of the file, however long it grows.
	Start, End int64
	Write      bool // else a read (shared) lock
	Unlock     bool
	Pid        uint32
	Flock      bool // a flock: never conflicts with a record lock
	// Session is the holder's, in a conflict reported by Get.
	Session string
}

// ToEOF is the End of a lock that runs to the end of the file.
const ToEOF = math.MaxInt64

// ErrWouldBlock: another owner holds (or waits for, before us) a
// conflicting lock.
var ErrWouldBlock = errors.New("a conflicting lock is held")

// FileLocks are one mount's advisory file locks.
type FileLocks struct {
	c *Coordinator

	mu lockorder.Mutex // protects the following; never held across a request
	// sess and op are the session and lease operation of the entries
	// held now; a new session means they were lost.
	sess *Session
	op   string
	// owned: each owner's entries as its process was told it holds them
	// (granted, not yet released), by inode. This mount is the authority
	// on its own entries: where a lock document holds more of them (an
	// answer lost, a release that failed, a write that landed late), the
	// document is mended down to this (filelocks_mend.go).
	// INVARIANT: an owner's entries here are no more than what the lock
	// document holds of it, unless a request of that owner is under way.
	owned map[uint64]map[ownerKey][]store.Holder
	// busy counts each owner's requests under way: its entries in the
	// document may be ahead of owned then, and mending leaves them alone.
	busy map[uint64]map[ownerKey]int
	// waiting: the operations of this mount's waiting markers in use.
	waiting map[string]bool
	// dirty: inodes whose lock document may hold entries or markers of
	// this mount that owned and waiting do not; the mender looks at them.
	dirty map[uint64]bool
	kick  chan struct{}
	// lost: inodes whose locks went with a lost session, until forgotten.
	lost map[uint64]bool
	// turns: one request at a time reads and writes a document here.
	turns map[uint64]*inoTurn
}

type ownerKey struct {
	owner uint64
	flock bool
}

func newFileLocks(c *Coordinator) *FileLocks {
	return &FileLocks{c: c, owned: map[uint64]map[ownerKey][]store.Holder{}, busy: map[uint64]map[ownerKey]int{},
		waiting: map[string]bool{}, dirty: map[uint64]bool{}, kick: make(chan struct{}, 1),
		lost: map[uint64]bool{}, turns: map[uint64]*inoTurn{}}
}

// lease returns the session and operation under which to hold entries,
// noting the locks of an older session as lost.
func (fl *FileLocks) lease() (*Session, string) {
	sess := fl.c.Session()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.sess != sess {
		for ino := range fl.owned {
			fl.lost[ino] = true
		}
		// The old session's entries and markers go with it: others drop
		// them once it is declared dead.
		fl.owned, fl.dirty = map[uint64]map[ownerKey][]store.Holder{}, map[uint64]bool{}
		fl.sess, fl.op = sess, sess.LeaseOp()
	}
	if err := sess.Check(); err != nil {
		// Not renewed for a lease: others may have declared us dead and
		// dropped our entries already.
		for ino := range fl.owned {
			fl.lost[ino] = true
		}
	}
	return sess, fl.op
}

// Lost reports whether this mount held locks on ino that it lost (its
// session was declared dead, or could not be renewed): a program that
// relied on them must not go on as if it held them.
func (fl *FileLocks) Lost(ino uint64) bool {
	fl.lease()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.lost[ino]
}

// Forget ends the report of lost locks on ino (its last open file closed).
func (fl *FileLocks) Forget(ino uint64) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	delete(fl.lost, ino)
}

// Get returns a lock of another owner that conflicts with lk, if any
// (F_GETLK). A dead mount's entry is not a conflict, nor one this mount
// released whose removal has not landed yet.
func (fl *FileLocks) Get(ctx context.Context, ino uint64, lk FileLock) (FileLock, bool, error) {
	sess, _ := fl.lease()
	doc, err := fl.read(ctx, ino)
	if err != nil {
		return FileLock{}, false, err
	}
	doc, _ = fl.view(ino, doc, sess.ID())
	for _, h := range doc.Holders {
		if !holderConflicts(h, lk, sess.ID()) {
			continue
		}
		if dead, err := fl.c.Dead(ctx, h.Session); err == nil && dead {
			continue
		}
		return FileLock{Owner: h.Owner, Start: h.Start, End: h.End, Write: h.Mode == store.FileWrite, Pid: h.Pid, Flock: h.Flock, Session: h.Session}, true, nil
	}
	return FileLock{}, false, nil
}

func (fl *FileLocks) read(ctx context.Context, ino uint64) (store.LockDoc, error) {
	docs, err := fl.c.b.GetLocks(ctx, []string{store.FileLockID(ino)})
	if err != nil {
		return store.LockDoc{}, err
	}
	return docs[0], nil
}

// Set takes, changes or releases lock lk on file ino (at path, for
// display). If another owner holds a conflicting lock it fails with
// ErrWouldBlock, or, with wait, waits until it can take it or ctx ends.
//
// A write of the lock document whose outcome is unknown (its answer was
// lost: a reset, a timeout, a 429 or 5xx) is settled by reading the
// document again, for up to a lease even past ctx: if the write landed,
// the lock is held and Set reports it granted (the caller is told the
// truth); if not, the request goes on as if it had been refused by a
// concurrent change. A request that only gives rights back (an unlock, a
// downgrade) is reported done at once instead: the entries are this
// mount's to drop, and the mender drops them until that lands or the
// session ends. A request that asks for more and cannot learn its outcome
// within the lease fails with the write's error, and what may have landed
// of it is dropped the same way: no entry stays that its owner's process
// was told it does not hold.
func (fl *FileLocks) Set(ctx context.Context, ino uint64, path string, lk FileLock, wait bool) error {
	err := fl.set(ctx, ino, path, lk, wait)
	if err != nil && ctx.Err() != nil {
		// Interrupted (a signal, for the caller EINTR), whichever request
		// of the wait the interruption cut.
		return ctx.Err()
	}
	return err
}

// fileRequest is one Set under way.
type fileRequest struct {
	fl     *FileLocks
	ino    uint64
	path   string
	lk     FileLock
	k      ownerKey
	sess   *Session
	me, op string
	wait   bool
	w      *fileWaiter
	// base and want are the owner's entries before and after the last
	// grant this request wrote.
	base, want []store.Holder
}

// outcome is what one attempt of a request came to.
type outcome int

const (
	granted outcome = iota
	refused         // a conflicting lock is held, or an older waiter is first
	again           // the document changed under us: read it again at once
	unknown         // our grant's write may or may not have landed
	failed          // a read or a write failed, and nothing of ours is in doubt
)

func (fl *FileLocks) set(ctx context.Context, ino uint64, path string, lk FileLock, wait bool) error {
	if lk.Start < 0 || lk.End < lk.Start {
		return fmt.Errorf("lock range %d-%d: %w", lk.Start, lk.End, store.ErrInvalid)
	}
	fl.c.live(ctx) // a new session if the mount learned the old one's death
	sess, op := fl.lease()
	r := &fileRequest{fl: fl, ino: ino, path: path, lk: lk, k: ownerKey{lk.Owner, lk.Flock}, sess: sess, me: sess.ID(), op: op, wait: wait}
	fl.begin(ino, r.k)
	// uncertain: a grant of ours may have landed, and may still land.
	uncertain := false
	defer func() {
		if r.w != nil {
			fl.unwait(context.WithoutCancel(ctx), r)
		}
		fl.end(ino, r.k, uncertain)
	}()
	// settle bounds the settling of an unknown outcome, past ctx: the
	// caller must not be told anything false because it was interrupted.
	var settle context.Context
	var lastErr error
	for attempt, troubled := 0, 0; ; attempt++ {
		if err := sess.Check(); err != nil {
			return err
		}
		actx := ctx
		if uncertain {
			actx = settle
		}
		res, err := r.attempt(actx)
		switch res {
		case granted:
			uncertain = false
			return nil
		case again:
			continue
		case refused:
			// Another owner holds what we asked for: ours did not land
			// (and its write, conditional on a version since gone, never
			// will; a late create is the sweeper's to find).
			uncertain = false
			if !wait {
				return ErrWouldBlock
			}
			if err := sleepCtx(ctx, fileLockBackoff(attempt)); err != nil {
				return err
			}
			continue
		case unknown:
			if covered(r.base, lk) {
				// It only gives rights back: done, whatever landed; the
				// mender finishes it.
				fl.setOwned(sess, ino, r.k, r.want)
				uncertain = true
				return nil
			}
			if !uncertain {
				var cancel context.CancelFunc
				settle, cancel = context.WithTimeout(context.WithoutCancel(ctx), sess.Lease())
				defer cancel()
			}
			uncertain, lastErr = true, err
		case failed:
			if !uncertain {
				return err
			}
			lastErr = err
		}
		if settle.Err() != nil {
			// Unsettled for a lease: the caller is told it failed, and
			// holds what it held before and no more, so what may have
			// landed is dropped (see giveUp).
			fl.giveUp(sess, r)
			return lastErr
		}
		store.Backoff(settle, troubled, lockBackoff)
		troubled++
	}
}

// attempt reads the document once and, under this mount's turn on it,
// decides and writes: the grant, a waiting marker, or the removal of a
// dead holder's entry.
func (r *fileRequest) attempt(ctx context.Context) (outcome, error) {
	fl := r.fl
	defer fl.turn(r.ino)()
	doc, err := fl.read(ctx, r.ino)
	if err != nil {
		return failed, err
	}
	doc.ID = store.FileLockID(r.ino)
	if !doc.Found {
		doc.Path = r.path
	}
	if r.w != nil {
		// After a lost answer, the document says whether it is there.
		r.w.marked = hasWaiter(doc, r.me, r.w.op)
	}
	// The document as this mount has it: its other owners' entries as
	// they hold them, not as a lost answer or a failed release left them.
	v, stale := fl.view(r.ino, doc, r.me)
	if stale {
		// Mended with our write if there is one, else by the mender.
		defer fl.markDirty(r.ino)
	}
	r.base = fl.ownedOf(r.ino, r.k)
	r.want = applyFileLock(r.base, r.me, r.op, r.lk)
	if sameEntries(ownerEntries(doc.Holders, r.me, r.k), r.want) && (r.w == nil || !r.w.marked) {
		// Already so: nothing asked, or our write whose answer was lost
		// landed.
		fl.setOwned(r.sess, r.ino, r.k, ownerEntries(doc.Holders, r.me, r.k))
		return granted, nil
	}
	blocker, held := fl.blocker(v, r.lk, r.me, r.w)
	if held != nil {
		gone, err := fl.c.Locks.HolderGone(ctx, *held)
		if err != nil {
			return failed, err
		}
		if gone {
			nd := v
			nd.Holders = without(v.Holders, *held)
			if err := fl.write(ctx, nd); err != nil && !errors.Is(err, store.ErrConflict) {
				return failed, err // (not ours: whether it landed, the next read says)
			}
			return again, nil
		}
	}
	if blocker {
		return r.block(ctx, v)
	}
	nd := v
	nd.Holders = append(withoutOwner(v.Holders, r.me, r.k), r.want...)
	if r.w != nil {
		nd.Waiters = withoutWaiter(v.Waiters, r.me, r.w.op)
	}
	switch err := fl.write(ctx, nd); {
	case err == nil:
		if r.w != nil {
			r.w.marked = false // gone with the grant
		}
		fl.setOwned(r.sess, r.ino, r.k, r.want)
		return granted, nil
	case errors.Is(err, store.ErrConflict):
		return again, nil
	case unknownOutcome(err):
		return unknown, err
	default:
		return failed, err
	}
}

// unknownOutcome reports whether a write that failed with err may have
// landed (or may still land): the request or its answer was lost, or the
// cluster answered 429 or 5xx. Anything else was refused as it stood.
func unknownOutcome(err error) bool {
	return errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrCorrupt) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// write writes doc at its version (creates it if not found, deletes it
// when nothing is left in it).
func (fl *FileLocks) write(ctx context.Context, doc store.LockDoc) error {
	empty := len(doc.Holders) == 0 && len(doc.Waiters) == 0
	if empty && !doc.Found {
		return nil
	}
	res, err := fl.c.b.Bulk(ctx, store.WriteLocks([]store.LockWrite{{Doc: doc, Delete: empty}}))
	if err != nil {
		return err
	}
	if err := res[0].Err; err != nil {
		if errors.Is(err, store.ErrExists) || errors.Is(err, store.ErrNotFound) {
			// Someone created or removed it since our read: read again.
			return fmt.Errorf("%w: %v", store.ErrConflict, err)
		}
		return err
	}
	return nil
}

// Holds reports whether owner (of a flock, or of record locks) holds
// anything on ino here, so that a close need not ask the cluster.
func (fl *FileLocks) Holds(ino, owner uint64, flock bool) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return len(fl.owned[ino][ownerKey{owner, flock}]) > 0
}

// HoldsAny reports whether any owner holds anything on ino here.
func (fl *FileLocks) HoldsAny(ino uint64) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return len(fl.owned[ino]) > 0
}

// ReleaseOwner drops every lock of owner on ino (record locks at a close
// of any of the process's descriptors, a flock at the last close of its
// open file). Whatever the outcome, the owner holds nothing afterwards:
// a release that fails is the mender's to retry until it lands or the
// session ends; the error only says it did not land yet.
func (fl *FileLocks) ReleaseOwner(ctx context.Context, ino uint64, owner uint64, flock bool) error {
	if !fl.Holds(ino, owner, flock) {
		return nil
	}
	err := fl.Set(ctx, ino, "", FileLock{Owner: owner, Start: 0, End: ToEOF, Unlock: true, Flock: flock}, false)
	if err != nil {
		sess, _ := fl.lease()
		fl.setOwned(sess, ino, ownerKey{owner, flock}, nil)
		fl.markDirty(ino)
	}
	return err
}

// ReleaseAll drops every lock this mount holds (at unmount), and what the
// mender had still to drop. A mount whose session is lost has nothing
// left to drop: others drop its entries.
func (fl *FileLocks) ReleaseAll(ctx context.Context) {
	if fl.c.Session().Check() != nil {
		return
	}
	fl.mu.Lock()
	type one struct {
		ino uint64
		k   ownerKey
	}
	var all []one
	for ino, m := range fl.owned {
		for k := range m {
			all = append(all, one{ino, k})
		}
	}
	fl.mu.Unlock()
	for _, o := range all {
		if err := fl.ReleaseOwner(ctx, o.ino, o.k.owner, o.k.flock); err != nil {
			fl.c.log.Warn("releasing a file lock at unmount (others get it once this mount's session is gone)", "ino", o.ino, "err", err)
		}
	}
	if !fl.mendAll(ctx) {
		fl.c.log.Warn("file lock entries this mount released are still in the lock index; others drop them once its session is gone")
	}
}

// fileLockBackoff is the wait before a blocked request looks again: short
// at first (a lock held for a moment), then at most a quarter second, so
// that a waiter costs the cluster four reads a second.
func fileLockBackoff(attempt int) time.Duration {
	d := 5 * time.Millisecond << min(attempt, 6)
	return min(d, 250*time.Millisecond)
}
