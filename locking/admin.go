// What admin tools outside the protocol (fsck) need of it: telling live
// sessions from dead ones the way the sweeper does, and settling what a
// dead one left, as recovery would.

package locking

import (
	"context"
	"time"
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
	return judgeSessions(ctx, obs, c.Session().ID(), c.cfg.Grace, wait)
}

// judgeSessions is JudgeSessions for the observer obs of session self
// ("" for a Reader, which has none).
func judgeSessions(ctx context.Context, obs *Observer, self string, grace time.Duration, wait bool) error {
	first, err := obs.Watch(ctx)
	if err != nil {
		return err
	}
	if !wait {
		return nil
	}
	var longest time.Duration
	for _, s := range first {
		if s.ID != self && !s.Dead {
			longest = max(longest, time.Duration(s.LeaseMs)*time.Millisecond)
		}
	}
	if longest == 0 {
		return nil
	}
	if grace <= 0 {
		grace = longest / 2
	}
	deadline := time.Now().Add(longest + grace + longest/2)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(longest / 4):
		}
		all, err := obs.Watch(ctx)
		if err != nil {
			return err
		}
		undecided := false
		for _, s := range all {
			if s.ID == self || s.Dead {
				continue
			}
			// Seen moving since the first look: alive.
			moved := true
			for _, f := range first {
				if f.ID == s.ID && f.Counter == s.Counter {
					moved = false
				}
			}
			if !moved {
				undecided = true
			}
		}
		if !undecided {
			return nil
		}
	}
	return nil
}
