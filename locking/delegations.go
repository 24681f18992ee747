package locking

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Delegations are a mount's revocable rights over whole directories, kept
// in the directory's delegation lock (store.DelegLockID, keyed by inode):
//
//   - a read delegation (mode store.ReadDeleg, shared among mounts) lets
//     the mount serve the directory's entries and their attributes from
//     memory, beyond every cache TTL, for as long as it holds it;
//   - a write delegation (store.Exclusive) also lets it change them in
//     memory and flush them later.
//
// Every change of a directory's entries or of their attributes, from any
// mount, takes the directory's delegation lock in mode store.Change along
// with its other locks (in the same two round trips). A change conflicts
// with other mounts' delegations, so before it is made every other holder
// is recalled: the changer writes its waiting marker and adds the lock to
// each holder's recall document (store.RecallDeleg); the holder, which
// reads only that one document every recallPoll, flushes what it owes,
// drops its caches (the Recall callback), and releases; the changer's next
// attempt is granted. A change is therefore visible to every mount as soon
// as the call that made it returns. A mount's delegation never conflicts
// with its own changes, which keep its cache current themselves.
//
// A grant is one attempt (TryAcquire): it never waits, never recalls, and
// yields to changes already waiting, so reading never slows writing. A
// holder that does not answer is a dead holder like any other: once its
// session is declared dead its entries are dropped, and its session is
// fenced. A directory recalled again and again stops being granted for a
// while (coolAfter recalls within coolWindow: for coolFor), so that two
// mounts working in one directory fall back to the synchronous protocol
// instead of passing a delegation back and forth, which costs each change
// a recall (and each recall of a write delegation a flush) on top of the
// synchronous path it was meant to spare; and one whose grants keep being
// refused is asked for less and less often (refusedSkip).

const (
	// recallPoll is how often a holder that used a delegation within
	// activeFor reads its recall document; idlePoll how often one that
	// did not does. An idle mount (the common state of most mounts of a
	// cluster, each holding the directories it last looked at) then costs
	// the cluster 10 reads a second instead of 40, and a change in a
	// directory it holds waits a little longer for its answer.
	recallPoll = 25 * time.Millisecond
	idlePoll   = 100 * time.Millisecond
	activeFor  = 5 * time.Second
	coolWindow = 10 * time.Second
	coolAfter  = 8
	coolFor    = 5 * time.Second
	// refusedSkip: after a second grant in a row was refused (another
	// mount holds or is changing the directory), the next one is not
	// asked for, then the next 2, 4... up to refusedSkip: in a directory
	// another mount keeps changing, every lookup would otherwise pay a
	// refused attempt (a round trip) before its synchronous read. Counted
	// in calls, not time, so that what a mount asks of the cluster
	// follows from its calls alone (TestRequestLog).
	refusedSkip = 64
)

// refusal counts a directory's grants refused in a row, and how many of
// the next are not asked for (see refusedSkip).
type refusal struct {
	n, skip int
}

// ErrCooling refuses a grant on a directory recalled too often lately.
var ErrCooling = errors.New("directory recalled too often lately")

// Delegation is one held delegation. What was cached under it is valid
// until it is Revoked.
type Delegation struct {
	Ino  uint64
	Path string // the directory's path when granted, for display
	Mode store.LockMode
	sess *Session
	op   string
	held *Held
	// recalled is closed when the delegation stops covering anything: a
	// recall began, the session changed, or the mount is ending.
	recalled chan struct{}
	once     sync.Once
	given    sync.Once
	// mu protects held's document between a batch's marks (see
	// Journal.Flush) and the release.
	mu lockorder.Mutex
	// recaller: the session that recalled it, to nudge once it is given
	// back (set under Delegations.mu, read by the goroutine that gives it).
	recaller string
}

// Writable reports whether d is a write delegation.
func (d *Delegation) Writable() bool { return d.Mode == store.Exclusive }

// markedDoc is d's lock document as last known, with this holder's entry
// marked with batch op.
func (d *Delegation) markedDoc(op string) store.LockDoc {
	d.mu.Lock()
	defer d.mu.Unlock()
	doc := d.held.docs[0]
	hs := make([]store.Holder, len(doc.Holders))
	copy(hs, doc.Holders)
	for i, h := range hs {
		if h.Session == d.sess.ID() && h.Op == d.op {
			hs[i].Batch = op
		}
	}
	doc.Holders = hs
	return doc
}

// noteMarked records the document a mark wrote, at version v.
func (d *Delegation) noteMarked(op string, v store.Version) {
	doc := d.markedDoc(op)
	doc.Found, doc.Ver = true, v
	d.mu.Lock()
	d.held.docs[0] = doc
	d.mu.Unlock()
}

