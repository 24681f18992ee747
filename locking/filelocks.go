package locking

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

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

	mu sync.Mutex
	// sess and op are the session and lease operation of the entries
	// held now; a new session means they were lost.
	sess *Session
	op   string
	// held: the owners with entries, by inode.
	held map[uint64]map[ownerKey]bool
	// lost: inodes whose locks went with a lost session, until forgotten.
	lost map[uint64]bool
}

type ownerKey struct {
	owner uint64
	flock bool
}

func newFileLocks(c *Coordinator) *FileLocks {
	return &FileLocks{c: c, held: map[uint64]map[ownerKey]bool{}, lost: map[uint64]bool{}}
}

// lease returns the session and operation under which to hold entries,
// noting the locks of an older session as lost.
func (fl *FileLocks) lease() (*Session, string) {
	sess := fl.c.Session()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.sess != sess {
		for ino := range fl.held {
			fl.lost[ino] = true
		}
		fl.held = map[uint64]map[ownerKey]bool{}
		fl.sess, fl.op = sess, sess.LeaseOp()
	}
	if err := sess.Check(); err != nil {
		// Not renewed for a lease: others may have declared us dead and
		// dropped our entries already.
		for ino := range fl.held {
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
// (F_GETLK). A dead mount's entry is not a conflict.
func (fl *FileLocks) Get(ctx context.Context, ino uint64, lk FileLock) (FileLock, bool, error) {
	sess, _ := fl.lease()
	doc, err := fl.read(ctx, ino)
	if err != nil {
		return FileLock{}, false, err
	}
	for _, h := range doc.Holders {
		if !holderConflicts(h, lk, sess.ID()) {
			continue
		}
		if dead, err := fl.c.obs.Dead(ctx, h.Session); err == nil && dead {
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
func (fl *FileLocks) Set(ctx context.Context, ino uint64, path string, lk FileLock, wait bool) error {
	err := fl.set(ctx, ino, path, lk, wait)
	if err != nil && ctx.Err() != nil {
		// Interrupted (a signal, for the caller EINTR), whichever request
		// of the wait the interruption cut.
		return ctx.Err()
	}
	return err
}

func (fl *FileLocks) set(ctx context.Context, ino uint64, path string, lk FileLock, wait bool) error {
	if lk.Start < 0 || lk.End < lk.Start {
		return fmt.Errorf("lock range %d-%d: %w", lk.Start, lk.End, store.ErrInvalid)
	}
	sess, op := fl.lease()
	me := sess.ID()
	var w *fileWaiter
	defer func() {
		if w != nil {
			fl.unwait(context.WithoutCancel(ctx), ino, me, w)
		}
	}()
	for attempt := 0; ; attempt++ {
		if err := sess.Check(); err != nil {
			return err
		}
		doc, err := fl.read(ctx, ino)
		if err != nil {
			return err
		}
		doc.ID = store.FileLockID(ino)
		if !doc.Found {
			doc.Path = path
		}
		blocker, held := fl.blocker(doc, lk, me, w)
		if held != nil {
			gone, err := fl.c.Locks.HolderGone(ctx, *held)
			if err != nil {
				return err
			}
			if gone {
				nd := doc
				nd.Holders = without(doc.Holders, *held)
				if err := fl.write(ctx, nd); err != nil && !errors.Is(err, store.ErrConflict) {
					return err
				}
				continue
			}
		}
		if blocker {
			if !wait {
				return ErrWouldBlock
			}
			if w == nil {
				opID, n := sess.BeginOp()
				w = &fileWaiter{sess: sess, op: opID, n: n, ticket: fmt.Sprintf("%020d-%s", time.Now().UnixNano(), opID)}
			}
			if !w.marked {
				nd := doc
				nd.Waiters = append(append([]store.Waiter(nil), doc.Waiters...), store.Waiter{Session: me, Op: w.op, Ticket: w.ticket, Since: time.Now().UnixNano(),
					Mode: lockMode(lk), Owner: lk.Owner, Start: lk.Start, End: lk.End, Flock: lk.Flock})
				if err := fl.write(ctx, nd); err == nil {
					w.marked = true
					continue
				} else if !errors.Is(err, store.ErrConflict) {
					return err
				}
			}
			if err := sleepCtx(ctx, fileLockBackoff(attempt)); err != nil {
				return err
			}
			continue
		}
		nd := doc
		nd.Holders = applyFileLock(doc.Holders, me, op, lk)
		if w != nil {
			nd.Waiters = withoutWaiter(doc.Waiters, me, w.op)
		}
		if err := fl.write(ctx, nd); errors.Is(err, store.ErrConflict) {
			continue
		} else if err != nil {
			return err
		}
		if w != nil {
			w.marked = false // gone with the grant
		}
		fl.note(ino, nd.Holders, me, lk)
		return nil
	}
}

// fileWaiter is a blocking request's waiting marker.
type fileWaiter struct {
	sess   *Session
	op     string
	n      int64
	ticket string
	marked bool
}

// blocker reports whether lk must wait: a holder of another owner
// conflicts (held, which may be a dead mount's), or an older waiter of
// another owner wants what would conflict with it. An unlock never waits.
func (fl *FileLocks) blocker(doc store.LockDoc, lk FileLock, me string, w *fileWaiter) (bool, *store.Holder) {
	if lk.Unlock {
		return false, nil
	}
	for i, h := range doc.Holders {
		if holderConflicts(h, lk, me) {
			return true, &doc.Holders[i]
		}
	}
	for _, q := range doc.Waiters {
		if q.Session == me && w != nil && q.Op == w.op {
			continue
		}
		if w != nil && q.Ticket >= w.ticket {
			continue // younger than us
		}
		if q.Session == me && q.Owner == lk.Owner && q.Flock == lk.Flock {
			continue
		}
		if q.Flock == lk.Flock && overlaps(q.Start, q.End, lk.Start, lk.End) && (q.Mode == store.FileWrite || lk.Write) {
			return true, nil
		}
	}
	return false, nil
}

// unwait takes w's marker out of ino's document, and ends its operation
// (which lets the sweeper drop a marker this could not).
func (fl *FileLocks) unwait(ctx context.Context, ino uint64, me string, w *fileWaiter) {
	defer w.sess.EndOp(w.n)
	if !w.marked {
		return
	}
	for attempt := 0; attempt < 10; attempt++ {
		doc, err := fl.read(ctx, ino)
		if err != nil || !doc.Found {
			return
		}
		nd := doc
		nd.Waiters = withoutWaiter(doc.Waiters, me, w.op)
		if len(nd.Waiters) == len(doc.Waiters) {
			return
		}
		if err := fl.write(ctx, nd); !errors.Is(err, store.ErrConflict) {
			return
		}
	}
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

// note records which owners of this session hold entries on ino.
func (fl *FileLocks) note(ino uint64, holders []store.Holder, me string, lk FileLock) {
	k := ownerKey{lk.Owner, lk.Flock}
	has := false
	for _, h := range holders {
		if h.Session == me && h.Owner == lk.Owner && h.Flock == lk.Flock {
			has = true
			break
		}
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	m := fl.held[ino]
	if has {
		if m == nil {
			m = map[ownerKey]bool{}
			fl.held[ino] = m
		}
		m[k] = true
		delete(fl.lost, ino)
		return
	}
	delete(m, k)
	if len(m) == 0 {
		delete(fl.held, ino)
	}
}

// Holds reports whether owner (of a flock, or of record locks) holds
// anything on ino here, so that a close need not ask the cluster.
func (fl *FileLocks) Holds(ino, owner uint64, flock bool) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.held[ino][ownerKey{owner, flock}]
}

// HoldsAny reports whether any owner holds anything on ino here.
func (fl *FileLocks) HoldsAny(ino uint64) bool {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return len(fl.held[ino]) > 0
}

// ReleaseOwner drops every lock of owner on ino (record locks at a close
// of any of the process's descriptors, a flock at the last close of its
// open file).
func (fl *FileLocks) ReleaseOwner(ctx context.Context, ino uint64, owner uint64, flock bool) error {
	if !fl.Holds(ino, owner, flock) {
		return nil
	}
	return fl.Set(ctx, ino, "", FileLock{Owner: owner, Start: 0, End: ToEOF, Unlock: true, Flock: flock}, false)
}

// ReleaseAll drops every lock this mount holds (at unmount). A mount
// whose session is lost has nothing left to drop: others drop its entries.
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
	for ino, m := range fl.held {
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
}

func lockMode(lk FileLock) store.LockMode {
	if lk.Write {
		return store.FileWrite
	}
	return store.FileRead
}

func overlaps(s1, e1, s2, e2 int64) bool { return s1 <= e2 && s2 <= e1 }

// holderConflicts reports whether entry h, of another owner than lk's,
// conflicts with lk.
func holderConflicts(h store.Holder, lk FileLock, me string) bool {
	if h.Mode != store.FileRead && h.Mode != store.FileWrite {
		return false
	}
	if h.Session == me && h.Owner == lk.Owner {
		return false
	}
	return h.Flock == lk.Flock && overlaps(h.Start, h.End, lk.Start, lk.End) && (h.Mode == store.FileWrite || lk.Write)
}

// applyFileLock returns holders with lk applied for its owner (of session
// me, under operation op): the owner's entries of lk's kind lose lk's
// range (split where it falls inside one), then lk's entry is added
// unless it is an unlock, and the owner's entries of one mode that touch
// or overlap are merged, as POSIX record locks behave on a local
// filesystem.
func applyFileLock(holders []store.Holder, me, op string, lk FileLock) []store.Holder {
	mine := func(h store.Holder) bool { return h.Session == me && h.Owner == lk.Owner && h.Flock == lk.Flock }
	var out, own []store.Holder
	for _, h := range holders {
		if !mine(h) {
			out = append(out, h)
			continue
		}
		if !overlaps(h.Start, h.End, lk.Start, lk.End) {
			own = append(own, h)
			continue
		}
		if h.Start < lk.Start {
			left := h
			left.End = lk.Start - 1
			own = append(own, left)
		}
		if h.End > lk.End {
			right := h
			right.Start = lk.End + 1
			own = append(own, right)
		}
	}
	if !lk.Unlock {
		own = append(own, store.Holder{Session: me, Op: op, Mode: lockMode(lk), Since: time.Now().UnixNano(),
			Owner: lk.Owner, Start: lk.Start, End: lk.End, Pid: lk.Pid, Flock: lk.Flock})
	}
	return append(out, mergeRanges(own)...)
}

// mergeRanges merges entries of one owner and mode that overlap or touch.
func mergeRanges(own []store.Holder) []store.Holder {
	var out []store.Holder
	for _, h := range own {
		merged := false
		for i := range out {
			o := &out[i]
			if o.Mode != h.Mode {
				continue
			}
			touch := overlaps(o.Start, o.End, h.Start, h.End) ||
				(o.End != ToEOF && o.End+1 == h.Start) || (h.End != ToEOF && h.End+1 == o.Start)
			if touch {
				o.Start, o.End = min(o.Start, h.Start), max(o.End, h.End)
				o.Pid, o.Since = h.Pid, max(o.Since, h.Since)
				merged = true
				break
			}
		}
		if !merged {
			out = append(out, h)
		}
	}
	if len(out) < len(own) {
		return mergeRanges(out) // a merge may make two others touch
	}
	return out
}

func without(hs []store.Holder, gone store.Holder) []store.Holder {
	var out []store.Holder
	for _, h := range hs {
		if h != gone {
			out = append(out, h)
		}
	}
	return out
}

func withoutWaiter(ws []store.Waiter, session, op string) []store.Waiter {
	var out []store.Waiter
	for _, w := range ws {
		if w.Session != session || w.Op != op {
			out = append(out, w)
		}
	}
	return out
}

// fileLockBackoff is the wait before a blocked request looks again: short
// at first (a lock held for a moment), then at most a quarter second, so
// that a waiter costs the cluster four reads a second.
func fileLockBackoff(attempt int) time.Duration {
	d := 5 * time.Millisecond << min(attempt, 6)
	return min(d, 250*time.Millisecond)
}
