// This mount's word on its own file lock entries: which owner holds what
// (owned), the document as that word has it (view), and the mender, which
// brings the documents back to it when an answer was lost, a release
// failed or a write landed late.

package locking

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// inoTurn lets one request at a time of this mount read and write one
// lock document: they would only refuse each other's compare-and-sets,
// and a request that settles an unknown outcome must not have the
// mender undo what it is about to learn it holds.
type inoTurn struct {
	mu    lockorder.Mutex
	users int
}

// turn waits for ino's turn and returns its end. LOCK ORDERING: a turn is
// taken without fl.mu held; fl.mu may be taken while holding one.
func (fl *FileLocks) turn(ino uint64) func() {
	fl.mu.Lock()
	t := fl.turns[ino]
	if t == nil {
		t = &inoTurn{}
		fl.turns[ino] = t
	}
	t.users++
	fl.mu.Unlock()
	t.mu.Lock()
	return func() {
		t.mu.Unlock()
		fl.mu.Lock()
		if t.users--; t.users == 0 {
			delete(fl.turns, ino)
		}
		fl.mu.Unlock()
	}
}

// begin and end bracket a request of owner k on ino; a request that ends
// with its outcome in doubt leaves the document to the mender.
func (fl *FileLocks) begin(ino uint64, k ownerKey) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	m := fl.busy[ino]
	if m == nil {
		m = map[ownerKey]int{}
		fl.busy[ino] = m
	}
	m[k]++
}

func (fl *FileLocks) end(ino uint64, k ownerKey, doubt bool) {
	fl.mu.Lock()
	m := fl.busy[ino]
	if m[k]--; m[k] == 0 {
		delete(m, k)
	}
	if len(m) == 0 {
		delete(fl.busy, ino)
	}
	fl.mu.Unlock()
	if doubt {
		fl.markDirty(ino)
	}
}

// markDirty has the mender look at ino's document.
func (fl *FileLocks) markDirty(ino uint64) {
	fl.mu.Lock()
	fl.dirty[ino] = true
	fl.mu.Unlock()
	select {
	case fl.kick <- struct{}{}:
	default:
	}
}

// ownedOf returns a copy of owner k's entries on ino.
func (fl *FileLocks) ownedOf(ino uint64, k ownerKey) []store.Holder {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return append([]store.Holder(nil), fl.owned[ino][k]...)
}

// setOwned records owner k's entries on ino, as granted under sess.
func (fl *FileLocks) setOwned(sess *Session, ino uint64, k ownerKey, hs []store.Holder) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.sess != sess {
		return // the session's locks are lost, these with them
	}
	m := fl.owned[ino]
	if len(hs) == 0 {
		delete(m, k)
		if len(m) == 0 {
			delete(fl.owned, ino)
		}
		return
	}
	if m == nil {
		m = map[ownerKey][]store.Holder{}
		fl.owned[ino] = m
	}
	m[k] = append([]store.Holder(nil), hs...)
	delete(fl.lost, ino)
}

// giveUp ends a request whose grant's outcome stayed unknown: its caller
// is told it failed, so its owner holds what it held before and no more
// (the mender drops what landed). A request that also gave rights back
// (a downgrade of part of its range) may have landed that part, which
// someone may hold since: the owner keeps only the rights both states
// have, and the locks on the file are reported lost, as after a lost
// session, since its process may believe it holds more.
func (fl *FileLocks) giveUp(sess *Session, r *fileRequest) {
	kept := intersect(r.base, r.want)
	fl.setOwned(sess, r.ino, r.k, kept)
	if !sameEntries(kept, r.base) {
		fl.mu.Lock()
		fl.lost[r.ino] = true
		fl.mu.Unlock()
	}
}

