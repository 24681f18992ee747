package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Observer judges other sessions' liveness by watching their heartbeat
// counters on this machine's boot clock. A session is dead when its counter
// has not moved for its lease plus grace since we first saw that value,
// and only once we have written that verdict into its document with a
// compare-and-set on the version we watched: if its heartbeat landed
// meanwhile, our write fails and it lives on. A verdict, once written, makes
// the owner's next heartbeat fail, so it cannot write again unnoticed.
type Observer struct {
	b     Backend
	self  string
	grace time.Duration
	log   *slog.Logger
	// judgeOnly: a session silent long enough is judged dead without the
	// verdict being written (a Reader, which writes nothing).
	judgeOnly bool

	// nudge, if not nil, learns from every session document read where
	// that mount takes nudges.
	nudge *nudger

	mu   lockorder.Mutex // protects seen and alive
	seen map[string]sighting
	// alive: sessions whose documents said, lately, that they live, and
	// what they said of their finished operations. Within aliveFor of
	// the read, Dead and Finished answer from it instead of reading again
	// (every attempt to take a lock asks about each holder and waiter):
	// both answers are the cautious ones (wait for that holder, yield to
	// that waiter), and a death is declared only after a lease of
	// silence anyway, so one noticed that much later changes nothing.
	alive map[string]aliveSighting
}

type aliveSighting struct {
	until     time.Duration // boot clock
	doneBelow int64
}

// aliveFor bounds how long a session read alive is taken to be, from its
// lease: an eighth, at most a second.
func aliveFor(leaseMs int64) time.Duration {
	return min(time.Second, time.Duration(leaseMs)*time.Millisecond/8)
}

type sighting struct {
	counter int64
	ver     store.Version
	since   time.Duration // boot clock when this counter value was first seen
}

// NewObserver returns an observer for the session named self; grace is
// added to each watched session's own lease.
func NewObserver(b Backend, self string, grace time.Duration, log *slog.Logger) *Observer {
	if log == nil {
		log = slog.Default()
	}
	return &Observer{b: b, self: self, grace: grace, log: log, seen: map[string]sighting{}, alive: map[string]aliveSighting{}}
}

// Dead reports whether session id is dead, declaring it so when it has
// earned it. A session without a document ended cleanly (or never
// existed): it holds nothing, and anything naming it is a leftover.
func (o *Observer) Dead(ctx context.Context, id string) (bool, error) {
	if id == o.self {
		return false, nil
	}
	if _, ok := o.seenAlive(id); ok {
		return false, nil
	}
	d, err := o.b.GetSession(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return o.judge(ctx, d)
}

// seenAlive returns what session id's document said when it was last
// read alive, if that was within aliveFor.
func (o *Observer) seenAlive(id string) (aliveSighting, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	a, ok := o.alive[id]
	if ok && bootNow() >= a.until {
		delete(o.alive, id)
		return a, false
	}
	return a, ok
}

// sawAlive records that d, just read, says its session lives.
func (o *Observer) sawAlive(d store.SessionDoc) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.alive[d.ID] = aliveSighting{until: bootNow() + aliveFor(d.LeaseMs), doneBelow: d.DoneBelow}
}

// Watch records a sighting of every session, so that a later Dead can
// decide without waiting a whole lease from its first look, and returns
// them as judged (those it declared dead marked so). The sweeper calls it
// periodically.
func (o *Observer) Watch(ctx context.Context) ([]store.SessionDoc, error) {
	all, err := o.b.ListSessions(ctx)
	if err != nil {
		return nil, err
	}
	for i, d := range all {
		if d.ID != o.self {
			dead, err := o.judge(ctx, d)
			if err != nil {
				o.log.Warn("judging a session", "session", d.ID, "err", err)
			}
			if dead && !d.Dead { // declared just now
				all[i].Dead, all[i].DeadBy = true, o.self
			}
		}
	}
	return all, nil
}

func (o *Observer) judge(ctx context.Context, d store.SessionDoc) (bool, error) {
	if d.Dead {
		return true, nil
	}
	o.nudge.learn(d)
	now := bootNow()
	o.mu.Lock()
	s, ok := o.seen[d.ID]
	if !ok || s.counter != d.Counter || s.ver != d.Ver {
		o.seen[d.ID] = sighting{counter: d.Counter, ver: d.Ver, since: now}
		o.mu.Unlock()
		o.sawAlive(d)
		return false, nil
	}
	o.mu.Unlock()
	lease := time.Duration(d.LeaseMs) * time.Millisecond
	grace := o.grace
	if grace <= 0 {
		grace = lease / 2 // a Reader's: the default of the mounts' sweepers
	}
	limit := lease + grace
	if now-s.since <= limit {
		o.sawAlive(d)
		return false, nil
	}
	if o.judgeOnly {
		return true, nil
	}
	verdict := d
	verdict.Dead, verdict.DeadBy = true, o.self
	if _, err := o.b.Write(ctx, store.PutSession(verdict, d.Ver)); err != nil {
		// The verdict may have landed with its answer lost, or an earlier
		// one of ours late, making this one conflict: what the document
		// says now decides, not the failure.
		cur, gerr := o.b.GetSession(ctx, d.ID)
		switch {
		case errors.Is(gerr, store.ErrNotFound):
			return true, nil // it left: holds nothing
		case gerr == nil && cur.Dead:
			if cur.DeadBy != o.self {
				return true, nil
			}
		case gerr == nil && (errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound)):
			return false, nil // it moved meanwhile: alive
		default:
			return false, fmt.Errorf("declaring session %s dead: %w", d.ID, err)
		}
	}
	o.log.Warn("declared a silent session dead", "session", d.ID, "host", d.Host, "pid", d.Pid,
		"silent_for", (now - s.since).Round(time.Millisecond))
	return true, nil
}

// Finished reports whether operation op of a live session is known to be
// over: every heartbeat publishes "my operations below N are finished", so
// an entry it failed to release is a leftover anyone may drop.
func (o *Observer) Finished(ctx context.Context, session, op string) (bool, error) {
	n, ok := opNumber(session, op)
	if !ok {
		return false, nil
	}
	if a, ok := o.seenAlive(session); ok {
		return n < a.doneBelow, nil
	}
	d, err := o.b.GetSession(ctx, session)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return true, nil
		}
		return false, err
	}
	if !d.Dead {
		o.nudge.learn(d)
		o.sawAlive(d)
	}
	return n < d.DoneBelow, nil
}

// opNumber parses the sequence number of an operation id "<session>-<n>".
func opNumber(session, op string) (int64, bool) {
	if len(op) <= len(session)+1 || op[:len(session)] != session || op[len(session)] != '-' {
		return 0, false
	}
	var n int64
	for _, c := range op[len(session)+1:] {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// Forget drops what is known of a session (after its leftovers are gone).
func (o *Observer) Forget(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.seen, id)
}
