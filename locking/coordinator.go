package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Config configures a mount's coordinator.
type Config struct {
	Strategy    string        // tree (default), document or global
	Lease       time.Duration // session lease (default 10s)
	Grace       time.Duration // added before declaring another session dead (default Lease/2)
	LockTimeout time.Duration // how long an operation waits for locks (default 30s)
	Mount       string
	Log         *slog.Logger
	// NoSweeper turns off the background recovery (for tools that only
	// read, and for tests of the sweeper itself).
	NoSweeper bool
	// Metrics watches locks and renames; nil makes a private set.
	Metrics *Metrics
	// Stats, if set, gives the figures the heartbeat publishes in the
	// session document for `esfs status`.
	Stats func() map[string]float64
	// Build and Options describe the mount in its session document, for
	// `esfs status`: which esfs it runs, and the flags that matter to an
	// operator.
	Build   string
	Options map[string]string
	// NudgeListen is the UDP address the mount takes nudges on (see
	// nudge.go; port 0: any), NudgeHost the host others send them to
	// (empty: NudgeListen's). No NudgeListen: the mount is only polled,
	// and polls.
	NudgeListen, NudgeHost string
}

// sessionConfig is the configuration of this coordinator's sessions.
func (c Config) sessionConfig(n *nudger) SessionConfig {
	sc := SessionConfig{Lease: c.Lease, Grace: c.Grace, Mount: c.Mount, Log: c.Log, Stats: c.Stats, Build: c.Build, Options: c.Options}
	if n != nil {
		sc.Nudge = n.public
	}
	return sc
}

// Coordinator is one mount's side of the protocol: its session, lock
// manager, journal, strategy and the background sweeper.
type Coordinator struct {
	b   Backend
	cfg Config
	log *slog.Logger

	Strategy Strategy
	Locks    *Manager
	Journal  *Journal
	// View is how this session reads the tree: only what readers see.
	View *View

	mu   lockorder.Mutex // protects sess and obs
	sess *Session
	obs  *Observer
	// nudge sends and takes nudges (nudge.go); nil: off.
	nudge *nudger
	// renewing is held while a new session is started, so that the
	// sweeper and operations that meet the lost one start one between
	// them.
	renewing lockorder.Mutex
	// damagedOps: the operations whose recovery a damaged document
	// fails, with that document, each logged once (warnRecovery).
	damagedOps sync.Map

	shares  *shares
	tending chan struct{} // closed when the shares' tending has returned

	// Delegations are this mount's delegations on directories.
	Delegations *Delegations
	// FileLocks are the advisory locks (flock, fcntl) programs take here.
	FileLocks *FileLocks
	answering chan struct{} // closed when answering recalls has returned
	mending   chan struct{} // closed when mending file lock documents has returned
	owing     chan struct{} // closed when removing owed lock entries has returned

	stop chan struct{}
	done chan struct{}
}

