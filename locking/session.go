package locking

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// SessionConfig sets a session's lease.
type SessionConfig struct {
	// Lease is how long a session may go without a successful heartbeat
	// before it must stop writing (self-fencing), and, plus Grace, how long
	// others wait without seeing its counter move before declaring it dead.
	Lease time.Duration
	Grace time.Duration
	Mount string // mount point, for people reading esfs status
	Log   *slog.Logger
	// Stats, if set, is published with every heartbeat (it costs no
	// request of its own), for `esfs status`.
	Stats func() map[string]float64
	// Build and Options describe the mount for `esfs status` (see
	// store.SessionDoc).
	Build   string
	Options map[string]string
	// Nudge is where the mount takes nudges (see nudge.go), published.
	Nudge string
}

func (c *SessionConfig) defaults() {
	if c.Lease <= 0 {
		c.Lease = 10 * time.Second
	}
	if c.Grace <= 0 {
		c.Grace = c.Lease / 2
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
}

// Session is one mount's registration: a document whose counter a
// heartbeat goroutine advances by compare-and-set every Lease/3.
type Session struct {
	b   Backend
	cfg SessionConfig
	id  string

	mu lockorder.Mutex // protects the following
	// doc is the session document as it is known to be stored: Ver is the
	// version the next heartbeat is conditional on.
	doc store.SessionDoc
	// renewedAt is when the last renewal known to have landed was sent, on
	// the boot clock: the lease runs from the sending, since the write may
	// have been applied at any moment after it. A renewal whose outcome is
	// unknown does not move it until it is settled (see settle).
	renewedAt time.Duration
	// counter is the last heartbeat counter sent: every heartbeat carries a
	// counter of its own, so that reading the document tells which one
	// landed.
	counter int64
	// unsure are the heartbeats sent at doc.Ver whose outcome is unknown
	// (a reset, a timeout): each may have landed, or may still land late,
	// as long as the document is at the version it is conditional on.
	unsure []attempt
	// lost is set for good once the document shows that another mount
	// declared this session dead (or it is gone): that mount may have
	// taken over its work.
	lost error
	// inflight are the numbers of this session's unfinished operations.
	inflight map[int64]struct{}
	nextOp   int64
	// frozen suspends the heartbeat (tests only: a paused mount).
	frozen bool

	lostCh chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// StartSession registers a new session and starts its heartbeat.
func StartSession(ctx context.Context, b Backend, cfg SessionConfig) (*Session, error) {
	cfg.defaults()
	var raw [8]byte
	_, _ = rand.Read(raw[:])
	host, _ := os.Hostname()
	s := &Session{b: b, cfg: cfg, id: hex.EncodeToString(raw[:]), inflight: map[int64]struct{}{}, nextOp: 1,
		lostCh: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	s.doc = store.SessionDoc{ID: s.id, Host: host, Pid: os.Getpid(), Mount: cfg.Mount,
		Started: time.Now().UnixNano(), LeaseMs: cfg.Lease.Milliseconds(), DoneBelow: 1,
		Build: cfg.Build, Options: cfg.Options, Nudge: cfg.Nudge}
	sent := bootNow()
	v, err := b.Write(ctx, store.CreateSession(s.doc))
	if errors.Is(err, store.ErrUnavailable) {
		// The answer was lost, the document may be there: a mount whose
		// registration landed is registered. Nobody else writes a
		// document of this (random) id, and nothing but a verdict, which
		// no observer writes before a lease of silence, changes it. One
		// not there fails the start; should it land later, it is a
		// session that never beats, judged dead a lease plus grace on,
		// holding nothing.
		if d, gerr := b.GetSession(ctx, s.id); gerr == nil && !d.Dead && d.Counter == 0 {
			v, err = d.Ver, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("registering the mount's session: %w", err)
	}
	s.doc.Ver, s.renewedAt = v, sent
	go s.heartbeat()
	return s, nil
}

// ID is the session id, which names this mount in lock entries and records.
func (s *Session) ID() string { return s.id }

// Lease is the session's lease period.
func (s *Session) Lease() time.Duration { return s.cfg.Lease }

// Check returns ErrLeaseLost when the session must not write: declared dead
// (for good), or not renewed for a lease period (until the next renewal).
func (s *Session) Check() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return s.lost
	}
	if age := bootNow() - s.renewedAt; age > s.cfg.Lease {
		return fmt.Errorf("session %s not renewed for %s: %w", s.id, age.Round(time.Millisecond), ErrLeaseLost)
	}
	return nil
}

// LeaseLeft is how long the lease still runs without another renewal: 0
// once it ran out or the session was declared dead. Others declare the
// session dead no sooner than a lease plus grace after the renewal it ran
// from, so whatever this mount holds or tells under it (its kernel's
// cache under a delegation) is safe for this long.
func (s *Session) LeaseLeft() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return 0
	}
	return max(0, s.renewedAt+s.cfg.Lease-bootNow())
}

