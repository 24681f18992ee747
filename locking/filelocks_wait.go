// Waiting for a file lock: a blocked request's marker, which later
// requests of other owners yield to, written once and taken out when the
// wait ends.

package locking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esfs/esfs/store"
)

// block handles a refused request: a waiting one leaves its marker (once)
// in v, the document as this mount has it.
func (r *fileRequest) block(ctx context.Context, v store.LockDoc) (outcome, error) {
	if !r.wait {
		return refused, nil
	}
	if r.w == nil {
		r.w = r.fl.newWaiter(r.sess)
	}
	if r.w.marked {
		return refused, nil
	}
	nd := v
	nd.Waiters = append(append([]store.Waiter(nil), v.Waiters...), store.Waiter{Session: r.me, Op: r.w.op, Ticket: r.w.ticket, Since: time.Now().UnixNano(),
		Mode: lockMode(r.lk), Owner: r.lk.Owner, Start: r.lk.Start, End: r.lk.End, Flock: r.lk.Flock})
	switch err := r.fl.write(ctx, nd); {
	case err == nil:
		r.w.marked = true
		return again, nil
	case errors.Is(err, store.ErrConflict):
		return refused, nil
	case unknownOutcome(err):
		// The next read says whether it landed; until then it may have.
		r.w.maybe = true
		return refused, nil
	default:
		return failed, err
	}
}

// fileWaiter is a blocking request's waiting marker.
type fileWaiter struct {
	sess   *Session
	op     string
	n      int64
	ticket string
	// marked: the marker is in the document, as last read or written;
	// maybe: a write of it whose outcome is unknown was sent.
	marked, maybe bool
}

func (fl *FileLocks) newWaiter(sess *Session) *fileWaiter {
	op, n := sess.BeginOp()
	fl.mu.Lock()
	fl.waiting[op] = true
	fl.mu.Unlock()
	return &fileWaiter{sess: sess, op: op, n: n, ticket: fmt.Sprintf("%020d-%s", time.Now().UnixNano(), op)}
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

// unwait takes r's marker out of the document, and ends its operation.
// A marker it cannot remove is the mender's (the operation is no longer
// waiting), and the sweepers' of other mounts once the operation's end is
// published.
func (fl *FileLocks) unwait(ctx context.Context, r *fileRequest) {
	w := r.w
	defer w.sess.EndOp(w.n)
	fl.mu.Lock()
	delete(fl.waiting, w.op)
	fl.mu.Unlock()
	if !w.marked && !w.maybe {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, w.sess.Lease())
	defer cancel()
	for attempt := 0; attempt < 10; attempt++ {
		err := fl.removeWaiter(ctx, r.ino, r.me, w.op)
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrConflict) {
			break
		}
	}
	fl.markDirty(r.ino)
}

func (fl *FileLocks) removeWaiter(ctx context.Context, ino uint64, me, op string) error {
	defer fl.turn(ino)()
	doc, err := fl.read(ctx, ino)
	if err != nil || !doc.Found {
		return err
	}
	nd := doc
	nd.Waiters = withoutWaiter(doc.Waiters, me, op)
	if len(nd.Waiters) == len(doc.Waiters) {
		return nil
	}
	return fl.write(ctx, nd)
}
