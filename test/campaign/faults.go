package campaign

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/test/campaign/wire"
	"github.com/esfs/esfs/test/mounttest"
)

// armed is a request fault waiting on a slot's proxy.
type armed struct {
	f    *mounttest.Fault
	kind string
	// picked: the fault chose its request (it may be holding it).
	picked atomic.Bool
}

// requestFaults are the faults of single requests, by name: "held" holds
// a request past the request timeout before it lands, "late" lands it at
// once and holds its answer for less than the timeout, so that the call
// goes on, late, with what the cluster held when it landed.
var requestFaults = []string{"lost-answer", "refused-429", "refused-503", "held", "reset", "late"}

// requestClasses: which requests a fault aims at. Those with fresh
// instead of match follow the requests as they pass (fresh makes one
// fault's matcher).
var requestClasses = []struct {
	name  string
	match func(method, path string, body []byte) bool
	fresh func() func(method, path string, body []byte) bool
}{
	{"any", func(string, string, []byte) bool { return true }, nil},
	{"bulk", func(m, p string, _ []byte) bool { return strings.HasSuffix(p, "/_bulk") }, nil},
	{"locks", func(m, p string, b []byte) bool {
		return strings.Contains(p, "-locks") || bytes.Contains(b, []byte(`-locks-W"`))
	}, nil},
	{"data", func(m, p string, b []byte) bool {
		return strings.Contains(p, "-data") || bytes.Contains(b, []byte(`-data-W"`))
	}, nil},
	{"inodes", func(m, p string, b []byte) bool {
		return strings.Contains(p, "-inodes") || bytes.Contains(b, []byte(`-inodes-W"`))
	}, nil},
	{"reads", func(m, p string, _ []byte) bool {
		return m == http.MethodGet || strings.HasSuffix(p, "/_mget") || strings.HasSuffix(p, "/_search")
	}, nil},
	// The inode writes that follow a chunk write: a flush whose chunks
	// landed and whose size or times did not (a close that fails after
	// its chunks landed).
	{"inode-after-data", nil, inodeWriteAfterData},
}

// inodeWriteAfterData matches the inode writes that follow a bulk of data
// chunks (an inode's, or ino's if not 0, and only after a chunk of ino).
func inodeWriteAfterData() func(method, path string, body []byte) bool {
	return inodeWriteAfterChunks(0, false)
}

// inodeWriteAfterChunks is inodeWriteAfterData for inode ino's writes
// after its chunks' (sent: they were, before it is armed).
func inodeWriteAfterChunks(ino uint64, sent bool) func(method, path string, body []byte) bool {
	chunk, doc := []byte(`-data-W"`), ""
	if ino != 0 {
		chunk, doc = []byte(fmt.Sprintf(`"_id":"%d.`, ino)), fmt.Sprintf("/%d", ino)
	}
	return func(m, p string, b []byte) bool {
		if strings.HasSuffix(p, "/_bulk") && bytes.Contains(b, chunk) {
			sent = true
			return false
		}
		return sent && m != http.MethodGet && strings.Contains(p, "-inodes") && (doc == "" || strings.HasSuffix(p, doc)) &&
			!strings.HasSuffix(p, "/_mget") && !strings.HasSuffix(p, "/_search")
	}
}

// openRead matches the read of inode ino that an open for reading makes
// on a mount that does not have the file open: the inode with the file's
// first chunk, or with the versions of the chunks the mount keeps (one
// _mget of both); not a lookup's read of it (the inode alone).
func openRead(ino uint64) func(method, path string, body []byte) bool {
	inode, chunks := []byte(fmt.Sprintf(`{"_id":"%d","_index":"`, ino)), []byte(fmt.Sprintf(`"_id":"%d.`, ino))
	return func(m, p string, b []byte) bool {
		return m == http.MethodPost && strings.HasSuffix(p, "/_mget") && bytes.Contains(b, inode) && bytes.Contains(b, chunks)
	}
}

// newArmed is a fault of kind on the nth request match accepts; it
// records when it picks that request.
func newArmed(kind string, nth int, match func(method, path string, body []byte) bool) *armed {
	a := &armed{kind: kind}
	seen := 0
	a.f = &mounttest.Fault{Nth: nth, Match: func(m, p string, b []byte) bool {
		if !match(m, p, b) {
			return false
		}
		// The proxy counts the same matches, under its lock.
		if seen++; seen == nth {
			a.picked.Store(true)
		}
		return true
	}}
	return a
}