// view returns doc as this mount's word has it, and whether that differs
// from doc: the entries of this mount's owners with no request under way
// cut down to what they own (never more than doc holds of them), and its
// waiting markers of waits that ended dropped. Others' entries are left
// as they are.
func (fl *FileLocks) view(ino uint64, doc store.LockDoc, me string) (store.LockDoc, bool) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.sess == nil || fl.sess.ID() != me {
		return doc, false
	}
	owned, busy := fl.owned[ino], fl.busy[ino]
	changed := false
	var hs []store.Holder
	done := map[ownerKey]bool{}
	for _, h := range doc.Holders {
		k := ownerKey{h.Owner, h.Flock}
		switch {
		case h.Session != me || busy[k] > 0:
			hs = append(hs, h)
		case !done[k]:
			done[k] = true
			have := ownerEntries(doc.Holders, me, k)
			keep := intersect(have, owned[k])
			if !sameEntries(keep, have) {
				changed = true
			} else {
				keep = have
			}
			hs = append(hs, keep...)
		}
	}
	var ws []store.Waiter
	for _, w := range doc.Waiters {
		if w.Session == me && !fl.waiting[w.Op] {
			changed = true
			continue
		}
		ws = append(ws, w)
	}
	if !changed {
		return doc, false
	}
	v := doc
	v.Holders, v.Waiters = hs, ws
	return v, true
}

// mend runs until stop is closed: it brings the documents marked dirty
// back to this mount's word (see mendLoop).
func (fl *FileLocks) mend(stop <-chan struct{}, done chan<- struct{}) {
	mendLoop(stop, done, fl.kick, fl.c.cfg.Lease, fl.mendAll)
}

// mendLoop runs until stop is closed: it calls try at once when kick
// fires, and with backoff (up to a third of the lease) while try reports
// work left, each call bounded by the lease.
func mendLoop(stop <-chan struct{}, done chan<- struct{}, kick <-chan struct{}, lease time.Duration, try func(context.Context) bool) {
	defer close(done)
	for round := 0; ; {
		var retry <-chan time.Time
		if round > 0 {
			retry = time.After(min(5*time.Millisecond<<min(round, 10), lease/3))
		}
		select {
		case <-stop:
			return
		case <-kick:
		case <-retry:
		}
		ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), lease)
		if try(ctx) {
			round = 0
		} else {
			round++
		}
		cancel()
	}
}

// mendAll mends every document marked dirty; it reports whether all are
// done.
func (fl *FileLocks) mendAll(ctx context.Context) bool {
	sess, _ := fl.lease()
	if sess.Check() != nil {
		// Renewed again later, or lost, and its entries with it.
		fl.mu.Lock()
		defer fl.mu.Unlock()
		return len(fl.dirty) == 0
	}
	fl.mu.Lock()
	inos := make([]uint64, 0, len(fl.dirty))
	for ino := range fl.dirty {
		inos = append(inos, ino)
	}
	fl.dirty = map[uint64]bool{}
	fl.mu.Unlock()
	ok := true
	for _, ino := range inos {
		if err := fl.reconcile(ctx, ino, sess.ID()); err != nil {
			fl.c.log.Debug("mending a file lock document", "ino", ino, "err", err)
			fl.mu.Lock()
			fl.dirty[ino] = true
			fl.mu.Unlock()
			ok = false
		}
	}
	return ok
}

// reconcile writes ino's document as this mount's word has it.
func (fl *FileLocks) reconcile(ctx context.Context, ino uint64, me string) error {
	defer fl.turn(ino)()
	for attempt := 0; attempt < 8; attempt++ {
		doc, err := fl.read(ctx, ino)
		if err != nil || !doc.Found {
			return err
		}
		v, changed := fl.view(ino, doc, me)
		if !changed {
			return nil
		}
		if err := fl.write(ctx, v); !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return fmt.Errorf("lock document of inode %d: still conflicting: %w", ino, store.ErrConflict)
}

// check is the sweeper's look at the lock documents it found (a refresh
// behind, perhaps): those holding entries or markers of this mount that
// it does not hold (a grant that landed after its request gave up, a
// create that landed late) go to the mender, which reads them afresh.
func (fl *FileLocks) check(docs []store.LockDoc) {
	me := fl.c.Session().ID()
	for _, d := range docs {
		if !store.IsFileLock(d.ID) {
			continue
		}
		ino, err := strconv.ParseUint(strings.TrimPrefix(d.ID, "K"), 10, 64)
		if err != nil {
			continue
		}
		if _, changed := fl.view(ino, d, me); changed {
			fl.markDirty(ino)
		}
	}
}
