package locking_test

// Session documents whose writes lose their answers: a heartbeat, the
// registration, the removal at close and a death verdict that land
// unanswered, or land late, are settled by reading the document, and only
// a verdict found there ends a session.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// unanswered is a backend whose single writes (every write of a session
// document goes through Write) can lose their answers, or be held and
// sent later, and whose session reads can be made to fail.
type unanswered struct {
	locking.Backend
	mu sync.Mutex // protects the following
	// next are the faults of the next writes: "land" (sent, answer lost),
	// "drop" (never sent), "late" (held, and sent just before the next
	// write), "later" (held, and sent just after the next write), ""
	// (none).
	next []string
	// every is the fault of every write while next is empty.
	every     string
	readsFail bool
	// onFault is called as a fault acts, with the fault; onRead after a
	// session read that succeeded.
	onFault func(string)
	onRead  func()
	// late and later are the held writes.
	late, later []store.BulkOp
	// writes counts the writes asked; reads the session reads;
	// deliveries the held writes sent, and landed those that landed.
	writes, reads, deliveries, landed int
	// enteredAt is when the last "land" write was asked (boot clock).
	enteredAt time.Duration
}

var errUnanswered = fmt.Errorf("fault: no answer: %w", store.ErrUnavailable)

func (u *unanswered) arm(faults ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.next = append(u.next, faults...)
}

func (u *unanswered) set(f func(u *unanswered)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	f(u)
}

func (u *unanswered) get(f func(u *unanswered) int) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return f(u)
}

// deliver sends held writes.
func (u *unanswered) deliver(ops []store.BulkOp) {
	for _, o := range ops {
		_, err := u.Backend.Write(context.Background(), o)
		u.mu.Lock()
		u.deliveries++
		if err == nil {
			u.landed++
		}
		u.mu.Unlock()
	}
}

func (u *unanswered) Write(ctx context.Context, o store.BulkOp) (store.Version, error) {
	u.mu.Lock()
	u.writes++
	fault := u.every
	if len(u.next) > 0 {
		fault, u.next = u.next[0], u.next[1:]
	}
	late, later := u.late, u.later
	u.late, u.later = nil, nil
	switch fault {
	case "late":
		u.late = append(u.late, o)
	case "later":
		u.later = append(u.later, o)
	case "land":
		u.enteredAt = locking.BootNow()
	}
	on := u.onFault
	u.mu.Unlock()
	u.deliver(late)
	defer u.deliver(later)
	if fault != "" && on != nil {
		on(fault)
	}
	switch fault {
	case "land":
		_, _ = u.Backend.Write(ctx, o)
		return store.Version{}, errUnanswered
	case "drop", "late", "later":
		return store.Version{}, errUnanswered
	}
	return u.Backend.Write(ctx, o)
}

func (u *unanswered) GetSession(ctx context.Context, id string) (store.SessionDoc, error) {
	u.mu.Lock()
	u.reads++
	fail := u.readsFail
	u.mu.Unlock()
	if fail {
		return store.SessionDoc{}, fmt.Errorf("fault: no answer to the read: %w", store.ErrUnavailable)
	}
	d, err := u.Backend.GetSession(ctx, id)
	u.mu.Lock()
	on := u.onRead
	u.mu.Unlock()
	if err == nil && on != nil {
		on()
	}
	return d, err
}