// arm adds fault a to slot sl's proxy, and counts it among the run's
// faults once it acts; false if the run has stopped.
func (r *Runner) arm(sl *slot, a *armed, what string) bool {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return false
	}
	sl.faults = append(sl.faults, a)
	if len(sl.faults) > 64 {
		sl.faults = sl.faults[len(sl.faults)-64:]
	}
	r.logf("FAULT %s on m%d's %s", a.kind, sl.idx, what)
	r.mu.Unlock()
	f := a.f
	sl.proxy.Add(f)
	r.watchers.Add(1)
	go func() {
		defer r.watchers.Done()
		select {
		case <-r.over:
		case <-f.Fired():
			r.mu.Lock()
			r.res.Faults[a.kind]++
			r.logf("FAULT %s on m%d acted (the cluster answered %d)", a.kind, sl.idx, f.Status)
			r.mu.Unlock()
		case <-time.After(time.Until(f.Until) + f.Delay + f.Late + 5*time.Second):
		}
	}()
	return true
}

// lateFor is how long a "late" fault holds an answer: long enough for
// other calls to go through meanwhile, short of the request timeout.
func (r *Runner) lateFor(rnd *rand.Rand) time.Duration {
	return r.cfg.Timeout/2 + time.Duration(rnd.Int63n(int64(r.cfg.Timeout/4)))
}

// isSession: a heartbeat or another write of a session document. Those
// are never held past their deadline: a heartbeat held for longer than
// the grace would get its mount declared dead behind the campaign's back.
func isSession(method, path string, body []byte) bool {
	return strings.Contains(path, "-sessions")
}

// injectFaults arms faults until the run stops: a request fault every
// second or two on a random mount, and now and then (not for cores) a
// mount frozen past its lease or killed.
func (r *Runner) injectFaults() {
	rnd := rand.New(rand.NewSource(r.cfg.Seed ^ 0x5eed_fa17))
	nextDeath := time.Now().Add(time.Duration(10+rnd.Intn(15)) * time.Second)
	for {
		if r.sleep(time.Duration(300+rnd.Intn(1700)) * time.Millisecond) {
			return
		}
		live := r.liveSlots()
		if time.Now().After(nextDeath) && len(live) >= 2 && !r.cfg.Cores {
			sl := live[rnd.Intn(len(live))]
			if rnd.Intn(3) == 0 {
				r.kill(sl, rnd.Intn(2) == 0)
			} else {
				r.freeze(sl)
			}
			nextDeath = time.Now().Add(time.Duration(15+rnd.Intn(25)) * time.Second)
			continue
		}
		if len(live) == 0 {
			continue
		}
		sl := live[rnd.Intn(len(live))]
		kind := requestFaults[rnd.Intn(len(requestFaults))]
		class := requestClasses[rnd.Intn(len(requestClasses))]
		match := class.match
		if class.fresh != nil {
			match = class.fresh()
		}
		if kind == "held" || kind == "late" {
			inClass := match
			match = func(m, p string, b []byte) bool { return !isSession(m, p, b) && inClass(m, p, b) }
		}
		nth := 1 + rnd.Intn(4)
		a := newArmed(kind, nth, match)
		f := a.f
		f.Until = time.Now().Add(10 * time.Second)
		switch kind {
		case "lost-answer":
			f.Reset = true
		case "refused-429":
			f.Refuse = http.StatusTooManyRequests
		case "refused-503":
			f.Refuse = http.StatusServiceUnavailable
		case "held":
			f.Delay = r.cfg.Timeout + time.Duration(500+rnd.Intn(2500))*time.Millisecond
		case "reset":
			f.Drop, f.Reset = true, true
		case "late":
			f.Late = r.lateFor(rnd)
		}
		if !r.arm(sl, a, fmt.Sprintf("%s requests (the %d-th)", class.name, nth)) {
			return
		}
	}
}

