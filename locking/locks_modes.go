// Lock modes and how they combine, and the one-attempt grant that
// delegations use.

package locking

import (
	"context"
	"fmt"
	"time"

	"github.com/esfs/esfs/store"
)

// compatible: shared with shared, read delegations with read delegations,
// changes of a directory with changes (they are decided per name by
// create-if-absent and compare-and-set); nothing else.
func compatible(a, b store.LockMode) bool {
	if a == store.Flushed || b == store.Flushed {
		return a != store.Exclusive && b != store.Exclusive
	}
	return a == b && (a == store.Shared || a == store.ReadDeleg || a == store.Change)
}

// ownDelegEntry: a mount's delegation on a directory never conflicts with
// its own changes there, which keep its cache up to date themselves.
func ownDelegEntry(r Request, session string, h store.Holder) bool {
	return h.Session == session && store.IsDelegLock(r.ID)
}

// leavesMarker: requests that record themselves as waiting when refused,
// so that younger requests they conflict with yield to them.
func leavesMarker(m store.LockMode) bool { return m == store.Exclusive || m == store.Change }

// TryAcquire takes every lock of reqs, as Acquire does (in one round
// trip when its guess of the documents holds), if nothing conflicts now; otherwise it takes none, leaves no trace and returns
// ErrLocked at once. For grants that are an optimisation (delegations):
// nobody waits for them, and they recall nobody.
func (m *Manager) TryAcquire(ctx context.Context, sess *Session, op string, reqs []Request) (held *Held, err error) {
	if err := sess.Check(); err != nil {
		return nil, err
	}
	reqs = dedupe(reqs)
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ID
	}
	w := &waiting{ticket: fmt.Sprintf("%020d-%s", time.Now().UnixNano(), op), once: true}
	// As Acquire: in one round trip when the documents are as this mount
	// last left them (a directory nobody delegated has none). A refused
	// guess leaves no trace either.
	if docs, ok := m.known.guess(sess.ID(), op, reqs); ok {
		held, _, err := m.tryGrant(ctx, sess, op, reqs, docs, w)
		if err != nil || held != nil {
			return held, err
		}
	}
	docs, err := m.b.GetLocks(ctx, ids)
	if err != nil {
		return nil, err
	}
	held, blocked, err := m.tryGrant(ctx, sess, op, reqs, docs, w)
	if err != nil {
		return nil, err
	}
	if held == nil {
		return nil, fmt.Errorf("%s: %w", blocked, ErrLocked)
	}
	// Not counted in esfs_locks_held nor in the acquire times: what it
	// grants are leases (delegations), counted by their own metrics, and
	// esfs_locks_held stays what operations hold.
	return held, nil
}

// waiting is the state of one Acquire across its attempts.
type waiting struct {
	ticket    string
	attempt   int
	once      bool            // TryAcquire: no markers, no recalls
	marked    map[string]bool // documents where we left a waiting marker
	recalled  map[string]int  // recall sent: holder session + lock id -> attempt
	recalling bool            // the last attempt waits for a recall
}

// yields: request r lets an older waiter w go first (so that a stream of
// shared requests cannot starve an exclusive one, nor read delegations a
// change); exclusive requests and changes do not yield, they race.
func yields(r Request, w store.Waiter, session string) bool {
	if r.Mode == store.Exclusive || r.Mode == store.Change {
		return false
	}
	if w.Session == session && store.IsDelegLock(r.ID) {
		return false
	}
	return !compatible(w.WaitMode(), r.Mode)
}

// waiterMode is the mode a waiting marker records: empty for exclusive, so
// that markers read by older versions mean what they did.
func waiterMode(m store.LockMode) store.LockMode {
	if m == store.Exclusive {
		return ""
	}
	return m
}

func modeName(m store.LockMode) string {
	switch m {
	case store.Shared:
		return "shared"
	case store.ReadDeleg:
		return "read delegation"
	case store.Change:
		return "change"
	case store.Flushed:
		return "flush wanted"
	}
	return "exclusive"
}
