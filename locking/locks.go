// Taking locks: requests, the grant of a whole set in two round trips
// when nothing conflicts, waiting, and the entries of dead holders that a
// request may drop once their operations were taken over.

package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Request asks for one lock: a path's lock document (or the global lock)
// in a mode.
type Request struct {
	ID   string // lock document id
	Path string // for display; "" for the global lock
	Mode store.LockMode
}

// PathLock asks for the lock of path.
func PathLock(path string, mode store.LockMode) Request {
	return Request{ID: store.LockID(path), Path: path, Mode: mode}
}

// GlobalLock asks for the single lock of the global strategy.
func GlobalLock() Request {
	return Request{ID: store.GlobalLockID, Mode: store.Exclusive}
}

// Held is a set of granted locks, with the version of each lock document
// as our grant left it, so that release needs no read.
type Held struct {
	Op      string
	Session string
	docs    []store.LockDoc
	reqs    []Request
	// counted: the grant is in Metrics.held until it is released.
	counted bool
}

// Refs lists the held locks, for the operation record.
func (h *Held) Refs() []store.LockRef {
	out := make([]store.LockRef, len(h.reqs))
	for i, r := range h.reqs {
		out[i] = store.LockRef{ID: r.ID, Path: r.Path, Mode: r.Mode}
	}
	return out
}

// lockBackoff is store.Backoff's limit between attempts to take locks and
// to release them on a busy document: waits grow to 128-256 ms, so that a
// waiter polls a held lock a few times a second at most.
const lockBackoff = 128 * time.Millisecond

// recallBackoff is the limit while waiting for a delegation's holder to
// answer a recall, which it does within about recallPoll.
const recallBackoff = 16 * time.Millisecond

// Manager takes and releases locks for one mount.
type Manager struct {
	b Backend
	// obs judges other sessions; replaced when this mount starts a new
	// session, while calls read it, hence atomic.
	obs atomic.Pointer[Observer]
	// strays: a delegation's entry was written with its outcome unknown
	// and cleaned up once; should the write land after that, only a
	// recall tells (Delegations.releaseStray), so recalls are read from
	// then on even while no delegation is held.
	strays  atomic.Bool
	log     *slog.Logger
	metrics *Metrics
	// Timeout bounds how long Acquire waits for conflicting holders.
	Timeout time.Duration
	// Recover takes over and finishes (or undoes) an operation whose owner
	// is dead; it must release the operation's locks. Set by the journal.
	Recover func(ctx context.Context, rec store.OpRecord) error
	// known: the lock documents as this mount last wrote them, which a
	// first attempt sends its writes against without reading them.
	known knownDocs
	// owed: entries whose removal failed, for the mender (locks_owed.go).
	owedMu   lockorder.Mutex
	owed     map[owedKey]*owedRelease
	owedKick chan struct{}
	// nudge tells holders of their recalls and waiters of releases, and
	// wakes this mount's waiters (nudge.go); nil: off.
	nudge *nudger
	// released fires at each release of this mount's: its own calls that
	// wait for the locks (of a rename finishing in the background, say)
	// try again at once.
	released wakeup
}

// NewManager returns a lock manager.
func NewManager(b Backend, obs *Observer, timeout time.Duration, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	m := &Manager{b: b, log: log, Timeout: timeout, metrics: NewMetrics(nil),
		owed: map[owedKey]*owedRelease{}, owedKick: make(chan struct{}, 1)}
	m.obs.Store(obs)
	return m
}