// sleep waits d, and reports whether the run stopped meanwhile.
func (r *Runner) sleep(d time.Duration) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		r.mu.Lock()
		stopped := r.stopped
		r.mu.Unlock()
		if stopped {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

func (r *Runner) liveSlots() []*slot {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*slot
	for _, sl := range r.slots {
		if !sl.dead && !sl.paused {
			out = append(out, sl)
		}
	}
	return out
}

// quiesce pauses slot sl, waits for its operations and unknown outcomes,
// and reserves the footprint of everything a death could take back (its
// operations since its last fsync, its descriptors' files). It returns
// the reservation's key, or 0 if the run stopped.
//
// With midOp it waits (a few seconds at most) for an operation of sl to be
// in flight instead, and reserves its footprint too: sl is to be killed
// in the middle of it. It reports whether it is.
func (r *Runner) quiesce(sl *slot, midOp bool) (int64, *Footprint, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var cur *Footprint
	if midOp {
		deadline := time.Now().Add(5 * time.Second)
		for !r.stopped && time.Now().Before(deadline) && !(sl.busy && sl.resolving == 0 && sl.observing == 0) {
			r.mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			r.mu.Lock()
		}
		sl.paused = true
		if sl.busy && sl.resolving == 0 && sl.observing == 0 {
			cur = r.inflight[sl.cur]
		}
	}
	sl.paused = true
	for cur == nil && (sl.busy || sl.resolving > 0 || sl.observing > 0) && !r.stopped {
		r.cond.Wait()
	}
	ignore := int64(0)
	if cur != nil {
		ignore = sl.cur
		sl.killing = true
	}
	fp := r.reserveBut(func() *Footprint {
		fp := r.riskFootprint(sl)
		if cur != nil {
			fp.Paths = append(fp.Paths, cur.Paths...)
			fp.Inodes = append(fp.Inodes, cur.Inodes...)
		}
		return fp
	}, func() bool { return r.stopped }, ignore)
	if fp == nil {
		sl.paused, sl.killing = false, false
		r.cond.Broadcast()
		return 0, nil, false
	}
	r.n++
	key := -r.n
	r.inflight[key] = fp
	return key, fp, cur != nil
}

// riskFootprint: what slot sl's death could change (r.mu held).
func (r *Runner) riskFootprint(sl *slot) *Footprint {
	fp := &Footprint{}
	for _, h := range sl.atRisk {
		g := r.footprint(h.op)
		if h.op.Kind == "flush" {
			g = &Footprint{}
			g.addInode(r.st, h.op.Ino)
		}
		fp.Paths = append(fp.Paths, g.Paths...)
		for _, ino := range g.Inodes {
			fp.addInode(r.st, ino)
		}
	}
	for _, fd := range r.fdsOf(sl.idx) {
		fp.addInode(r.st, fd.Ino)
	}
	return fp
}

// freeze stops slot sl's mount (SIGSTOP) until another mount declares it
// dead, and wakes it.
func (r *Runner) freeze(sl *slot) { r.death(sl, "freeze", false) }

// kill kills slot sl's mount (and its worker) and mounts it again;
// midOp, in the middle of one of its operations if it can.
func (r *Runner) kill(sl *slot, midOp bool) { r.death(sl, "kill", midOp) }

func (r *Runner) death(sl *slot, how string, midOp bool) {
	key, fp, inFlight := r.quiesce(sl, midOp)
	if key == 0 {
		return
	}
	if inFlight {
		how = "kill-mid-operation"
	}
	sess, err := r.session(sl)
	if err != nil {
		r.mu.Lock()
		r.finding("surprise-death", "m%d before its %s: %v", sl.idx, how, err)
		sl.paused = false
		delete(r.inflight, key)
		r.cond.Broadcast()
		r.mu.Unlock()
		return
	}
	r.mu.Lock()
	r.res.Faults[how]++
	r.logf("FAULT %s m%d (session %s; %d operations since its last fsync; footprint %s)", how, sl.idx, sess, len(sl.atRisk), fp)
	sl.dead = true
	r.mu.Unlock()
	if how == "freeze" {
		sl.m.Signal(unix.SIGSTOP)
	} else {
		// The worker first: a call in flight ends unanswered, and the
		// mount dies with whatever it was doing for it.
		sl.w.kill()
		sl.m.Kill()
	}
	if inFlight {
		// Wait for the answer of the call in flight (the worker gone).
		r.mu.Lock()
		for sl.busy {
			r.cond.Wait()
		}
		sl.killing = false
		r.mu.Unlock()
	}
	declared := r.waitDeclaredDead(sess)
	r.mu.Lock()
	r.logf("  m%d declared dead: %v", sl.idx, declared)
	obsSlot := r.observer(sl)
	r.mu.Unlock()
	paths := outermost(fp.Paths)
	var obs [][]wire.Entry
	if obsSlot != nil && len(paths) > 0 {
		obs, err = r.observe(obsSlot, paths)
	}
	r.doneObserving(obsSlot)

	r.mu.Lock()
	var stuck *stuckError
	if errors.As(err, &stuck) {
		r.finding("stuck-lock", "looking at what m%d's death left: %v", sl.idx, err)
	} else if err != nil {
		r.finding("worker", "looking at what m%d's death left: %v", sl.idx, err)
	} else if obsSlot != nil {
		for _, ino := range fp.Inodes {
			r.releasePosix(obsSlot, ino)
		}
		r.survivors(sl, obs, paths)
	}
	// Its locks are free once it is declared dead (a moment later, by the
	// sweeper).
	until := time.Now().Add(r.releaseWindow())
	r.locks.releaseAll(func(h *holder) bool { return h.mount == sl.idx }, until)
	fds := r.fdsOf(sl.idx)
	r.mu.Unlock()

	if how == "freeze" {
		sl.m.Signal(unix.SIGCONT)
		r.logf("  m%d woken", sl.idx)
		r.mu.Lock()
		sl.lost++ // it logs that it lost its session
		r.mu.Unlock()
		for _, fd := range fds {
			r.closeAfterDeath(sl, fd)
		}
	} else {
		r.mu.Lock()
		for _, fd := range fds {
			delete(r.fds, fd.ID)
		}
		r.mu.Unlock()
		// Faults armed for the killed mount would act on the new one's
		// first requests: refused, its start fails (seed 550711320).
		sl.proxy.Clear()
		// A mount that still fails to start fails the test, and ends this
		// goroutine (t.Fatalf): the run ends too, rather than every call
		// waiting for this death for ever.
		remounted := false
		defer func() {
			if !remounted {
				r.mu.Lock()
				delete(r.inflight, key)
				r.stopped = true
				r.cond.Broadcast()
				r.mu.Unlock()
			}
		}()
		r.mount(sl)
		remounted = true
		r.logf("  m%d mounted again at %s", sl.idx, sl.root)
	}
	r.mu.Lock()
	sl.gen++
	sl.dead, sl.paused = false, false
	r.synced(sl)
	delete(r.inflight, key)
	r.cond.Broadcast()
	r.mu.Unlock()
}

// session is the id of slot sl's live session.
func (r *Runner) session(sl *slot) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := r.fs.Store.ListSessions(ctx)
	if err != nil {
		return "", err
	}
	for _, s := range all {
		if s.Pid == sl.m.Pid() && !s.Dead {
			return s.ID, nil
		}
	}
	return "", fmt.Errorf("no live session of pid %d", sl.m.Pid())
}