// Start registers a session and starts the sweeper.
func Start(ctx context.Context, b Backend, cfg Config) (*Coordinator, error) {
	if cfg.Lease <= 0 {
		cfg.Lease = 10 * time.Second
	}
	if cfg.Grace <= 0 {
		cfg.Grace = cfg.Lease / 2
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	strategy, err := NewStrategy(cfg.Strategy)
	if err != nil {
		return nil, err
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	var nudge *nudger
	if cfg.NudgeListen != "" {
		if nudge, err = newNudger(cfg.NudgeListen, cfg.NudgeHost, cfg.Log, cfg.Metrics); err != nil {
			return nil, fmt.Errorf("listening for nudges on %s: %w", cfg.NudgeListen, err)
		}
	}
	sess, err := StartSession(ctx, b, cfg.sessionConfig(nudge))
	if err != nil {
		nudge.close()
		return nil, err
	}
	c := &Coordinator{b: b, cfg: cfg, log: cfg.Log, Strategy: strategy, sess: sess, nudge: nudge,
		stop: make(chan struct{}), done: make(chan struct{})}
	c.obs = NewObserver(b, sess.ID(), cfg.Grace, cfg.Log)
	c.obs.nudge = nudge
	c.Locks = NewManager(b, c.obs, cfg.LockTimeout, cfg.Log)
	c.Locks.nudge = nudge
	if cfg.Metrics != nil {
		c.Locks.metrics = cfg.Metrics
	}
	c.Journal = NewJournal(b, c.Locks, c.Session, cfg.Log)
	c.View = NewView(b, c.Journal)
	c.shares = &shares{c: c, by: map[string]*share{}}
	c.tending = make(chan struct{})
	c.Delegations = newDelegations(c)
	c.FileLocks = newFileLocks(c)
	c.answering = make(chan struct{})
	c.mending = make(chan struct{})
	go c.run()
	go c.FileLocks.mend(c.stop, c.mending)
	c.owing = make(chan struct{})
	go c.Locks.mendReleases(c.stop, c.owing, cfg.Lease)
	go c.every(sharePoll, c.tending, c.shares.tend, nil)
	var nudged <-chan struct{}
	if nudge != nil {
		nudged = nudge.recall
	}
	go c.every(recallPoll, c.answering, c.Delegations.answer, nudged)
	return c, nil
}

// Session returns the mount's current session. When a session is declared
// dead, the mount starts a new one: operations that began under the old
// one fail (EIO), later ones work.
func (c *Coordinator) Session() *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sess
}

// live returns the session under which a new operation runs: the current
// one, or, when that one was declared dead, a new one started at once, so
// that an operation that begins after the mount learned of its death (a
// mount woken from a freeze) works rather than fail in the moments before
// the sweeper gets round to it. If no new session can be started, the lost
// one is returned and the operation fails with it.
func (c *Coordinator) live(ctx context.Context) *Session {
	if sess := c.Session(); !sess.Declared() {
		return sess
	}
	rctx, cancel := context.WithTimeout(store.Upkeep(context.WithoutCancel(ctx)), c.cfg.Lease)
	defer cancel()
	c.renewSession(rctx)
	return c.Session()
}

func (c *Coordinator) renewSession(ctx context.Context) {
	c.renewing.Lock()
	defer c.renewing.Unlock()
	c.mu.Lock()
	old := c.sess
	c.mu.Unlock()
	if !old.Declared() {
		return // started by someone else meanwhile
	}
	sess, err := StartSession(ctx, c.b, c.cfg.sessionConfig(c.nudge))
	if errors.Is(err, store.ErrNoIndex) {
		// Destroyed: said once by the lost session; asked again at every
		// sweep, in case it is made anew.
		c.log.Debug("could not start a new session", "err", err)
		return
	}
	if err != nil {
		c.log.Warn("could not start a new session", "err", err)
		return
	}
	c.mu.Lock()
	c.sess = sess
	c.obs = NewObserver(c.b, sess.ID(), c.cfg.Grace, c.cfg.Log)
	c.obs.nudge = c.nudge
	c.Locks.obs.Store(c.obs)
	c.mu.Unlock()
	c.log.Warn("started a new session after the old one was declared dead", "old", old.ID(), "new", sess.ID())
}

// run is the sweeper: it watches every session's heartbeat so that deaths
// are noticed within lease + grace, finishes or undoes the operations of
// dead mounts even when nobody trips over them, removes their leftover lock
// entries, and collects finished records.
func (c *Coordinator) run() {
	defer close(c.done)
	if c.cfg.NoSweeper {
		<-c.stop
		return
	}
	t := time.NewTicker(c.cfg.Lease / 3)
	defer t.Stop()
	doneSeen := map[string]time.Duration{}
	for {
		select {
		case <-c.stop:
			return
		case <-c.Session().Lost():
			ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), c.cfg.Lease)
			c.renewSession(ctx)
			cancel()
			continue
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), 4*c.cfg.Lease)
		if err := c.Sweep(ctx, doneSeen); err != nil {
			c.log.Debug("sweep", "err", err)
		}
		cancel()
	}
}

