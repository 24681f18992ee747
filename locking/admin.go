// What admin tools outside the protocol (fsck) need of it: telling live
// sessions from dead ones the way the sweeper does, and settling what a
// dead one left, as recovery would.

package locking

import (
	"context"
	"time"

	"github.com/esfs/esfs/store"
)

// Dead reports whether session id is dead, declaring it so when it has
// earned it (see Observer.Dead).
func (c *Coordinator) Dead(ctx context.Context, id string) (bool, error) {
	c.mu.Lock()
	obs := c.obs
	c.mu.Unlock()
	return obs.Dead(ctx, id)
}

// JudgeSessions watches every session long enough to tell live from dead:
// twice, a lease plus grace apart, when wait is set and some session is
// neither declared dead nor seen moving.
func (c *Coordinator) JudgeSessions(ctx context.Context, wait bool) error {
	c.mu.Lock()
	obs := c.obs
	c.mu.Unlock()
	_, err := obs.Judge(ctx, wait)
	return err
}

// Verdicts are what Observer.Judge concluded of the sessions it saw (the
// observer's own excepted).
type Verdicts struct {
	// Live were seen heartbeating (or appeared while watched).
	Live []store.SessionDoc
	// Dead are declared dead, by this observer or earlier by anyone: they
	// are fenced for good.
	Dead []store.SessionDoc
	// Silent were neither: not watched for their lease plus grace (without
	// wait), or their declaration failed.
	Silent []store.SessionDoc
}

// Judge watches every session long enough to tell live from dead, as
// Coordinator.JudgeSessions does, and says what it concluded. Without
// wait it looks once: only sessions already declared dead are known dead.
func (o *Observer) Judge(ctx context.Context, wait bool) (Verdicts, error) {
	first, err := o.Watch(ctx)
	if err != nil {
		return Verdicts{}, err
	}
	last := first
	var longest time.Duration
	for _, s := range first {
		if s.ID != o.self && !s.Dead {
			longest = max(longest, time.Duration(s.LeaseMs)*time.Millisecond)
		}
	}
	moved := func(s store.SessionDoc) bool {
		for _, f := range first {
			if f.ID == s.ID {
				return f.Counter != s.Counter
			}
		}
		return true // appeared since the first look
	}
	if wait && longest > 0 {
		grace := o.grace
		if grace <= 0 {
			grace = longest / 2 // a Reader's: the default of the mounts' sweepers
		}
		deadline := time.Now().Add(longest + grace + longest/2)
		for time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return Verdicts{}, ctx.Err()
			case <-time.After(min(longest/4, time.Second)):
			}
			all, err := o.Watch(ctx)
			if err != nil {
				return Verdicts{}, err
			}
			last = all
			undecided := false
			for _, s := range all {
				if s.ID != o.self && !s.Dead && !moved(s) {
					undecided = true
				}
			}
			if !undecided {
				break
			}
		}
	}
	var v Verdicts
	for _, s := range last {
		switch {
		case s.ID == o.self:
		case s.Dead:
			v.Dead = append(v.Dead, s)
		case wait && moved(s):
			v.Live = append(v.Live, s)
		default:
			v.Silent = append(v.Silent, s)
		}
	}
	return v, nil
}