// refresh replaces the document as last known by doc, as read.
func (d *Delegation) refresh(doc store.LockDoc) {
	d.mu.Lock()
	d.held.docs[0] = doc
	d.mu.Unlock()
}

// Revoked reports whether d no longer covers anything.
func (d *Delegation) Revoked() bool {
	select {
	case <-d.recalled:
		return true
	default:
		return d.sess.Check() != nil
	}
}

// Lost reports whether d's session was declared dead: whatever was made
// under d may never land (another mount may have changed the directory,
// or removed it, since).
func (d *Delegation) Lost() bool { return d.sess.Declared() }

func (d *Delegation) revoke() { d.once.Do(func() { close(d.recalled) }) }

// Delegations are the delegations of one mount.
type Delegations struct {
	c *Coordinator
	// Recall is called before a delegation is given back: it must make
	// everything the mount did under it visible to every mount and drop
	// whatever it cached under it (the daemon's and the kernel's). It is
	// called once per delegation, outside any lock of this type; the
	// delegation is already revoked, so nothing new is cached under it.
	Recall func(ctx context.Context, d *Delegation)

	// closing: the mount is ending; its kernel connection may be gone,
	// and nobody reads what it cached: delegations are released without
	// the Recall callback.
	closing atomic.Bool
	// used is when a delegation was last used (Touch), lastPoll when the
	// recall document was last read (by answer only), both on bootNow's
	// clock.
	used     atomic.Int64
	lastPoll time.Duration

	mu      lockorder.Mutex
	held    map[uint64]*Delegation
	pending map[uint64]chan struct{} // grants under way
	recalls map[uint64][]time.Time   // recent recalls, by directory
	cool    map[uint64]time.Time     // no grant until
	refused map[uint64]refusal       // grants refused lately
}

func newDelegations(c *Coordinator) *Delegations {
	return &Delegations{c: c, held: map[uint64]*Delegation{}, pending: map[uint64]chan struct{}{},
		recalls: map[uint64][]time.Time{}, cool: map[uint64]time.Time{}, refused: map[uint64]refusal{}}
}

// Held returns this mount's valid delegation on directory ino, or nil.
func (ds *Delegations) Held(ino uint64) *Delegation {
	ds.mu.Lock()
	d := ds.held[ino]
	ds.mu.Unlock()
	if d == nil || d.Revoked() {
		return nil
	}
	return d
}

