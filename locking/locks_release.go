// Releasing locks: the entries of a finished operation leave the lock
// documents in one bulk (which can carry the write that ends the
// operation), and recovery removes those of a taken-over operation.

package locking

import (
	"context"
	"errors"
	"fmt"

	"github.com/esfs/esfs/store"
)

// Release gives the locks back in one bulk, using the versions of the
// grant; documents changed meanwhile (by compatible holders) are re-read and
// retried. If one of our entries is gone, someone judged us dead and may
// have done conflicting work: ErrLeaseLost, the caller answers EIO.
func (m *Manager) Release(ctx context.Context, h *Held) error {
	_, err := m.release(ctx, h, false, nil)
	return err
}

// ReleaseWith is Release with other items (pre) sent in the same first
// bulk, ahead of the lock writes: the write that ends an operation rides
// with its release instead of costing a round trip of its own. It returns
// pre's results, or nil if the first bulk failed as a whole (then nothing
// was retried and the outcome of pre is unknown).
func (m *Manager) ReleaseWith(ctx context.Context, h *Held, pre []store.BulkOp) ([]store.BulkResult, error) {
	return m.release(ctx, h, false, pre)
}

func (m *Manager) release(ctx context.Context, h *Held, partial bool, pre []store.BulkOp) (preRes []store.BulkResult, err error) {
	defer m.released.fire()
	if h.counted {
		// Whatever the outcome: a failed release leaves entries that
		// recovery removes, not locks this mount still uses.
		h.counted = false
		m.metrics.held.Sub(float64(len(h.reqs)))
	}
	docs := make([]store.LockDoc, 0, len(h.docs))
	for _, d := range h.docs {
		if d.Found {
			docs = append(docs, d)
		}
	}
	for round := 0; len(docs) > 0 || pre != nil; round++ {
		writes := make([]store.LockWrite, len(docs))
		for i, d := range docs {
			nd := withoutOwn(d, h.Session, h.Op)
			writes[i] = store.LockWrite{Doc: nd, Delete: len(nd.Holders) == 0 && len(nd.Waiters) == 0}
		}
		var res []store.BulkResult
		var err error
		if pre != nil {
			all, berr := m.b.Bulk(ctx, append(append([]store.BulkOp{}, pre...), store.WriteLocks(writes)...))
			if berr != nil {
				return nil, berr
			}
			preRes, res, pre = all[:len(pre)], all[len(pre):], nil
		} else if res, err = m.b.Bulk(ctx, store.WriteLocks(writes)); err != nil {
			if round < 5 {
				store.Backoff(ctx, round, lockBackoff)
				continue
			}
			return preRes, err
		}
		var again []string
		for i, r := range res {
			switch {
			case r.Err == nil:
				d := writes[i].Doc
				d.Found, d.Ver = true, r.Ver
				m.known.wrote(d, writes[i].Delete)
				m.wakeWaiters(d, h.Session)
			case errors.Is(r.Err, store.ErrNotFound):
				m.known.wrote(writes[i].Doc, true)
			default:
				m.known.forget(docs[i].ID)
				again = append(again, docs[i].ID)
			}
		}
		if len(again) == 0 {
			return preRes, nil
		}
		// Other holders of a hot document (every create below a busy
		// directory holds it shared) release at the same time: back off a
		// little, with jitter, so that the compare-and-sets stop colliding.
		if round >= 200 || ctx.Err() != nil {
			return preRes, fmt.Errorf("releasing %d locks: still conflicting after %d rounds", len(again), round)
		}
		if round >= 2 {
			store.Backoff(ctx, min(round-2, 4), lockBackoff)
		}
		fresh, err := m.b.GetLocks(ctx, again)
		if err != nil {
			return preRes, err
		}
		docs = docs[:0]
		lostOne := false
		for _, d := range fresh {
			if !d.Found || !hasOwn(d, h.Session, h.Op) {
				lostOne = lostOne || !partial
				continue
			}
			docs = append(docs, d)
		}
		if lostOne {
			// Finish releasing the rest, then report.
			if _, err := m.release(ctx, &Held{Op: h.Op, Session: h.Session, docs: docs}, true, nil); err != nil {
				m.log.Warn("releasing after a lost entry", "op", h.Op, "err", err)
			}
			return preRes, fmt.Errorf("operation %s: a lock entry was removed by another mount: %w", h.Op, ErrLeaseLost)
		}
	}
	return preRes, nil
}

// releaseUnknown cleans up after a grant bulk whose outcome is unknown.
func (m *Manager) releaseUnknown(sess *Session, op string, reqs []Request) {
	if isLeaseOp(op) {
		m.strays.Store(true)
	}
	ctx, cancel := context.WithTimeout(context.Background(), sess.Lease())
	defer cancel()
	if err := m.ReleaseOp(ctx, sess.ID(), op, reqs); err != nil {
		m.log.Debug("could not clean up after an uncertain lock request yet; retried until it lands", "op", op, "err", err)
		m.owe(sess, op, reqs)
	}
}

// ReleaseOp removes every entry (holder or waiter) of operation op of
// session from the lock documents named by reqs, reading them first. It is
// what recovery uses to release a taken-over operation's locks.
func (m *Manager) ReleaseOp(ctx context.Context, session, op string, reqs []Request) error {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ID
	}
	docs, err := m.b.GetLocks(ctx, ids)
	if err != nil {
		return err
	}
	var mine []store.LockDoc
	for i, d := range docs {
		d.ID, d.Path = reqs[i].ID, reqs[i].Path
		if d.Found && (hasOwn(d, session, op) || hasWaiter(d, session, op)) {
			mine = append(mine, d)
		}
	}
	_, err = m.release(ctx, &Held{Op: op, Session: session, docs: mine}, true, nil)
	return err
}

func hasWaiter(d store.LockDoc, session, op string) bool {
	for _, w := range d.Waiters {
		if w.Session == session && w.Op == op {
			return true
		}
	}
	return false
}

// clearMarkers removes our waiting markers when we give up, so that a
// request that is no longer waiting does not hold back shared requests.
func (m *Manager) clearMarkers(sess *Session, op string, reqs []Request, marked map[string]bool) {
	var rs []Request
	for _, r := range reqs {
		if marked[r.ID] {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	m.releaseUnknown(sess, op, rs)
}

// wakeWaiters nudges the other mounts whose waiting markers are in d, a
// document this mount just released its entry from: their next attempt
// need not wait for its backoff.
func (m *Manager) wakeWaiters(d store.LockDoc, self string) {
	if m.nudge == nil {
		return
	}
	seen := map[string]bool{}
	for _, w := range d.Waiters {
		if w.Session != self && !seen[w.Session] {
			seen[w.Session] = true
			m.nudge.send(w.Session, nudgeWake, m.b.GetSession)
		}
	}
}
