package store

import (
	"context"
	mrand "math/rand/v2"
	"time"
)

// Backoff waits before another attempt at something that lost a race (a
// compare-and-set that conflicted, a lock held by someone else): 1 ms,
// doubled at each attempt up to limit, plus as much again at most, at
// random, so that contenders spread out instead of retrying in lockstep.
// It returns early when ctx ends.
func Backoff(ctx context.Context, attempt int, limit time.Duration) {
	BackoffOr(ctx, attempt, limit, nil, nil)
}

// BackoffOr is Backoff that also ends when wake or also is closed (nil:
// never).
func BackoffOr(ctx context.Context, attempt int, limit time.Duration, wake, also <-chan struct{}) {
	d := time.Millisecond << min(attempt, 30)
	d = min(d, limit)
	d += time.Duration(mrand.Int64N(int64(d)))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-wake:
	case <-also:
	}
}

// InodeBackoff is Backoff's limit between compare-and-sets of one inode
// document, which the few mounts changing one file or directory at once
// contend on.
const InodeBackoff = 64 * time.Millisecond