// Lost is closed when the session is declared dead.
func (s *Session) Lost() <-chan struct{} { return s.lostCh }

// Declared tells whether the session was declared dead (Lost is closed).
func (s *Session) Declared() bool {
	select {
	case <-s.lostCh:
		return true
	default:
		return false
	}
}

// BeginOp numbers a new operation of this session and returns its id.
func (s *Session) BeginOp() (id string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = s.nextOp
	s.nextOp++
	s.inflight[n] = struct{}{}
	return fmt.Sprintf("%s-%d", s.id, n), n
}

// LeaseOp returns the id of a lease this session holds for as long as it
// likes (a delegation): unlike BeginOp's, it is not in flight, so holding
// it does not keep the heartbeat's "finished below" from moving on (and
// the leftovers of later operations from being collected), and its id has
// no number, so nobody takes a live session's lease for a finished
// operation's leftover.
func (s *Session) LeaseOp() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.nextOp
	s.nextOp++
	return fmt.Sprintf("%s-lease%d", s.id, n)
}

// isLeaseOp tells a lease's op id (LeaseOp) from an operation's (BeginOp).
func isLeaseOp(op string) bool { return strings.Contains(op, "-lease") }

// EndOp marks operation n finished, so that the next heartbeat publishes
// that nothing below the oldest unfinished one is in flight.
func (s *Session) EndOp(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.inflight, n)
}

func (s *Session) doneBelowLocked() int64 {
	low := s.nextOp
	for n := range s.inflight {
		low = min(low, n)
	}
	return low
}

func (s *Session) heartbeat() {
	defer close(s.done)
	t := time.NewTicker(s.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.renew() {
			return
		}
	}
}

// attempt is a heartbeat whose outcome is unknown.
type attempt struct {
	counter int64
	sent    time.Duration // boot clock
}

// renew advances the counter; it returns true when the session is lost.
//
// A heartbeat that fails with an unknown outcome may have landed (only its
// answer lost) or may land later (held past the request's deadline). The
// next one, conditional on the version before it, then meets a version
// conflict that says nothing of a verdict. So while any heartbeat's
// outcome is unknown, every failure is settled by reading the document,
// and only a verdict found there (or the document gone) ends the session;
// the lease is renewed only by a heartbeat known to have landed, from the
// moment it was sent.
func (s *Session) renew() bool {
	s.mu.Lock()
	if s.frozen {
		s.mu.Unlock()
		return false
	}
	s.counter++
	next := s.doc
	next.Counter = s.counter
	next.DoneBelow = s.doneBelowLocked()
	s.mu.Unlock()
	if s.cfg.Stats != nil {
		next.Stats = s.cfg.Stats()
	}

	ctx, cancel := context.WithTimeout(store.Upkeep(context.Background()), s.cfg.Lease/2)
	defer cancel()
	sent := bootNow()
	v, err := s.b.Write(ctx, store.PutSession(next, next.Ver))
	s.mu.Lock()
	switch {
	case err == nil:
		next.Ver = v
		s.doc, s.renewedAt, s.unsure = next, sent, nil
		s.mu.Unlock()
		return false
	case errors.Is(err, store.ErrNoIndex):
		// Our document went with its index: the filesystem was destroyed
		// (after this mount was declared dead, as destroy does first).
		s.loseLocked("the filesystem's indices are gone (destroyed); every call fails until unmounted")
		s.mu.Unlock()
		return true
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		if len(s.unsure) == 0 {
			// Our document changed, and no write of ours can have
			// changed it: only a verdict does (or a removal, after
			// one). Concluded at once, without a read, so that a mount
			// woken past its lease starts its new session soon.
			s.loseLocked("another mount declared this one dead")
			s.mu.Unlock()
			return true
		}
		// A verdict, or a heartbeat of ours that landed unanswered.
	default:
		// Unknown outcome (a reset, a timeout, a 5xx, an answer that
		// could not be read): it may have landed, or land later.
		// Counted even when it was refused outright: its counter then
		// never shows up.
		s.unsure = append(s.unsure, attempt{counter: next.Counter, sent: sent})
		s.cfg.Log.Warn("heartbeat failed; reading the session document to learn whether it landed", "session", s.id, "err", err)
	}
	s.mu.Unlock()
	// A fresh deadline: the write's may be spent.
	rctx, rcancel := context.WithTimeout(store.Upkeep(context.Background()), s.cfg.Lease/2)
	defer rcancel()
	return s.settle(rctx) != nil
}

