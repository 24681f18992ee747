package locking

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Shared locks kept as leases. A create needs only shared locks (the
// directory and, in the tree strategy, its ancestors) once its name is
// decided by a create-if-absent write, which Elasticsearch checks. Those
// shared locks can outlive the operation: the next create in the same
// directory joins them at no cost, so a burst of creates pays the lock
// round trips once instead of three times per file. A lease is given back
// when nobody used it for shareLinger, and as soon as an exclusive request
// waits on one of its documents (a background check reads them every
// sharePoll), so that a rename or rmdir of the directory waits about that
// long, not for the burst to end. A lease is an operation of the session
// like any other: its entries are protected while it lives and recovered
// like any other when the mount dies.

const (
	sharePoll   = 100 * time.Millisecond
	shareLinger = 300 * time.Millisecond
)

// SharedPart returns the shared locks of an entry change of path, and
// whether the rest is only the exclusive lock of path itself: then an
// operation that decides path with a create-if-absent write can run under
// the shared part alone. The global strategy has no such part.
func SharedPart(reqs []Request, path string) ([]Request, bool) {
	id := store.LockID(path)
	var out []Request
	for _, r := range reqs {
		switch {
		case r.Mode == store.Shared:
			out = append(out, r)
		case r.ID != id:
			return nil, false
		}
	}
	return out, true
}

// shares are this mount's leases, by lock set.
type shares struct {
	c  *Coordinator
	mu lockorder.Mutex // protects byKey and every share's mutable fields
	by map[string]*share
}

type share struct {
	key     string
	reqs    []Request
	sess    *Session
	op      string
	n       int64
	held    *Held
	ready   chan struct{} // closed when the acquisition ended (err set)
	err     error
	users   int
	idle    time.Time // since when users == 0
	revoked bool      // admit nobody new: a waiter, or the session changed
	checked map[string]uint64
}

// Share is one operation's use of a lease. End it when the operation's
// writes are done.
type Share struct {
	sh   *shares
	s    *share // nil: no lock needed at all
	Sess *Session
	once sync.Once
}

func shareKey(reqs []Request) string {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ID
	}
	sort.Strings(ids)
	return strings.Join(ids, ",")
}

// Share returns a use of the shared locks reqs (all shared), joining this
// mount's lease on them or taking one (two round trips) if there is none.
// Operations under it must check the session before and after writing:
// nothing releases per operation, so a lost lease is seen there.
func (c *Coordinator) Share(ctx context.Context, reqs []Request) (*Share, error) {
	sess := c.live(ctx)
	if err := sess.Check(); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return &Share{Sess: sess}, nil
	}
	reqs = dedupe(reqs)
	key := shareKey(reqs)
	sh := c.shares
	for {
		sh.mu.Lock()
		s := sh.by[key]
		if s != nil && (s.revoked || s.sess != sess) {
			s = nil // let it drain; a new lease on the same locks waits for it
		}
		if s == nil {
			if old := sh.by[key]; old != nil {
				sh.mu.Unlock()
				// Our own revoked lease still holds these locks: joining
				// is refused, and acquiring beside it would only wait.
				if err := sleepCtx(ctx, sharePoll/4); err != nil {
					return nil, err
				}
				continue
			}
			s = &share{key: key, reqs: reqs, sess: sess, ready: make(chan struct{}), users: 1, checked: map[string]uint64{}}
			sh.by[key] = s
			sh.mu.Unlock()
			c.acquireShare(ctx, s)
			if s.err != nil {
				return nil, s.err
			}
			return &Share{sh: sh, s: s, Sess: sess}, nil
		}
		s.users++
		sh.mu.Unlock()
		select {
		case <-s.ready:
		case <-ctx.Done():
			sh.end(s)
			return nil, ctx.Err()
		}
		if s.err != nil {
			sh.end(s)
			return nil, s.err
		}
		return &Share{sh: sh, s: s, Sess: sess}, nil
	}
}

func (c *Coordinator) acquireShare(ctx context.Context, s *share) {
	op, n := s.sess.BeginOp()
	held, err := c.Locks.Acquire(ctx, s.sess, op, s.reqs)
	c.shares.mu.Lock()
	s.op, s.n, s.held, s.err = op, n, held, err
	if err != nil {
		s.revoked = true
		if c.shares.by[s.key] == s {
			delete(c.shares.by, s.key)
		}
	}
	c.shares.mu.Unlock()
	if err != nil {
		s.sess.EndOp(n)
	}
	close(s.ready)
}