// waitUntil polls cond until it holds, or fails the test after limit.
func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not seen within %s", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func startSession(t *testing.T, b locking.Backend, lease time.Duration) *locking.Session {
	t.Helper()
	s, err := locking.StartSession(ctxT(t), b, locking.SessionConfig{Lease: lease, Mount: "(test)"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

func sessionDoc(t *testing.T, st locking.Backend, id string) store.SessionDoc {
	t.Helper()
	d, err := st.GetSession(ctxT(t), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestHeartbeatLostAnswers: heartbeats that land with their answers lost,
// three in a row, one held and landing just before the next heartbeat
// (past its own deadline), one held and sent after the next one landed,
// one never sent: the session lives on, its lease renewed, and its
// counter moves.
func TestHeartbeatLostAnswers(t *testing.T) {
	st := testenv.Store(t)
	u := &unanswered{Backend: st}
	s := startSession(t, u, time.Second)
	faults := []string{"land", "land", "land", "late", "later", "", "drop", "land"}
	u.arm(faults...)
	waitUntil(t, "the faulty heartbeats and three more", time.Minute, func() bool {
		return u.get(func(u *unanswered) int { return u.writes }) >= len(faults)+3 || s.Declared()
	})
	if s.Declared() {
		t.Fatalf("the session was lost to heartbeats whose answers were lost: %v", s.Check())
	}
	if n := u.get(func(u *unanswered) int { return u.deliveries }); n != 2 {
		t.Fatalf("%d held heartbeats sent, want 2", n)
	}
	if n := u.get(func(u *unanswered) int { return u.landed }); n != 1 {
		t.Errorf("%d held heartbeats landed, want 1 (the one sent before the next heartbeat)", n)
	}
	waitUntil(t, "the lease renewed", time.Minute, func() bool { return s.Check() == nil || s.Declared() })
	if s.Declared() {
		t.Fatalf("the session was lost: %v", s.Check())
	}
	if d := sessionDoc(t, st, s.ID()); d.Dead || d.Counter < int64(len(faults)) {
		t.Errorf("the session document: dead %v, counter %d, want alive and at least %d", d.Dead, d.Counter, len(faults))
	}
}

// TestHeartbeatLeaseFromSending: a heartbeat that landed unanswered,
// once settled, renews the lease from the moment it was sent.
func TestHeartbeatLeaseFromSending(t *testing.T) {
	st := testenv.Store(t)
	u := &unanswered{Backend: st}
	s := startSession(t, u, time.Second)
	// Until it is settled nothing renews the lease (later heartbeats meet
	// the version it wrote); the heartbeat stops at the read that settles
	// it, so that no later one renews the lease either.
	var mu sync.Mutex
	var before time.Duration
	acted := false
	u.set(func(u *unanswered) {
		u.onFault = func(string) {
			mu.Lock()
			defer mu.Unlock()
			before, acted = s.RenewedAt(), true
			u.set(func(u *unanswered) { u.onRead = s.Freeze }) // onFault runs without u.mu
		}
	})
	u.arm("land")
	waitUntil(t, "the unanswered heartbeat settled", time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return acted && s.RenewedAt() != before || s.Declared()
	})
	if s.Declared() {
		t.Fatalf("the session was lost: %v", s.Check())
	}
	u.mu.Lock()
	entered := u.enteredAt
	u.mu.Unlock()
	if got := s.RenewedAt(); got > entered {
		t.Errorf("the lease runs from %s, after the heartbeat was sent (%s)", got, entered)
	}
}

// TestHeartbeatUnsettledFencesItself: heartbeats that land unanswered
// while the document cannot be read do not renew the lease: the session
// stops writing once its lease is over (it is not lost), and is renewed
// again once they are settled.
func TestHeartbeatUnsettledFencesItself(t *testing.T) {
	st := testenv.Store(t)
	u := &unanswered{Backend: st}
	s := startSession(t, u, time.Second)
	first := sessionDoc(t, st, s.ID()).Counter
	u.set(func(u *unanswered) { u.every, u.readsFail = "land", true })
	waitUntil(t, "the session fenced by its lease", time.Minute, func() bool { return s.Check() != nil })
	if err := s.Check(); !errors.Is(err, locking.ErrLeaseLost) {
		t.Fatalf("Check: %v, want ErrLeaseLost", err)
	}
	if d := sessionDoc(t, st, s.ID()); d.Counter <= first {
		t.Fatalf("no heartbeat landed (counter %d, was %d): the test shows nothing", d.Counter, first)
	}
	writes := u.get(func(u *unanswered) int { return u.writes })
	waitUntil(t, "two more unanswered heartbeats", time.Minute, func() bool {
		return u.get(func(u *unanswered) int { return u.writes }) >= writes+2 || s.Declared()
	})
	if s.Declared() {
		t.Fatalf("the session was lost to heartbeats it could not settle: %v", s.Check())
	}
	if s.Check() == nil {
		t.Errorf("the lease was renewed by heartbeats whose outcome is unknown")
	}
	u.set(func(u *unanswered) { u.every, u.readsFail = "", false })
	waitUntil(t, "the lease renewed", time.Minute, func() bool { return s.Check() == nil || s.Declared() })
	if s.Declared() {
		t.Fatalf("the session was lost: %v", s.Check())
	}
}

// TestHeartbeatVerdictStillEndsSession: a session whose heartbeats do not
// land (cut off) is declared dead by an observer after its lease plus
// grace, and learns it, settling its unanswered heartbeats, once the
// cluster answers again; one frozen past its lease the same.
func TestHeartbeatVerdictStillEndsSession(t *testing.T) {
	st := testenv.Store(t)
	for _, how := range []string{"cut off", "frozen"} {
		t.Run(how, func(t *testing.T) {
			u := &unanswered{Backend: st}
			s := startSession(t, u, time.Second)
			if how == "frozen" {
				s.Freeze()
			} else {
				u.set(func(u *unanswered) { u.every, u.readsFail = "drop", true })
			}
			obs := locking.NewObserver(st, "observer", 500*time.Millisecond, nil)
			waitUntil(t, "the session declared dead", time.Minute, func() bool {
				dead, err := obs.Dead(ctxT(t), s.ID())
				if err != nil {
					t.Fatal(err)
				}
				return dead
			})
			if s.Declared() {
				t.Fatal("the session knew of its death before it could read it")
			}
			u.set(func(u *unanswered) { u.every, u.readsFail = "", false })
			s.Thaw()
			waitUntil(t, "the session lost", time.Minute, func() bool { return s.Declared() })
			if err := s.Check(); !errors.Is(err, locking.ErrLeaseLost) {
				t.Errorf("Check after the verdict: %v, want ErrLeaseLost", err)
			}
		})
	}
}

// TestSessionCloseAfterLostAnswers: a clean close removes the session
// document although its last heartbeat was held and landed only as the
// close began (the removal's version is stale), and the removal's answer
// is lost too.
func TestSessionCloseAfterLostAnswers(t *testing.T) {
	st := testenv.Store(t)
	u := &unanswered{Backend: st}
	s := startSession(t, u, time.Second)
	acted := make(chan struct{})
	u.set(func(u *unanswered) {
		u.onFault = func(string) {
			s.Freeze()
			close(acted)
		}
	})
	// The held heartbeat, sent before the first removal (at the version
	// before it: refused), then the removal at the right one, unanswered.
	u.arm("late", "", "land")
	<-acted
	u.set(func(u *unanswered) { u.onFault = nil })
	if err := s.Close(ctxT(t)); err != nil {
		t.Errorf("Close: %v", err)
	}
	if n := u.get(func(u *unanswered) int { return u.landed }); n != 1 {
		t.Errorf("the held heartbeat did not land before the removal (%d landed)", n)
	}
	if d, err := st.GetSession(ctxT(t), s.ID()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the session document is left after a clean close: %+v (%v)", d, err)
	}
}

// TestSessionStartLostAnswer: a registration that landed unanswered
// starts the session.
func TestSessionStartLostAnswer(t *testing.T) {
	st := testenv.Store(t)
	u := &unanswered{Backend: st}
	u.arm("land")
	s := startSession(t, u, time.Second)
	first := sessionDoc(t, st, s.ID()).Counter
	waitUntil(t, "a heartbeat", time.Minute, func() bool { return sessionDoc(t, st, s.ID()).Counter > first || s.Declared() })
	if s.Declared() {
		t.Fatalf("the session was lost: %v", s.Check())
	}
}

// TestObserverVerdictLostAnswer: a death verdict that landed unanswered,
// or whose earlier copy landed late, is a death: the observer says so,
// and no error.
func TestObserverVerdictLostAnswer(t *testing.T) {
	st := testenv.Store(t)
	for _, fault := range []string{"land", "late"} {
		t.Run(fault, func(t *testing.T) {
			s := startSession(t, st, time.Second)
			s.Freeze()
			u := &unanswered{Backend: st}
			u.arm(fault)
			obs := locking.NewObserver(u, "observer", 500*time.Millisecond, nil)
			waitUntil(t, "the session declared dead", time.Minute, func() bool {
				dead, err := obs.Dead(ctxT(t), s.ID())
				// A verdict held unsent is unknown until it lands.
				if err != nil && (fault != "late" || !errors.Is(err, store.ErrUnavailable)) {
					t.Fatalf("Dead: %v", err)
				}
				return dead
			})
			if d := sessionDoc(t, st, s.ID()); !d.Dead || d.DeadBy != "observer" {
				t.Errorf("the session document: dead %v by %q", d.Dead, d.DeadBy)
			}
			if n := u.get(func(u *unanswered) int { return u.writes }); n != 1+map[string]int{"land": 0, "late": 1}[fault] {
				t.Errorf("%d verdicts written", n)
			}
		})
	}
}

// TestWokenMountBeginsUnderNewSession: a mount frozen past its lease and
// declared dead learns it when it wakes; an operation it begins after that
// runs under a new session at once, whether or not the sweeper (off here)
// has started one yet: only what ran under the dead session fails. (In
// CI an open on a woken mount failed with EIO in the second between its
// learning of its death and the sweeper's next round.)
func TestWokenMountBeginsUnderNewSession(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	a := coordinatorWait(t, st, "tree", time.Second, 20*time.Second)
	old := a.Session()
	old.Freeze()
	obs := locking.NewObserver(st, "observer", 500*time.Millisecond, nil)
	waitUntil(t, "the frozen session declared dead", time.Minute, func() bool {
		dead, err := obs.Dead(ctx, old.ID())
		if err != nil {
			t.Fatal(err)
		}
		return dead
	})
	old.Thaw()
	waitUntil(t, "the woken session learning of its death", time.Minute, func() bool { return old.Declared() })
	txn, err := a.Begin(ctx, []locking.Request{locking.Change(7, "/d")})
	if err != nil {
		t.Fatalf("an operation begun after the mount learned of its death: %v", err)
	}
	if txn.Sess == old || txn.Sess.Check() != nil {
		t.Errorf("the operation runs under session %s (the dead one is %s)", txn.Sess.ID(), old.ID())
	}
	if err := txn.End(ctx); err != nil {
		t.Errorf("ending it: %v", err)
	}
	if a.Session() != txn.Sess {
		t.Errorf("the mount's session is %s, not the one its operation started", a.Session().ID())
	}
}

// sessionReads counts the reads of session documents.
type sessionReads struct {
	locking.Backend
	n atomic.Int64
}

func (s *sessionReads) GetSession(ctx context.Context, id string) (store.SessionDoc, error) {
	s.n.Add(1)
	return s.Backend.GetSession(ctx, id)
}

// TestObserverTrustsAliveBriefly: a session read alive is taken to be
// alive, without another read, for an eighth of its lease (every attempt
// to take a lock asks about each holder and waiter); its death, declared
// by another observer, is seen once that has passed.
func TestObserverTrustsAliveBriefly(t *testing.T) {
	st := testenv.Store(t)
	const lease = time.Second
	s := startSession(t, st, lease)
	reads := &sessionReads{Backend: st}
	obs := locking.NewObserver(reads, "observer", lease/2, nil)
	for try := 0; ; try++ {
		before := reads.n.Load()
		start := time.Now()
		for i := 0; i < 5; i++ {
			if dead, err := obs.Dead(ctxT(t), s.ID()); err != nil || dead {
				t.Fatalf("Dead of a live session: %v, %v", dead, err)
			}
		}
		if time.Since(start) >= lease/8 {
			// Too slow a machine to tell: the sighting ran out meanwhile.
			if try < 5 {
				time.Sleep(lease / 4)
				continue
			}
			t.Skip("five Dead calls never ran within an eighth of the lease")
		}
		if n := reads.n.Load() - before; n != 1 {
			t.Errorf("five Dead calls in a row read the session document %d times, want once", n)
		}
		break
	}
	s.Freeze()
	other := locking.NewObserver(st, "other", lease/2, nil)
	waitUntil(t, "the frozen session declared dead by another observer", time.Minute, func() bool {
		dead, err := other.Dead(ctxT(t), s.ID())
		return err == nil && dead
	})
	waitUntil(t, "the first observer seeing the death", time.Minute, func() bool {
		dead, err := obs.Dead(ctxT(t), s.ID())
		return err == nil && dead
	})
}