// Grant returns a delegation of mode (store.ReadDeleg or store.Exclusive)
// on directory ino, at path now: the one held if it is at least as
// strong, else a new one if nobody conflicts. It never waits for other
// mounts: a conflict is ErrLocked, a directory recalled too often lately
// ErrCooling. A read delegation held when a write one is asked for is kept
// (upgrades are not made in place).
func (ds *Delegations) Grant(ctx context.Context, ino uint64, path string, mode store.LockMode) (*Delegation, error) {
	ds.Touch()
	for {
		ds.mu.Lock()
		if d := ds.held[ino]; d != nil && !d.Revoked() {
			ds.mu.Unlock()
			if d.Mode == mode || d.Mode == store.Exclusive {
				return d, nil
			}
			return nil, fmt.Errorf("directory %d is held for reading: %w", ino, ErrLocked)
		}
		if until, ok := ds.cool[ino]; ok {
			if time.Now().Before(until) {
				ds.mu.Unlock()
				return nil, ErrCooling
			}
			delete(ds.cool, ino)
		}
		if r, ok := ds.refused[ino]; ok && r.skip > 0 {
			r.skip--
			ds.refused[ino] = r
			ds.mu.Unlock()
			return nil, fmt.Errorf("directory %d: refused %d times in a row lately: %w", ino, r.n, ErrLocked)
		}
		if wait, ok := ds.pending[ino]; ok {
			ds.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if old := ds.held[ino]; old != nil {
			// Revoked, and not yet given back: no new grant beside it.
			ds.mu.Unlock()
			return nil, fmt.Errorf("directory %d is being recalled: %w", ino, ErrLocked)
		}
		done := make(chan struct{})
		ds.pending[ino] = done
		ds.mu.Unlock()
		d, err := ds.grant(ctx, ino, path, mode)
		ds.mu.Lock()
		delete(ds.pending, ino)
		if d != nil {
			ds.held[ino] = d
			ds.c.Locks.metrics.delegHeld(mode, 1)
			delete(ds.refused, ino)
		}
		if errors.Is(err, ErrLocked) {
			r := ds.refused[ino]
			r.n++
			if r.n >= 2 {
				// From the second in a row: one is a passing change.
				r.skip = min(1<<min(r.n-2, 10), refusedSkip)
			}
			ds.refused[ino] = r
		}
		ds.mu.Unlock()
		close(done)
		ds.c.Locks.metrics.granted(mode, err)
		return d, err
	}
}

// Upgrade asks for a write delegation on the directory of d, a read
// delegation this mount holds: one attempt, as Grant, granted if no other
// mount holds or waits for anything there (this mount's own entries never
// conflict with it). It is granted while d still covers the directory, so
// nothing changed it in between, and what the mount learned under d stays
// true under the new one: move (called with this type's lock held, so
// that no recall picks either delegation meanwhile; it must not call back
// here) moves it there, or refuses. Then d is given back without the
// Recall callback: its lock entry goes, and the new delegation alone
// stands for what was cached. It returns nil when nothing was upgraded.
func (ds *Delegations) Upgrade(ctx context.Context, d *Delegation, move func(w *Delegation) bool) (*Delegation, error) {
	ds.mu.Lock()
	if ds.held[d.Ino] != d || d.Revoked() || d.Writable() {
		ds.mu.Unlock()
		return nil, fmt.Errorf("directory %d: no read delegation to upgrade: %w", d.Ino, ErrLocked)
	}
	if until, ok := ds.cool[d.Ino]; ok && time.Now().Before(until) {
		ds.mu.Unlock()
		return nil, ErrCooling
	}
	if r := ds.recalls[d.Ino]; len(r) > 0 && time.Since(r[len(r)-1]) < coolWindow {
		// Another mount used the directory lately: it is shared, and a
		// write delegation would only be recalled again, with a flush.
		ds.mu.Unlock()
		return nil, ErrCooling
	}
	if _, ok := ds.pending[d.Ino]; ok {
		ds.mu.Unlock()
		return nil, fmt.Errorf("directory %d is being granted: %w", d.Ino, ErrLocked)
	}
	done := make(chan struct{})
	ds.pending[d.Ino] = done
	ds.mu.Unlock()
	w, err := ds.grant(ctx, d.Ino, d.Path, store.Exclusive)
	ds.mu.Lock()
	delete(ds.pending, d.Ino)
	moved := w != nil && ds.held[d.Ino] == d && !d.Revoked() && !w.Revoked() && move(w)
	if moved {
		ds.held[d.Ino] = w
	}
	ds.mu.Unlock()
	close(done)
	ds.c.Locks.metrics.granted(store.Exclusive, err)
	ctx = context.WithoutCancel(ctx)
	switch {
	case err != nil:
		return nil, err
	case !moved:
		// Recalled while we asked (what d covered may have changed), or
		// refused: the new entry goes at once.
		if rerr := ds.c.Locks.releaseOrOwe(ctx, w.sess, w.held); rerr != nil {
			ds.c.log.Debug("giving back an upgrade not used", "dir", d.Ino, "err", rerr)
		}
		return nil, nil
	}
	ds.c.Locks.metrics.delegHeld(store.Exclusive, 1)
	// d is given back without the callback, unless a recall that picked
	// it before the move gives it back now (the callback then finds
	// nothing of d's: the new delegation stands for it, and the recall
	// reaches that one next).
	ds.Drop(ctx, d)
	return w, nil
}

func (ds *Delegations) grant(ctx context.Context, ino uint64, path string, mode store.LockMode) (*Delegation, error) {
	sess := ds.c.live(ctx)
	op := sess.LeaseOp()
	req := Request{ID: store.DelegLockID(ino), Path: path, Mode: mode}
	held, err := ds.c.Locks.TryAcquire(ctx, sess, op, []Request{req})
	if err != nil {
		return nil, err
	}
	return &Delegation{Ino: ino, Path: path, Mode: mode, sess: sess, op: op, held: held,
		recalled: make(chan struct{})}, nil
}

// Change is the request every change of the entries of directory ino (at
// path, for display) adds to its locks: it recalls other mounts'
// delegations on the directory before the change is made.
func Change(ino uint64, path string) Request {
	return Request{ID: store.DelegLockID(ino), Path: path, Mode: store.Change}
}

// List returns the delegations held now (for status and tests).
func (ds *Delegations) List() []*Delegation {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	out := make([]*Delegation, 0, len(ds.held))
	for _, d := range ds.held {
		if !d.Revoked() {
			out = append(out, d)
		}
	}
	return out
}

// Give returns delegation d: the Recall callback first, then the lock.
func (ds *Delegations) Give(ctx context.Context, d *Delegation) {
	d.given.Do(func() { ds.give(ctx, d) })
}

// Drop gives back delegation d on a directory this mount removed: nothing
// cached under it can be asked for again, so the Recall callback is not
// run; only the lock entry goes (and its document, if it was the last).
func (ds *Delegations) Drop(ctx context.Context, d *Delegation) {
	d.given.Do(func() { ds.release(ctx, d) })
}

func (ds *Delegations) give(ctx context.Context, d *Delegation) {
	d.revoke()
	if ds.Recall != nil && !ds.closing.Load() {
		ds.Recall(ctx, d)
	}
	ds.release(ctx, d)
}

func (ds *Delegations) release(ctx context.Context, d *Delegation) {
	d.revoke()
	ctx = context.WithoutCancel(ctx)
	if err := ds.c.Locks.releaseOrOwe(ctx, d.sess, d.held); err != nil {
		// Tried again until it lands: other mounts wait for the entry.
		ds.c.log.Debug("giving back a delegation", "dir", d.Ino, "err", err)
	}
	ds.mu.Lock()
	if ds.held[d.Ino] == d {
		delete(ds.held, d.Ino)
	}
	ds.mu.Unlock()
	ds.c.Locks.metrics.delegHeld(d.Mode, -1)
}

// Touch records that the mount answered something from a delegation: it
// is active, and reads its recall document at the faster pace.
func (ds *Delegations) Touch() { ds.used.Store(int64(bootNow())) }

// answer reads this mount's recall document and gives back every
// delegation asked for.
func (ds *Delegations) answer(ctx context.Context) {
	ds.mu.Lock()
	var any bool
	var stale []*Delegation
	sess := ds.c.Session()
	for _, d := range ds.held {
		any = true
		if d.sess != sess || d.Revoked() {
			stale = append(stale, d)
		}
	}
	ds.mu.Unlock()
	for _, d := range stale {
		// The session changed, or could not be renewed for a lease
		// (others may declare it dead and change the directory without
		// reaching us): what was cached under it must go now.
		ds.Give(ctx, d)
	}
	if !any && !ds.c.Locks.strays.Load() {
		return
	}
	now := bootNow()
	if !nudgedNow(ctx) && now-time.Duration(ds.used.Load()) > activeFor && now-ds.lastPoll < idlePoll {
		return
	}
	ds.lastPoll = now
	r, err := ds.c.b.GetRecalls(ctx, sess.ID())
	if err != nil || len(r.Wanted) == 0 {
		return
	}
	seen := time.Now()
	// What the answer costs is made for the calls of other mounts that
	// wait for it, not for this mount's upkeep.
	ctx = store.ForCall(ctx)
	var give []*Delegation
	var stray []string
	ds.mu.Lock()
	for id := range r.Wanted {
		found := false
		for ino, d := range ds.held {
			if store.DelegLockID(ino) == id {
				d.recaller = r.By[id]
				give = append(give, d)
				ds.noteRecallLocked(ino, seen)
				found = true
			}
		}
		if !found && !ds.pendingLocked(id) {
			stray = append(stray, id)
		}
	}
	ds.mu.Unlock()
	var wg sync.WaitGroup
	for _, d := range give {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds.Give(ctx, d)
			ds.c.Locks.metrics.recallAnswered(time.Since(seen))
			if d.recaller != "" && d.recaller != sess.ID() {
				ds.c.nudge.send(d.recaller, nudgeWake, ds.c.b.GetSession)
			}
		}()
	}
	for _, id := range stray {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ds.releaseStray(ctx, sess, id)
		}()
	}
	wg.Wait()
	// Recalls added since our read survive: the delete is conditional.
	if _, err := ds.c.b.Write(ctx, store.ClearRecalls(r)); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
		ds.c.log.Debug("clearing recalls", "err", err)
	}
}

func (ds *Delegations) noteRecallLocked(ino uint64, t time.Time) {
	recent := ds.recalls[ino][:0]
	for _, at := range ds.recalls[ino] {
		if t.Sub(at) < coolWindow {
			recent = append(recent, at)
		}
	}
	recent = append(recent, t)
	ds.recalls[ino] = recent
	if len(recent) >= coolAfter {
		if until := t.Add(coolFor); until.After(ds.cool[ino]) {
			ds.cool[ino] = until
		}
		delete(ds.recalls, ino)
	}
}

// closeAll gives every delegation back (the mount is ending).
func (ds *Delegations) closeAll(ctx context.Context) {
	ds.closing.Store(true)
	// One release each: a few at a time, so that a mount holding many
	// ends in a few round trips' time.
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, d := range ds.List() {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ds.Give(ctx, d)
		}()
	}
	wg.Wait()
}
