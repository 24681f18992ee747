// Lock entries this mount owes the store the removal of: a release that
// failed, or a grant whose outcome is unknown and whose cleanup failed
// too. An ordinary operation's leftover is judged finished by other
// mounts (its number is below its session's "finished below"), but a
// lease's (a delegation's) is not: it stands for as long as its live
// session does, and every conflicting request of another mount waits it
// out (--lock-timeout, then EAGAIN). So the removal is retried here until
// it lands or the session is declared dead (its entries go with it).

package locking

import (
	"context"
	"time"
)

type owedKey struct{ session, op string }

// owedRelease is what is owed of one operation: its entries in the lock
// documents reqs name (holders and waiting markers alike).
type owedRelease struct {
	sess *Session
	reqs map[string]Request
}

// owe records that the entries of operation op of sess in the documents
// of reqs must go, and wakes the mender.
func (m *Manager) owe(sess *Session, op string, reqs []Request) {
	if len(reqs) == 0 {
		return
	}
	m.owedMu.Lock()
	k := owedKey{sess.ID(), op}
	o := m.owed[k]
	if o == nil {
		o = &owedRelease{sess: sess, reqs: map[string]Request{}}
		m.owed[k] = o
	}
	for _, r := range reqs {
		o.reqs[r.ID] = r
	}
	m.owedMu.Unlock()
	select {
	case m.owedKick <- struct{}{}:
	default:
	}
}

// releaseOrOwe gives h back, and owes its entries when that fails.
func (m *Manager) releaseOrOwe(ctx context.Context, sess *Session, h *Held) error {
	err := m.Release(ctx, h)
	if err != nil {
		m.owe(sess, h.Op, h.reqs)
	}
	return err
}

// mendReleases runs until stop is closed: it removes the entries owed
// (see mendLoop).
func (m *Manager) mendReleases(stop <-chan struct{}, done chan<- struct{}, lease time.Duration) {
	mendLoop(stop, done, m.owedKick, lease, m.releaseOwed)
}

// releaseOwed tries every owed release once; it reports whether none is
// left.
func (m *Manager) releaseOwed(ctx context.Context) bool {
	m.owedMu.Lock()
	work := make(map[owedKey]*owedRelease, len(m.owed))
	for k, o := range m.owed {
		work[k] = o
	}
	m.owedMu.Unlock()
	for k, o := range work {
		sent := -1 // all of it: its session was declared dead
		select {
		case <-o.sess.Lost():
			// Its entries are others' to remove now.
		default:
			m.owedMu.Lock()
			reqs := make([]Request, 0, len(o.reqs))
			for _, r := range o.reqs {
				reqs = append(reqs, r)
			}
			m.owedMu.Unlock()
			if err := m.ReleaseOp(ctx, k.session, k.op, reqs); err != nil {
				m.log.Debug("removing owed lock entries", "op", k.op, "err", err)
				continue
			}
			sent = len(reqs)
		}
		m.owedMu.Lock()
		if m.owed[k] == o && (sent < 0 || len(o.reqs) == sent) {
			delete(m.owed, k) // else more were owed meanwhile: next round
		}
		m.owedMu.Unlock()
	}
	m.owedMu.Lock()
	defer m.owedMu.Unlock()
	return len(m.owed) == 0
}