// dedupe merges requests for the same document, keeping the stronger mode,
// and sorts them (the order does not matter for deadlock, since nobody
// waits while holding, but it makes bulks deterministic).
func dedupe(reqs []Request) []Request {
	by := map[string]Request{}
	for _, r := range reqs {
		if old, ok := by[r.ID]; ok && old.Mode == store.Exclusive {
			continue
		}
		by[r.ID] = r
	}
	out := make([]Request, 0, len(by))
	for _, r := range by {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Acquire takes every lock of reqs for operation op of session sess, in
// one round trip when this mount's last writes of their documents (or
// their absence) are still what the store holds (a bulk of conditional
// writes against them, see knownDocs), else in two when nothing conflicts
// (one mget, one bulk), whatever their number. When a lock is held in a conflicting mode
// it takes none, records exclusive requests as waiting (so that younger
// shared requests yield), backs off with jitter and retries until the
// deadline. Nobody waits while holding locks, so there is no deadlock.
func (m *Manager) Acquire(ctx context.Context, sess *Session, op string, reqs []Request) (held *Held, err error) {
	start := time.Now()
	defer func() {
		m.metrics.acquired(start, len(reqs), err)
		if held != nil {
			held.counted = true
		}
	}()
	reqs = dedupe(reqs)
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.ID
	}
	deadline := time.Now().Add(m.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	ticket := fmt.Sprintf("%020d-%s", time.Now().UnixNano(), op)
	w := &waiting{ticket: ticket, marked: map[string]bool{}, recalled: map[string]int{}}
	for attempt := 0; ; attempt++ {
		if err := sess.Check(); err != nil {
			return nil, err
		}
		// Taken before the documents are read: a release nudged after
		// this read wakes the pause below.
		woken, released := m.nudge.woken(), m.released.next()
		if attempt == 0 {
			if docs, ok := m.known.guess(sess.ID(), op, reqs); ok {
				held, _, err := m.tryGrant(ctx, sess, op, reqs, docs, w)
				if err != nil || held != nil {
					return held, err
				}
				// Refused: someone else wrote one of the documents since.
			}
		}
		docs, err := m.b.GetLocks(ctx, ids)
		if err != nil {
			return nil, err
		}
		w.attempt = attempt
		held, blocked, err := m.tryGrant(ctx, sess, op, reqs, docs, w)
		if err != nil {
			return nil, err
		}
		if held != nil {
			return held, nil
		}
		if time.Now().After(deadline) {
			m.clearMarkers(sess, op, reqs, w.marked)
			return nil, fmt.Errorf("waiting for %s: %w", blocked, ErrLocked)
		}
		if w.recalling {
			// A holder answers a recall within about recallPoll: look
			// again soon rather than at the lock backoff's pace.
			store.BackoffOr(ctx, attempt, recallBackoff, woken, released)
			continue
		}
		store.BackoffOr(ctx, attempt, lockBackoff, woken, released)
	}
}

// nudgeBy is the session a recall names for the holder to nudge once it
// gave the lock back: sess, if this mount takes nudges.
func (m *Manager) nudgeBy(sess *Session) string {
	if m.nudge == nil {
		return ""
	}
	return sess.ID()
}

// hasMarker reports whether d carries the waiting marker of session's
// operation op in mode.
func hasMarker(d store.LockDoc, session, op string, mode store.LockMode) bool {
	for _, w := range d.Waiters {
		if w.Session == session && w.Op == op && w.Mode == mode {
			return true
		}
	}
	return false
}

// tryGrant evaluates the lock documents just read. It returns the held
// locks, or the name of what blocks us.
func (m *Manager) tryGrant(ctx context.Context, sess *Session, op string, reqs []Request, docs []store.LockDoc, w *waiting) (*Held, string, error) {
	writes := make([]store.LockWrite, 0, len(docs))
	blocked := ""
	var recalls []store.BulkOp
	var recalled []string // the sessions recalls go to
	w.recalling = false
	// Our waiting markers from earlier attempts, as read (plan drops
	// them from what it returns).
	hadMarker := make([]bool, len(docs))
	for i := range docs {
		hadMarker[i] = hasMarker(docs[i], sess.ID(), op, waiterMode(reqs[i].Mode))
		doc, conflict, blockers, err := m.plan(ctx, sess, op, reqs[i], docs[i], w.ticket)
		if err != nil {
			return nil, "", err
		}
		if conflict != "" && blocked == "" {
			blocked = conflict
		}
		docs[i] = doc
		for _, h := range blockers {
			if !store.IsDelegLock(reqs[i].ID) || w.once {
				continue
			}
			// A delegation holder learns of us through its recall
			// document; ask again now and then in case it missed it.
			w.recalling = true
			key := h.Session + " " + reqs[i].ID
			if last, ok := w.recalled[key]; !ok || w.attempt-last >= 8 {
				w.recalled[key] = w.attempt
				recalls = append(recalls, store.RecallDelegBy(h.Session, reqs[i].ID, time.Now().UnixNano(), m.nudgeBy(sess)))
				recalled = append(recalled, h.Session)
			}
		}
	}
	if blocked != "" {
		if w.once {
			return nil, blocked, nil
		}
		// Take nothing. Exclusive and change requests leave a waiting
		// marker, once: it goes when its operation ends or its session
		// dies, which is how others judge it, not by its age.
		for i, r := range reqs {
			if !leavesMarker(r.Mode) {
				continue
			}
			if hadMarker[i] {
				// Already there from an earlier attempt: rewriting it
				// would cost a bulk per attempt (every 16 ms while a
				// recall is answered) and tell nobody anything new.
				w.marked[docs[i].ID] = true
				continue
			}
			d := withoutOwn(docs[i], sess.ID(), op)
			d.Waiters = append(d.Waiters, store.Waiter{Session: sess.ID(), Op: op, Ticket: fmt.Sprintf("%s#%d", w.ticket, w.attempt), Since: time.Now().UnixNano(), Mode: waiterMode(r.Mode)})
			writes = append(writes, store.LockWrite{Doc: d})
			w.marked[d.ID] = true
		}
		m.metrics.recallSent(len(recalls))
		if ops := append(store.WriteLocks(writes), recalls...); len(ops) > 0 {
			// Best effort: a marker that loses a race is rewritten next
			// time, and a recall is sent again.
			if _, err := m.b.Bulk(ctx, ops); err != nil {
				m.log.Debug("writing waiting markers", "op", op, "err", err)
			}
		}
		for _, s := range recalled {
			m.nudge.send(s, nudgeRecall, m.b.GetSession)
		}
		return nil, blocked, nil
	}
	for i, r := range reqs {
		d := withoutOwn(docs[i], sess.ID(), op)
		d.Holders = append(d.Holders, store.Holder{Session: sess.ID(), Op: op, Mode: r.Mode, Since: time.Now().UnixNano()})
		writes = append(writes, store.LockWrite{Doc: d})
	}
	res, err := m.b.Bulk(ctx, store.WriteLocks(writes))
	if err != nil {
		// Outcome unknown: find out what landed, and give it back.
		m.releaseUnknown(sess, op, reqs)
		return nil, "", err
	}
	granted := make([]store.LockDoc, len(reqs))
	var lost []int
	for i, r := range res {
		if r.Err == nil {
			granted[i] = writes[i].Doc
			granted[i].Found, granted[i].Ver = true, r.Ver
			m.known.wrote(granted[i], false)
			continue
		}
		m.known.forget(reqs[i].ID)
		if errors.Is(r.Err, store.ErrConflict) || errors.Is(r.Err, store.ErrExists) || errors.Is(r.Err, store.ErrUnavailable) {
			lost = append(lost, i)
			continue
		}
		m.releaseUnknown(sess, op, reqs)
		return nil, "", r.Err
	}
	if len(lost) > 0 {
		// Someone changed these documents between our read and write. A
		// compatible holder doing the same is no denial: re-read and retry
		// just those, at once, a few times.
		ok, err := m.retryItems(ctx, sess, op, reqs, granted, lost, w.ticket)
		if err != nil || !ok {
			held := &Held{Op: op, Session: sess.ID(), docs: granted, reqs: reqs}
			_, rerr := m.release(ctx, held, true, nil)
			switch {
			case err != nil || (w.once && rerr != nil):
				// The operation ends here: what it may have left (items
				// whose outcome is unknown, a release that failed) is
				// owed. Not while Acquire tries again under the same op,
				// whose next grant the mender would take away.
				m.owe(sess, op, reqs)
			case rerr != nil:
				m.log.Warn("releasing a partial grant", "op", op, "err", rerr)
			}
			if err != nil {
				return nil, "", err
			}
			return nil, "a concurrent change", nil
		}
	}
	return &Held{Op: op, Session: sess.ID(), docs: granted, reqs: reqs}, "", nil
}

func (m *Manager) retryItems(ctx context.Context, sess *Session, op string, reqs []Request, granted []store.LockDoc, items []int, ticket string) (bool, error) {
	for round := 0; round < 8 && len(items) > 0; round++ {
		ids := make([]string, len(items))
		for k, i := range items {
			ids[k] = reqs[i].ID
		}
		docs, err := m.b.GetLocks(ctx, ids)
		if err != nil {
			return false, err
		}
		writes := make([]store.LockWrite, len(items))
		for k, i := range items {
			d, conflict, _, err := m.plan(ctx, sess, op, reqs[i], docs[k], ticket)
			if err != nil {
				return false, err
			}
			if hasOwn(d, sess.ID(), op) {
				// Our earlier write landed after all (an unknown outcome).
				granted[i] = d
				writes[k] = store.LockWrite{}
				continue
			}
			if conflict != "" {
				return false, nil
			}
			d.Holders = append(d.Holders, store.Holder{Session: sess.ID(), Op: op, Mode: reqs[i].Mode, Since: time.Now().UnixNano()})
			writes[k] = store.LockWrite{Doc: d}
		}
		var todo []store.LockWrite
		var idx []int
		for k, w := range writes {
			if w.Doc.ID != "" {
				todo = append(todo, w)
				idx = append(idx, items[k])
			}
		}
		if len(todo) == 0 {
			return true, nil
		}
		res, err := m.b.Bulk(ctx, store.WriteLocks(todo))
		if err != nil {
			return false, err
		}
		items = items[:0]
		for k, r := range res {
			i := idx[k]
			if r.Err == nil {
				granted[i] = todo[k].Doc
				granted[i].Found, granted[i].Ver = true, r.Ver
				m.known.wrote(granted[i], false)
				continue
			}
			m.known.forget(reqs[i].ID)
			if errors.Is(r.Err, store.ErrConflict) || errors.Is(r.Err, store.ErrExists) || errors.Is(r.Err, store.ErrUnavailable) {
				items = append(items, i)
				continue
			}
			return false, r.Err
		}
	}
	return len(items) == 0, nil
}

// plan returns the document as it should be written for our request:
// leftovers of dead sessions removed (after their operations were taken
// over), whether a live holder or an older waiter conflicts with us, and
// the live holders that do.
func (m *Manager) plan(ctx context.Context, sess *Session, op string, r Request, doc store.LockDoc, ticket string) (store.LockDoc, string, []store.Holder, error) {
	doc.ID, doc.Path = r.ID, r.Path
	var keep, blockers []store.Holder
	conflict := ""
	for _, h := range doc.Holders {
		if h.Session == sess.ID() && h.Op == op {
			continue // ours from an earlier attempt: rewritten below
		}
		if !compatible(h.Mode, r.Mode) && !ownDelegEntry(r, sess.ID(), h) {
			gone, err := m.HolderGone(ctx, h)
			if err != nil {
				return doc, "", nil, err
			}
			if gone {
				continue
			}
			conflict = fmt.Sprintf("%s lock on %q held by operation %s", h.Mode, displayPath(r), h.Op)
			blockers = append(blockers, h)
		}
		keep = append(keep, h)
	}
	doc.Holders = keep
	var waiters []store.Waiter
	for _, w := range doc.Waiters {
		if w.Op == op && w.Session == sess.ID() {
			continue
		}
		if dead, err := m.obs.Load().Dead(ctx, w.Session); err != nil {
			return doc, "", nil, err
		} else if dead {
			continue
		}
		if yields(r, w, sess.ID()) && w.Ticket < ticket && conflict == "" {
			conflict = fmt.Sprintf("an older %s request (%s) waiting on %q", modeName(w.WaitMode()), w.Op, displayPath(r))
		}
		waiters = append(waiters, w)
	}
	doc.Waiters = waiters
	return doc, conflict, blockers, nil
}

func displayPath(r Request) string {
	switch {
	case r.ID == store.GlobalLockID:
		return "(global)"
	case store.IsDelegLock(r.ID) && r.Path == "":
		return "(directory inode " + strings.TrimPrefix(r.ID, "D") + ")"
	case store.IsDelegLock(r.ID):
		return r.Path + " (directory)"
	}
	return r.Path
}