// Sweep runs one round of the sweeper. doneSeen remembers, on this
// machine's clock, since when each finished record was seen finished.
func (c *Coordinator) Sweep(ctx context.Context, doneSeen map[string]time.Duration) error {
	c.Journal.RetryUnfinished(ctx)
	if err := c.Session().Check(); err != nil {
		return err
	}
	c.mu.Lock()
	obs := c.obs
	c.mu.Unlock()
	if _, err := obs.Watch(ctx); err != nil {
		return err
	}
	recs, err := c.b.SearchOps(ctx)
	if err != nil {
		return err
	}
	now := bootNow()
	live := map[string]bool{}
	for _, rec := range recs {
		live[rec.ID] = true
		if rec.State == store.OpDone {
			first, ok := doneSeen[rec.ID]
			if !ok {
				doneSeen[rec.ID] = now
				continue
			}
			// Finished records are kept a while so that readers meeting a
			// stray document of the operation learn it is garbage; after
			// that, a missing record reads as aborted anyway.
			if now-first > 20*c.cfg.Lease {
				if _, err := c.b.Write(ctx, store.DeleteOp(rec.ID, rec.Ver)); err == nil {
					delete(doneSeen, rec.ID)
				}
			}
			continue
		}
		if me := c.Session().ID(); rec.Owner == me {
			// Our own operations are retried by the journal; one we took
			// over, whose recovery failed or ran out of time, is ours to
			// resume: nobody else takes over a live owner's record.
			if !strings.HasPrefix(rec.ID, me+"-") && rec.State != store.OpPrepared {
				if err := c.Journal.Resume(ctx, rec); err != nil {
					c.warnRecovery("resuming the recovery of an operation", rec.ID, err)
				}
			}
			continue
		}
		dead, err := obs.Dead(ctx, rec.Owner)
		if err != nil || !dead {
			continue
		}
		if err := c.Journal.Recover(ctx, rec); err != nil {
			c.warnRecovery("recovering an operation of a dead mount", rec.ID, err)
		}
	}
	for id := range doneSeen {
		if !live[id] {
			delete(doneSeen, id)
		}
	}
	if err := c.collectStrays(ctx); err != nil {
		return err
	}
	if err := c.collectKept(ctx, obs); err != nil {
		return err
	}
	locks, err := c.b.SearchLocks(ctx)
	if err != nil {
		return err
	}
	c.FileLocks.check(locks)
	for _, d := range locks {
		var keep []store.Holder
		changed := false
		for _, h := range d.Holders {
			gone, err := c.Locks.HolderGone(ctx, h)
			if err != nil {
				return err
			}
			if gone {
				changed = true
				continue
			}
			keep = append(keep, h)
		}
		var waiters []store.Waiter
		for _, w := range d.Waiters {
			if dead, err := obs.Dead(ctx, w.Session); err == nil && dead {
				changed = true
				continue
			}
			// A marker whose request gave up without clearing it (the
			// clearing request failed): its session says the op is over.
			if fin, err := obs.Finished(ctx, w.Session, w.Op); err == nil && fin {
				changed = true
				continue
			}
			waiters = append(waiters, w)
		}
		if !changed {
			continue
		}
		nd := d
		nd.Holders, nd.Waiters = keep, waiters
		if _, err := c.b.Bulk(ctx, store.WriteLocks([]store.LockWrite{{Doc: nd, Delete: len(keep) == 0 && len(waiters) == 0}})); err != nil {
			c.log.Debug("dropping leftover lock entries", "lock", d.Path, "err", err)
		}
	}
	return nil
}

