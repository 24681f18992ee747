package locking

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

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

	mu sync.Mutex // protects the following
	// doc is the session document as we last wrote it.
	doc store.SessionDoc
	// renewedAt is when the last successful renewal was sent, on the boot
	// clock: the lease runs from the sending, since the write may have been
	// applied at any moment after it.
	renewedAt time.Duration
	// lost is set for good when the heartbeat's compare-and-set fails:
	// someone declared this session dead, and may have taken over its work.
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
		Build: cfg.Build, Options: cfg.Options}
	sent := bootNow()
	v, err := b.Write(ctx, store.CreateSession(s.doc))
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

// Lost is closed when the session is declared dead.
func (s *Session) Lost() <-chan struct{} { return s.lostCh }

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

// renew advances the counter; it returns true when the session is lost.
func (s *Session) renew() bool {
	s.mu.Lock()
	if s.frozen {
		s.mu.Unlock()
		return false
	}
	next := s.doc
	next.Counter++
	next.DoneBelow = s.doneBelowLocked()
	s.mu.Unlock()
	if s.cfg.Stats != nil {
		next.Stats = s.cfg.Stats()
	}

	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Lease/2)
	defer cancel()
	sent := bootNow()
	v, err := s.b.Write(ctx, store.PutSession(next, next.Ver))
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err == nil:
		next.Ver = v
		s.doc, s.renewedAt = next, sent
		return false
	case errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound):
		// Only a declaration of death writes our document: we are fenced
		// for good, whatever we believe about our lease.
		s.lost = fmt.Errorf("session %s was declared dead by another mount: %w", s.id, ErrLeaseLost)
		s.cfg.Log.Error("session lost: another mount declared this one dead; writes fail until remount", "session", s.id)
		close(s.lostCh)
		return true
	case errors.Is(err, store.ErrNoIndex):
		// Our document went with its index: the filesystem was destroyed
		// (after this mount was declared dead, as destroy does first).
		s.lost = fmt.Errorf("session %s: the filesystem's indices are gone: %w", s.id, ErrLeaseLost)
		s.cfg.Log.Error("session lost: the filesystem's indices are gone (destroyed); every call fails until unmounted", "session", s.id, "err", err)
		close(s.lostCh)
		return true
	default:
		s.cfg.Log.Warn("heartbeat failed", "session", s.id, "err", err)
		return false
	}
}

// Close stops the heartbeat and removes the session document, which says
// "this mount ended cleanly, it holds nothing". Call it only after every
// operation of the session finished and released its locks.
func (s *Session) Close(ctx context.Context) error {
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost != nil {
		return nil
	}
	s.lost = fmt.Errorf("session %s closed: %w", s.id, ErrLeaseLost)
	_, err := s.b.Write(ctx, store.DeleteSession(s.id, s.doc.Ver))
	return err
}