// settle reads the session document and brings what the session knows of
// it in line: one of its unsure heartbeats landed (the lease then runs
// from that one's sending), or none did yet (they stay unsure, and the
// lease runs out unless a later heartbeat lands), or another mount
// declared it dead, which loses it for good (the error returned). A read
// that fails settles nothing.
func (s *Session) settle(ctx context.Context) error {
	d, err := s.b.GetSession(ctx, s.id)
	gone := errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrNoIndex)
	if err != nil && !gone {
		s.cfg.Log.Warn("reading the session document after a failed heartbeat", "session", s.id, "err", err)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.lost != nil:
		return s.lost
	case gone:
		// Removed: only after a verdict (or by an operator).
		return s.loseLocked("its session document was removed")
	case d.Dead:
		return s.loseLocked("another mount (" + d.DeadBy + ") declared this one dead")
	case d.Ver == s.doc.Ver:
		return nil // none landed (yet)
	}
	for _, a := range s.unsure {
		if a.counter == d.Counter {
			s.doc.Ver, s.doc.Counter, s.doc.DoneBelow = d.Ver, d.Counter, d.DoneBelow
			s.renewedAt, s.unsure = a.sent, nil
			s.cfg.Log.Info("a heartbeat whose answer was lost had landed", "session", s.id, "counter", d.Counter)
			return nil
		}
	}
	// Neither ours nor a verdict: nothing in esfs writes that. Whoever
	// did may have meant to fence us; believe it.
	return s.loseLocked(fmt.Sprintf("its session document was overwritten (counter %d)", d.Counter))
}

// loseLocked marks the session lost for good and says why.
func (s *Session) loseLocked(why string) error {
	s.lost = fmt.Errorf("session %s lost: %s: %w", s.id, why, ErrLeaseLost)
	s.cfg.Log.Error("session lost: "+why+"; what was under it fails (EIO), new calls run under a new session", "session", s.id)
	close(s.lostCh)
	return s.lost
}

// Close stops the heartbeat and removes the session document, which says
// "this mount ended cleanly, it holds nothing". Call it only after every
// operation of the session finished and released its locks.
//
// The delete is conditional on the version known, which an unsettled
// heartbeat may have moved, and its own answer may be lost: a failure is
// settled by reading the document, as the heartbeat's are, so that a clean
// unmount does not leave a session for others to judge dead.
func (s *Session) Close(ctx context.Context) error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	if s.lost != nil {
		s.mu.Unlock()
		return nil
	}
	s.lost = fmt.Errorf("session %s closed: %w", s.id, ErrLeaseLost)
	ver, unsure := s.doc.Ver, s.unsure
	s.mu.Unlock()
	var err error
	for range 3 {
		if _, err = s.b.Write(ctx, store.DeleteSession(s.id, ver)); err == nil {
			return nil
		}
		d, gerr := s.b.GetSession(ctx, s.id)
		switch {
		case errors.Is(gerr, store.ErrNotFound):
			return nil // removed, by this delete whose answer was lost
		case gerr != nil:
			return err
		case d.Dead:
			return nil // declared dead meanwhile: fenced, as a lost session
		case d.Ver == ver && errors.Is(err, store.ErrUnavailable):
			continue // the delete did not land (yet): again
		case d.Ver == ver:
			return err // refused
		}
		landed := false
		for _, a := range unsure {
			landed = landed || a.counter == d.Counter
		}
		if !landed {
			return err
		}
		ver, unsure = d.Ver, nil
	}
	return err
}