// collectKept deletes the files dead mounts kept without links
// (store.Inode.Keeper): each was open on its mount when its last link went,
// and would have been deleted at its last close there, which will never
// come. A keeper judged dead that is still running has lost its session
// and, with it, what it held open.
func (c *Coordinator) collectKept(ctx context.Context, obs *Observer) error {
	sc := c.b.ScanInodes(store.KeptInodes)
	for {
		page, _, err := sc.Next(ctx)
		if err != nil || page == nil {
			return err
		}
		for _, n := range page {
			if n.Nlink > 0 && n.Type != store.TypeDir {
				continue // linked again since (Linked clears the keeper): not ours to judge
			}
			if dead, err := obs.Dead(ctx, n.Keeper); err != nil || !dead {
				continue
			}
			if _, err := RemoveUnlinked(ctx, c.b, n); err != nil {
				c.log.Debug("deleting a file a dead mount kept open without links", "ino", n.Ino, "keeper", n.Keeper, "err", err)
				continue
			}
			c.log.Info("deleted a file a dead mount kept open without links", "ino", n.Ino, "keeper", n.Keeper)
		}
	}
}

// collectStrays resolves path documents that carry the intent of a
// finished operation. No legitimate document does (finishing strips every
// intent before DONE); they are late writes of a request that timed out or
// of a fenced owner that woke up, and would otherwise hold their
// name and an intent forever. Operations in flight are left alone, and
// those of dead owners are recovered above.
func (c *Coordinator) collectStrays(ctx context.Context) error {
	sc := c.b.ScanIntents(store.DefaultPageSize)
	defer sc.Close()
	// One read per operation, not per document: a rename in flight marks
	// every document of its subtree.
	states := map[string]store.OpState{}
	for {
		page, _, err := sc.Next(ctx)
		if err != nil || page == nil {
			return err
		}
		for _, d := range page {
			state, ok := states[d.Intent.Op]
			if !ok {
				rec, err := c.Journal.record(ctx, d.Intent.Op)
				if err != nil {
					return err
				}
				state = rec.State
				states[d.Intent.Op] = state
			}
			if state != store.OpDone {
				continue
			}
			err = c.Journal.ResolveStray(ctx, d)
			if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
				continue // changed since the search: looked at next time
			}
			if err != nil {
				return err
			}
			c.log.Info("resolved a stray document of a finished rename", "path", d.Path, "op", d.Intent.Op, "role", d.Intent.Role)
		}
	}
}

// Close stops the sweeper and ends the session cleanly. Call it after
// every operation finished.
func (c *Coordinator) Close(ctx context.Context) error {
	c.Journal.WaitFinishing() // renames told done, whose locks are still held
	close(c.stop)
	<-c.done
	<-c.tending
	<-c.answering
	defer c.nudge.close() // after the last release, which may wake others
	<-c.mending
	<-c.owing
	c.shares.closeAll()
	c.Delegations.closeAll(ctx)
	c.FileLocks.ReleaseAll(ctx)
	c.Journal.RetryUnfinished(ctx)
	if n := c.Journal.Unfinished(); n > 0 {
		c.log.Warn("closing with unfinished renames; another mount recovers them after the lease", "count", n)
	}
	return c.Session().Close(ctx)
}

// every runs fn each period until the coordinator stops, each run bounded
// by the lease, and closes done when it returns. The shared leases are
// looked after this way (shares.go), and recalls answered
// (delegations.go).
//
// A receive on now runs fn at once (a nudge), marked so in its context
// (nudgedNow).
func (c *Coordinator) every(period time.Duration, done chan struct{}, fn func(context.Context), now <-chan struct{}) {
	defer close(done)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		nudged := false
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-now:
			nudged = true
		}
		ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), c.cfg.Lease)
		if nudged {
			ctx = context.WithValue(ctx, nudgedKey{}, true)
		}
		fn(ctx)
		cancel()
	}
}

type nudgedKey struct{}

// nudgedNow reports whether every runs fn for a nudge.
func nudgedNow(ctx context.Context) bool { return ctx.Value(nudgedKey{}) != nil }

// warnRecovery logs the failure of the recovery of operation op. One that
// a damaged document causes fails the same way at every sweep until the
// document is mended (esfs fsck --repair) or removed: it is logged once.
func (c *Coordinator) warnRecovery(msg, op string, err error) {
	var de *store.DocError
	if errors.As(err, &de) {
		if _, seen := c.damagedOps.LoadOrStore(op+" "+de.Index+"/"+de.ID, true); seen {
			return
		}
	}
	c.log.Warn(msg, "op", op, "err", err)
}