// Checked reports whether key was noted with value under this lease (for
// checks that hold as long as the lease does, such as "this directory path
// is this inode": nobody can rename it meanwhile).
func (h *Share) Checked(key string, value uint64) bool {
	if h.s == nil {
		return false
	}
	h.sh.mu.Lock()
	defer h.sh.mu.Unlock()
	v, ok := h.s.checked[key]
	return ok && v == value
}

// NoteChecked records a check made under this lease.
func (h *Share) NoteChecked(key string, value uint64) {
	if h.s == nil {
		return
	}
	h.sh.mu.Lock()
	defer h.sh.mu.Unlock()
	h.s.checked[key] = value
}

// End ends this operation's use of the lease.
func (h *Share) End() {
	if h.s == nil {
		return
	}
	h.once.Do(func() { h.sh.end(h.s) })
}

func (sh *shares) end(s *share) {
	sh.mu.Lock()
	s.users--
	release := false
	if s.users == 0 {
		s.idle = time.Now()
		if s.revoked && s.err == nil && sh.by[s.key] == s {
			delete(sh.by, s.key)
			release = true
		}
	}
	sh.mu.Unlock()
	if release {
		go sh.release(s)
	}
}

func (sh *shares) release(s *share) {
	ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), sh.c.cfg.Lease)
	defer cancel()
	if err := sh.c.Locks.Release(ctx, s.held); err != nil {
		sh.c.log.Debug("releasing a shared lease", "op", s.op, "err", err)
	}
	s.sess.EndOp(s.n)
}

// tend runs every sharePoll: it gives back idle leases, and revokes those
// on which an exclusive request waits (one mget for all of them).
func (sh *shares) tend(ctx context.Context) {
	now := time.Now()
	var idle []*share
	var ids []string
	owner := map[string][]*share{}
	cur := sh.c.Session()
	sh.mu.Lock()
	for key, s := range sh.by {
		select {
		case <-s.ready:
		default:
			continue // still being acquired
		}
		if s.sess != cur {
			s.revoked = true
		}
		if s.users == 0 && (s.revoked || now.Sub(s.idle) >= shareLinger) {
			delete(sh.by, key)
			idle = append(idle, s)
			continue
		}
		if s.revoked {
			continue
		}
		for _, r := range s.reqs {
			if owner[r.ID] == nil {
				ids = append(ids, r.ID)
			}
			owner[r.ID] = append(owner[r.ID], s)
		}
	}
	sh.mu.Unlock()
	for _, s := range idle {
		sh.release(s)
	}
	if len(ids) == 0 {
		return
	}
	docs, err := sh.c.b.GetLocks(ctx, ids)
	if err != nil {
		return // next time
	}
	var drained []*share
	sh.mu.Lock()
	for _, d := range docs {
		if len(d.Waiters) == 0 {
			continue
		}
		for _, s := range owner[d.ID] {
			if s.revoked {
				continue
			}
			s.revoked = true
			if s.users == 0 && sh.by[s.key] == s {
				delete(sh.by, s.key)
				drained = append(drained, s)
			}
		}
	}
	sh.mu.Unlock()
	for _, s := range drained {
		sh.release(s)
	}
}

// closeAll gives every lease back (the mount is ending: nobody uses them).
func (sh *shares) closeAll() {
	sh.mu.Lock()
	var all []*share
	for key, s := range sh.by {
		delete(sh.by, key)
		all = append(all, s)
	}
	sh.mu.Unlock()
	for _, s := range all {
		<-s.ready
		if s.err == nil {
			sh.release(s)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// Revoked reports whether h's lease admits nobody new any more: an
// exclusive request waits on one of its documents (or the session
// changed), and the lease goes once its last user ends. A user that holds
// it long (a write delegation's batch) ends it soon when this is true.
func (h *Share) Revoked() bool {
	if h.s == nil {
		return false
	}
	h.sh.mu.Lock()
	defer h.sh.mu.Unlock()
	return h.s.revoked
}
