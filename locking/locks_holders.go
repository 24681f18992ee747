package locking

// Whether a holder of a lock is gone (its session dead, its operation
// done), and a lock document without this mount's own hold; see locks.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esfs/esfs/store"
)

// HolderGone reports whether a conflicting holder's entry may be dropped:
// its session is dead and its operation was taken over or aborted first:
// an entry is never freed on its own, only once its operation is settled,
// so that nobody works on paths a half-done operation still covers.
func (m *Manager) HolderGone(ctx context.Context, h store.Holder) (bool, error) {
	dead, err := m.obs.Load().Dead(ctx, h.Session)
	if err != nil {
		return false, err
	}
	if !dead {
		// A live mount's entry of an operation it has finished (its
		// release failed): a leftover, by its own published word.
		return m.obs.Load().Finished(ctx, h.Session, h.Op)
	}
	if h.Batch != "" {
		// A write delegation's last batch is settled before its entry
		// goes, so that it is never found half done by anyone who
		// changes the directory after us.
		if settled, err := m.opGone(ctx, h.Batch, h.Session); err != nil || !settled {
			return false, err
		}
	}
	return m.opGone(ctx, h.Op, h.Session)
}

// opGone reports whether operation op of the dead session is settled,
// settling or fencing it if it is not (see HolderGone).
func (m *Manager) opGone(ctx context.Context, op, session string) (bool, error) {
	h := store.Holder{Session: session, Op: op}
	rec, err := m.b.GetOp(ctx, h.Op)
	if errors.Is(err, store.ErrNotFound) {
		// No record: fence the operation by creating its record as done
		// and aborted (nothing was staged without one), so that a paused
		// owner that wakes up cannot start journaling it, and the sweeper
		// collects the record like any finished one.
		_, err = m.b.Write(ctx, store.CreateOp(store.OpRecord{ID: h.Op, State: store.OpDone, Aborted: true, Owner: h.Session, Epoch: 1,
			SrcType: store.TypeFile, Created: time.Now().UnixNano()}))
		if err == nil || errors.Is(err, store.ErrExists) {
			if err == nil {
				return true, nil
			}
			rec, err = m.b.GetOp(ctx, h.Op)
		}
	}
	if err != nil {
		return false, err
	}
	switch rec.State {
	case store.OpDone, store.OpAborted:
		if rec.State == store.OpAborted && rec.SrcIno != 0 {
			// An aborted rename still being undone by someone: only the
			// record's owner releases its locks.
			if ownerDead, err := m.obs.Load().Dead(ctx, rec.Owner); err != nil || !ownerDead {
				return false, err
			}
			return false, m.recover(ctx, rec)
		}
		return true, nil
	}
	ownerDead, err := m.obs.Load().Dead(ctx, rec.Owner)
	if err != nil || !ownerDead {
		return false, err // a live mount took it over: wait for it
	}
	return false, m.recover(ctx, rec)
}

func (m *Manager) recover(ctx context.Context, rec store.OpRecord) error {
	if m.Recover == nil {
		return fmt.Errorf("operation %s of a dead mount needs recovery, and none is set up", rec.ID)
	}
	return m.Recover(ctx, rec)
}

func withoutOwn(d store.LockDoc, session, op string) store.LockDoc {
	var hs []store.Holder
	for _, h := range d.Holders {
		if !(h.Session == session && h.Op == op) {
			hs = append(hs, h)
		}
	}
	var ws []store.Waiter
	for _, w := range d.Waiters {
		if !(w.Session == session && w.Op == op) {
			ws = append(ws, w)
		}
	}
	d.Holders, d.Waiters = hs, ws
	return d
}

func hasOwn(d store.LockDoc, session, op string) bool {
	for _, h := range d.Holders {
		if h.Session == session && h.Op == op {
			return true
		}
	}
	return false
}