// waitDeclaredDead waits until session id is marked dead (or gone).
func (r *Runner) waitDeclaredDead(id string) bool {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		all, err := r.fs.Store.ListSessions(ctx)
		cancel()
		if err == nil {
			found := false
			for _, s := range all {
				if s.ID == id {
					found = true
					if s.Dead {
						return true
					}
				}
			}
			if !found {
				return true
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return false
}

// survivors decides which prefix of slot sl's calls since its last fsync
// survived its death, from what another mount sees (r.mu held), and makes
// it the model. The writes its descriptors had not flushed may have
// landed too (a mount may write them early; close-to-open only says when
// they must have), each descriptor's in the order it made them.
func (r *Runner) survivors(sl *slot, obs [][]wire.Entry, paths []string) {
	n := len(sl.atRisk)
	var withPending []*FD
	pending := map[*FD][]pwrite{}
	for _, fd := range r.fdsOf(sl.idx) {
		if len(fd.Pending) > 0 {
			withPending = append(withPending, fd)
			pending[fd] = fd.Pending
			// The candidates below land them or not: while they are
			// pending, the file's bytes would not be compared at all.
			fd.Pending = nil
		}
	}
	combos := [][]int{nil}
	for _, fd := range withPending {
		var next [][]int
		for _, c := range combos {
			for j := len(pending[fd]); j >= 0; j-- {
				if len(combos) > 16 && j != 0 && j != len(pending[fd]) {
					continue // too many: all or nothing
				}
				next = append(next, append(append([]int{}, c...), j))
			}
		}
		combos = next
	}
	var diffs []string
	for k := n; k >= 0; k-- {
		// The call its death cut short, the last, may also have landed in
		// part, as a failed write-back does (cutShort).
		outcomes := [][]*Op{nil}
		if k == n && n > 0 {
			outcomes = append(outcomes, sl.atRisk[n-1].alts...)
		}
		for i := 0; i < len(outcomes)*len(combos); i++ {
			alt, combo := outcomes[i/len(combos)], combos[i%len(combos)]
			st := r.replayAlt(sl, k, alt)
			var flushes []*Op
			for i, fd := range withPending {
				if j := combo[i]; j > 0 && st.Inodes[fd.Ino] != nil {
					f := &Op{N: -1, Mount: sl.idx, Kind: "flush", Ino: fd.Ino, Writes: pending[fd][:j]}
					st.Apply(f)
					flushes = append(flushes, f)
				}
			}
			d := r.diffTree(st, obs, paths)
			if d != "" {
				if len(diffs) < 4 {
					diffs = append(diffs, fmt.Sprintf("%d calls, unflushed writes %v: %s", k, combo, d))
				}
				continue
			}
			r.logf("  m%d: %d of its %d calls since its last fsync survived, and of its descriptors' unflushed writes %v", sl.idx, k, n, combo)
			if alt != nil {
				r.logf("  m%d: its last call, cut short, landed in part: %v", sl.idx, alt)
			}
			lost := map[*histEntry]bool{}
			for _, h := range sl.atRisk[k:] {
				lost[h] = true
			}
			// Keep the history as it now is: what was lost never happened,
			// and a call that landed in part is what landed of it.
			kept := r.hist[:0:0]
			for _, h := range r.hist {
				switch {
				case alt != nil && h == sl.atRisk[n-1]:
					for _, o := range alt {
						kept = append(kept, &histEntry{op: o, mount: sl.idx})
					}
				case !lost[h]:
					kept = append(kept, h)
				}
			}
			for _, f := range flushes {
				kept = append(kept, &histEntry{op: f, mount: sl.idx})
			}
			r.hist = kept
			r.st = st
			r.noteAllData(sl.idx)
			for i, fd := range withPending {
				fd.mustEIO = combo[i] < len(pending[fd])
			}
			for _, fd := range r.fdsOf(sl.idx) {
				fd.Pending = nil
				if st.Inodes[fd.Ino] == nil {
					fd.mustEIO = true
				}
			}
			return
		}
	}
	calls := make([]string, 0, n)
	for _, h := range sl.atRisk {
		calls = append(calls, h.op.String())
	}
	r.finding("dead-prefix", "what m%d left is no prefix of its %d calls since its last fsync (%s); against the longest prefixes: %s",
		sl.idx, n, strings.Join(calls, ", "), strings.Join(diffs, "; "))
}

// replay is the model with only the first k of sl's calls since its last
// fsync (everything else as it happened).
func (r *Runner) replay(sl *slot, k int) *State { return r.replayAlt(sl, k, nil) }

// replayAlt is replay with all of sl's calls since its last fsync (k is
// their number), the last of them landed as alt says, if not nil.
func (r *Runner) replayAlt(sl *slot, k int, alt []*Op) *State {
	st := sl.snap.Copy()
	skip := map[*histEntry]bool{}
	for _, h := range sl.atRisk[k:] {
		skip[h] = true
	}
	for _, h := range r.hist[sl.snapIdx:] {
		switch {
		case alt != nil && h == sl.atRisk[len(sl.atRisk)-1]:
			for _, o := range alt {
				st.Apply(o)
			}
		case !skip[h]:
			st.Apply(h.op)
		}
	}
	return st
}

// closeAfterDeath closes a descriptor a frozen mount's worker kept open
// across its death: one whose writes were lost must be told, once for
// its open file description (the first of its descriptors closed).
func (r *Runner) closeAfterDeath(sl *slot, fd *FD) {
	r.mu.Lock()
	must := false
	for _, g := range r.fds {
		must = must || g.OFD == fd.OFD && g.mustEIO
	}
	r.mu.Unlock()
	resp, err := sl.w.do(&wire.Req{Op: "close", FD: fd.wfd}, opLimit)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.fds, fd.ID)
	if err == nil && resp.Errno != 0 {
		for _, g := range r.fds {
			if g.OFD == fd.OFD {
				g.mustEIO = false
			}
		}
	}
	switch {
	case err != nil:
		r.finding("hang", "close of fd%d after m%d's death: %v", fd.ID, sl.idx, err)
	case resp.Errno == 0 && must:
		r.finding("lost-unreported", "fd%d (ino%d) on m%d: close returned 0 after its mount's death lost its writes or its file", fd.ID, fd.Ino, sl.idx)
	default:
		r.logf("  close of fd%d after m%d's death: %s", fd.ID, sl.idx, errname(resp.Errno))
	}
}

// checkSurpriseDeath: a mount that lost its session on its own (r.mu
// held) makes the model wrong about what it did.
func (r *Runner) checkSurpriseDeath(sl *slot) {
	log := ""
	switch {
	case sl.m != nil:
		log = sl.m.Log()
	case sl.core != nil:
		log = sl.core.Log()
	}
	if n := strings.Count(log, "session lost"); n > sl.lost {
		sl.lost = n
		r.finding("surprise-death", "m%d lost its session without being frozen or killed", sl.idx)
	}
}
