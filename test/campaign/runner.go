// Package campaign is a seeded fault campaign against esfs: several real
// mounts of one filesystem run random operations, each from a worker
// process of its own (test/campaign/worker), while faults are injected
// into their requests to Elasticsearch (lost answers, refusals, requests
// held past their deadline, resets) and into the mounts themselves (frozen
// past their lease, killed -9 and remounted). A model of the tree checks
// every answer as the run goes, and the end: every mount agrees with the
// model and with each other, byte for byte, and `esfs fsck` is clean.
//
// Operations whose footprints (paths, inodes) overlap run one after the
// other and the others concurrently, so the model is exact for each
// operation when it starts. An outcome the process was not told (EIO,
// ETIMEDOUT) is settled by looking from another mount once the faults
// that could still land have; a mount declared dead may have lost what it
// had not fsynced, and what survives must be a prefix of its calls.
//
// TestCampaign (test/campaign_test.go) runs it in the suite on fixed
// seeds, test/campaign.sh for as long as asked on fresh ones;
// TestModelAgainstTmpfs holds the model to a tmpfs.
package campaign

import (
	"fmt"
	"math/rand"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/test/campaign/wire"
	"github.com/esfs/esfs/test/mounttest"
)

// Config says what to run.
type Config struct {
	Seed     int64
	Duration time.Duration
	Mounts   int
	// Faults: inject faults (requests, freezes, kills). Without them an
	// EIO is a finding.
	Faults bool
	// Exclude names finding classes of known open bugs: such a finding
	// ends the run without failing it (the model no longer knows the
	// tree), so a long campaign goes on to another seed.
	Exclude map[string]bool
	// Roots, if set, are directories the workers run in (one worker per
	// root; the same directory several times for several workers on one
	// filesystem) instead of esfs mounts: a tmpfs for the model's test.
	Roots []string
	// Lease and Timeout are the mounts' --lease and --es-timeout.
	Lease, Timeout time.Duration
	// Debug has the mounts log every FUSE request (--debug): a finding
	// keeps their logs, which then say which request answered what.
	Debug bool
	// Cores: the mounts are cores in this test process (fs/vfs, see
	// core.go), each through its own fault proxy, instead of esfs mount
	// processes: more operations a minute, request faults only (a freeze
	// or a kill needs a process).
	Cores bool
	// BigWrites lets the hole shape write past a kernel mount's dirty
	// limit (33 MiB, seconds a write and a read: for long campaigns);
	// cores and local roots always may, past their lower limit.
	BigWrites bool
}

// Finding is one check that failed.
type Finding struct {
	Class string
	Text  string
}

// Result is what a run did and found.
type Result struct {
	Seed     int64
	Ops      map[string]int
	Faults   map[string]int
	Findings []Finding
	// Excluded is the finding of an excluded class that ended the run;
	// ExcludedSeen counts those of each excluded class the run went on
	// after (the model follows what was seen).
	Excluded     *Finding
	ExcludedSeen map[string]int
	History      string // the file holding the whole history
	Took         time.Duration
}

// Classes are the finding classes, for --exclude.
var Classes = []string{
	"errno",           // an answer Linux would not give
	"attr",            // stat disagrees with the model (type, mode, links, size, times, xattrs, target)
	"data",            // the bytes read disagree
	"names",           // a listing disagrees
	"unknown-outcome", // an unknown outcome settled in a state that is neither before nor after
	"dead-prefix",     // what survives a dead mount is not a prefix of its calls
	"lost-unreported", // a write lost with its mount, its process not told EIO
	"lock-two-owners", // a lock granted while another owner held it
	"lock-outlived",   // a lock still held long after its release or its owner's death
	"hang",            // a call that does not return
	"surprise-death",  // a mount lost its session without being frozen or killed
	"final-tree",      // at the end, mounts disagree with each other or with the model
	"fsck",            // esfs fsck not clean at the end
	"worker",          // the campaign's own machinery failed
	"stuck-lock",      // a call failed with EAGAIN after waiting the whole --lock-timeout: a lock held that long (the lease is seconds)
	// Known shapes of open bugs, told apart so that they can be excluded
	// alone; the run goes on after them when they are.
	"truncate-partial",   // a truncate that failed with EIO left the bytes past its size cut and the size unchanged
	"dir-nlink",          // a directory's link count off, all else right (seeds 30904437, 956352814)
	"lock-after-close",   // a lock seen held after the close that ended it returned, no fault on its holder's requests: a record lock after a close of a dup, a flock after its open file's last close (shapeDupLock)
	"unlinked-elsewhere", // ENOENT, or bytes or attributes not the model's, through a descriptor of a file another mount unlinked (seeds 224009209, 146534115, 988806382)
}

// onlyNlink: a stat's difference from the model that is its link count
// alone; nlinkAt: the same of one path in a tree's difference.
var (
	onlyNlink = regexp.MustCompile(`^nlink \d+, want \d+$`)
	nlinkAt   = regexp.MustCompile(`^([^:]*): nlink \d+, want \d+$`)
)

// recoverable: classes after which the model takes what was seen, so an
// excluded one does not end the run.
var recoverable = map[string]bool{"truncate-partial": true, "unlinked-elsewhere": true}

// lockTimeout is esfs's --lock-timeout (the default).
const lockTimeout = 30 * time.Second

// opLimit: a call taking longer hangs (a frozen mount is declared dead
// within lease plus grace, and held requests end at their timeout).
const opLimit = 3 * time.Minute

type slot struct {
	idx   int
	root  string
	w     executor
	m     *mounttest.Mount
	core  *coreMount         // instead of m, with Config.Cores
	past  []*mounttest.Mount // the slot's earlier mounts, killed
	proxy *mounttest.FaultProxy
	rnd   *rand.Rand
	gen   int // the worker process's generation (fcntl owner)
	// paused: no new operation (a freeze or kill is coming); busy: one in
	// flight; resolving: unknown outcomes not settled yet.
	paused, busy bool
	resolving    int
	observing    int   // looks through its worker in flight (settling another's outcome), or a shape's steps (shapes.go)
	cur          int64 // the operation in flight, while busy
	// killing: it is being killed with an operation in flight, whose
	// answer (the worker gone) is an outcome its death decides.
	killing bool
	dead    bool
	// What a death may take back: the operations since the last fsync
	// that returned, and the model as it was then.
	atRisk  []*histEntry
	snap    *State
	snapIdx int
	faults  []*armed
	lost    int // "session lost" lines expected in its log
}

type histEntry struct {
	op    *Op
	mount int
	risky bool // in its mount's atRisk
	// alts are the other outcomes of a call its mount's death cut short
	// (cutShort): what a failed write-back of it may leave.
	alts [][]*Op
}

// FD is a descriptor a worker keeps open.
type FD struct {
	ID, Mount int
	Ino       int
	Dir, Fifo bool
	ReadOnly  bool
	// OFD is the open file description it names: its own ID, or that of
	// the descriptor it is a dup of (flocks are the description's).
	OFD int
	wfd int // the worker's number for it
	gen int
	// Pending are its writes not flushed yet: only a close or fsync
	// through it lands them.
	Pending []pwrite
	// stale: another mount changed the file's bytes since it was
	// opened, or some mount while it was being opened: close-to-open,
	// its reads need not see that, but nothing older than floor (the
	// file's version, in dataHist, when its open began) nor than seen
	// (the newest version it has read).
	stale       bool
	floor, seen int
	// mayEIO: the next fsync or close may report an error of a write that
	// failed before (errseq). mustEIO: its mount died with its writes, or
	// its file was lost: its close must fail.
	mayEIO, mustEIO bool
}

// Runner is one run.
type Runner struct {
	t   testing.TB
	cfg Config
	fs  *mounttest.FS

	mu       sync.Mutex // protects everything below
	cond     *sync.Cond
	st       *State
	slots    []*slot
	fds      map[int]*FD
	nextFD   int
	nextIno  int
	n        int64
	inflight map[int64]*Footprint
	// waiting are the operations waiting for their footprint, by ticket:
	// a later one that overlaps an earlier one waits behind it, so an
	// operation on a busy footprint (the root, say) is not starved.
	waiting map[int64]*Footprint
	ticket  int64
	hist    []*histEntry
	// dataHist is each file's bytes as they were, version after version
	// (dataVer), for the reads that may see an older one (stale
	// descriptors): never one older than they saw before.
	dataHist map[int][]dataVer
	locks    lockTable
	stopped  bool
	res      *Result

	logMu   sync.Mutex // protects histLog and tail: logf is called with r.mu held or not
	histLog *os.File
	tail    []string

	wg sync.WaitGroup
	// watchers counts the goroutines waiting for an injected fault to
	// act; over, closed when Run returns, ends them, so that none counts
	// a fault into res after the caller has it.
	watchers sync.WaitGroup
	over     chan struct{}
}

// Run runs a campaign as cfg says and returns what it found; the test
// fails only on errors of its own machinery.
func Run(t testing.TB, cfg Config) *Result {
	t.Helper()
	if cfg.Mounts == 0 {
		cfg.Mounts = 3
	}
	if cfg.Lease == 0 {
		cfg.Lease = 4 * time.Second
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	r := &Runner{t: t, cfg: cfg, st: NewState(), fds: map[int]*FD{}, nextIno: 1000, dataHist: map[int][]dataVer{},
		inflight: map[int64]*Footprint{}, waiting: map[int64]*Footprint{}, locks: lockTable{byIno: map[int][]*holder{}},
		res: &Result{Seed: cfg.Seed, Ops: map[string]int{}, Faults: map[string]int{}, ExcludedSeen: map[string]int{}}}
	r.cond = sync.NewCond(&r.mu)
	r.over = make(chan struct{})
	hf, err := os.CreateTemp("", fmt.Sprintf("esfs-campaign-%d-*.log", cfg.Seed))
	if err != nil {
		t.Fatal(err)
	}
	r.histLog, r.res.History = hf, hf.Name()
	defer hf.Close()
	start := time.Now()
	r.setup()
	r.logf("seed %d, %d workers, faults %v, for %s", cfg.Seed, len(r.slots), cfg.Faults, cfg.Duration)
	for _, sl := range r.slots {
		r.wg.Add(1)
		go func() { defer r.wg.Done(); r.loop(sl) }()
	}
	faultsDone := make(chan struct{})
	if cfg.Faults && r.fs != nil {
		go func() { defer close(faultsDone); r.injectFaults() }()
	} else {
		close(faultsDone)
	}
	deadline := time.After(cfg.Duration)
	for done := false; !done; {
		select {
		case <-deadline:
			done = true
		case <-time.After(200 * time.Millisecond):
			r.mu.Lock()
			done = r.stopped
			r.mu.Unlock()
		}
	}
	r.stop()
	<-faultsDone
	r.wg.Wait()
	r.waitIdle()
	if r.ok() {
		r.finish()
	}
	close(r.over)
	r.watchers.Wait()
	r.res.Took = time.Since(start)
	r.logf("done in %s: %d operations, faults %v, %d findings", r.res.Took.Round(time.Second), r.total(), r.res.Faults, len(r.res.Findings))
	return r.res
}

func (r *Runner) total() int {
	n := 0
	for _, c := range r.res.Ops {
		n += c
	}
	return n
}

// ok: no finding so far (an excluded one included: the model is off).
func (r *Runner) ok() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.res.Findings) == 0 && r.res.Excluded == nil
}

func (r *Runner) stop() {
	r.mu.Lock()
	r.stopped = true
	r.cond.Broadcast()
	r.mu.Unlock()
}

// waitIdle waits for the unknown outcomes still being settled.
func (r *Runner) waitIdle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.inflight) > 0 {
		r.cond.Wait()
	}
}

func (r *Runner) setup() {
	t := r.t
	if r.cfg.Roots != nil {
		for i, root := range r.cfg.Roots {
			r.slots = append(r.slots, &slot{idx: i, root: root, w: startWorker(t, root),
				rnd: rand.New(rand.NewSource(r.cfg.Seed*1000 + int64(i)))})
		}
	} else {
		r.fs = mounttest.NewFS(t)
		for i := 0; i < r.cfg.Mounts; i++ {
			sl := &slot{idx: i, rnd: rand.New(rand.NewSource(r.cfg.Seed*1000 + int64(i)))}
			sl.proxy = mounttest.NewFaultProxy(t, r.fs.URL)
			if r.cfg.Cores {
				sl.core = startCore(t, r.fs, sl.proxy.URL, r.cfg.Lease, r.cfg.Timeout, fmt.Sprintf("(campaign core m%d)", i))
				sl.w = newCoreWorker(sl.core.m, uint32(1000+i))
			} else {
				r.mount(sl)
			}
			r.slots = append(r.slots, sl)
		}
	}
	// The root's mode is the filesystem's (a tmpfs directory made by the
	// test is 0700).
	resp, err := r.slots[0].w.do(&wire.Req{Op: "stat", Path: rootPath}, opLimit)
	if err != nil || resp.Stat == nil {
		t.Fatalf("stat of the root: %v %+v", err, resp)
	}
	r.st.Inodes[rootID].Mode = resp.Stat.Mode & 0o7777
	for _, sl := range r.slots {
		sl.snap = r.st.Copy()
	}
}

// mount (re)mounts slot sl through its fault proxy and starts its worker.
func (r *Runner) mount(sl *slot) {
	args := []string{"--lease", r.cfg.Lease.String(), "--es-timeout", r.cfg.Timeout.String(), "--es-url", sl.proxy.URL}
	if r.cfg.Debug {
		args = append(args, "--debug")
	}
	m := r.fs.Mount(r.t, args...)
	r.t.Cleanup(func() { m.Signal(unix.SIGCONT) }) // before the mount's own cleanup
	if sl.m != nil {
		sl.past = append(sl.past, sl.m) // killed: its log tells what it left
	}
	sl.m, sl.root = m, m.Dir
	sl.w = startWorker(r.t, m.Dir)
	sl.lost = strings.Count(m.Log(), "session lost")
}

// logf adds a line to the history.
func (r *Runner) logf(format string, args ...any) {
	line := time.Now().Format("15:04:05.000 ") + fmt.Sprintf(format, args...)
	r.logMu.Lock()
	defer r.logMu.Unlock()
	fmt.Fprintln(r.histLog, line)
	r.tail = append(r.tail, line)
	if len(r.tail) > 400 {
		r.tail = r.tail[200:]
	}
}

// Tail is the end of the history.
func (r *Runner) Tail(n int) string {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	if len(r.tail) < n {
		n = len(r.tail)
	}
	return strings.Join(r.tail[len(r.tail)-n:], "\n")
}

// finding records a failed check (r.mu held) and ends the run.
func (r *Runner) finding(class, format string, args ...any) {
	f := Finding{Class: class, Text: fmt.Sprintf(format, args...)}
	if r.stopped && (len(r.res.Findings) > 0 || r.res.Excluded != nil) {
		// The model is off since the first one: what follows is noise.
		r.logf("after the first finding (not counted): %s: %s", class, f.Text)
		return
	}
	r.logf("FINDING %s: %s", class, f.Text)
	if r.cfg.Exclude[class] && recoverable[class] {
		r.res.ExcludedSeen[class]++
		r.logf("  (an excluded class: the model takes what was seen, and the run goes on)")
		return
	}
	if r.cfg.Exclude[class] {
		if r.res.Excluded == nil {
			// Its logs too: an open bug's next diagnosis needs them.
			if logs := r.keepMountLogs(); logs != "" {
				f.Text += " (the mounts' logs: " + logs + ")"
			}
			r.res.Excluded = &f
		}
	} else {
		f.Text += "\nhistory (last lines; the whole of it in " + r.res.History + "):\n" + r.Tail(60)
		if logs := r.keepMountLogs(); logs != "" {
			f.Text += "\nthe mounts' logs: " + logs
		}
		r.res.Findings = append(r.res.Findings, f)
	}
	r.stopped = true
	r.cond.Broadcast()
}

func (r *Runner) conflicts(fp *Footprint) bool { return r.conflictsBut(fp, 0) }

// keepMountLogs copies each mount's log next to the history (the test's
// cleanup removes the originals), those of killed ones too, and returns
// where they went.
func (r *Runner) keepMountLogs() string {
	var kept []string
	keep := func(m *mounttest.Mount, name string) {
		if m == nil {
			return
		}
		name = strings.TrimSuffix(r.res.History, ".log") + name
		if err := os.WriteFile(name, []byte(m.Log()), 0o644); err == nil {
			kept = append(kept, name)
		}
	}
	for _, sl := range r.slots {
		if sl.core != nil {
			name := strings.TrimSuffix(r.res.History, ".log") + fmt.Sprintf(".m%d", sl.idx)
			if err := os.WriteFile(name, []byte(sl.core.Log()), 0o644); err == nil {
				kept = append(kept, name)
			}
		}
		keep(sl.m, fmt.Sprintf(".m%d", sl.idx))
		for i, m := range sl.past {
			keep(m, fmt.Sprintf(".m%d-killed%d", sl.idx, i+1))
		}
	}
	return strings.Join(kept, " ")
}

// conflictsBut is conflicts with the operation in flight ignore set aside.
func (r *Runner) conflictsBut(fp *Footprint, ignore int64) bool {
	for k, g := range r.inflight {
		if k != ignore && fp.overlaps(g) {
			return true
		}
	}
	return false
}

// reserve waits until nothing in flight, and nothing that waited longer,
// overlaps the footprint footprint() computes, and returns it (r.mu held;
// nil if stop says to give up).
func (r *Runner) reserve(footprint func() *Footprint, stop func() bool) *Footprint {
	return r.reserveBut(footprint, stop, 0)
}

// reserveBut is reserve, overlapping the operation in flight ignore if
// it must.
func (r *Runner) reserveBut(footprint func() *Footprint, stop func() bool, ignore int64) *Footprint {
	r.ticket++
	me := r.ticket
	defer delete(r.waiting, me)
	for {
		if stop() {
			return nil
		}
		fp := footprint()
		r.waiting[me] = fp
		blocked := r.conflictsBut(fp, ignore)
		for t, g := range r.waiting {
			if t < me && fp.overlaps(g) {
				blocked = true
			}
		}
		if !blocked {
			return fp
		}
		r.cond.Wait()
	}
}

func (r *Runner) footprint(op *Op) *Footprint {
	fp := &Footprint{}
	if op.throughFD() {
		if fd := r.fds[op.FD]; fd != nil {
			fp.addInode(r.st, fd.Ino)
		}
		return fp
	}
	fp.add(r.st, op.Path)
	if op.Kind == "rename" || op.Kind == "link" {
		fp.add(r.st, op.Path2)
	}
	for _, id := range []int{op.Ino, op.NewID, op.Victim} {
		if id != 0 {
			fp.addInode(r.st, id)
		}
	}
	return fp
}

func (r *Runner) fdsOf(mount int) []*FD {
	var out []*FD
	for _, fd := range r.fds {
		if fd.Mount == mount {
			out = append(out, fd)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// pending: some descriptor has unflushed writes to ino.
func (r *Runner) pending(ino int) bool {
	for _, fd := range r.fds {
		if fd.Ino == ino && len(fd.Pending) > 0 {
			return true
		}
	}
	return false
}

// pendingElsewhere: another descriptor than fd has unflushed writes to
// fd's file.
func (r *Runner) pendingElsewhere(fd *FD) bool {
	for _, g := range r.fds {
		if g != fd && g.Ino == fd.Ino && len(g.Pending) > 0 {
			return true
		}
	}
	return false
}

func (r *Runner) ownerFlock(fd *FD) string { return fmt.Sprintf("m%d/fd%d", fd.Mount, fd.OFD) }
func (r *Runner) ownerPosix(sl *slot) string {
	return fmt.Sprintf("m%d/w%d", sl.idx, sl.gen)
}

// releaseWindow: how long a released lock may still be seen held by
// another mount (its release retried, its owner declared dead).
func (r *Runner) releaseWindow() time.Duration {
	return 2*r.cfg.Lease + r.cfg.Timeout + 10*time.Second
}

// loop runs slot sl's operations until the run stops.
func (r *Runner) loop(sl *slot) {
	for {
		r.mu.Lock()
		for sl.paused && !r.stopped {
			r.cond.Wait()
		}
		if r.stopped {
			r.mu.Unlock()
			return
		}
		op := r.generate(sl)
		r.mu.Unlock()
		if op.Kind == "shape" {
			r.runShape(sl, op)
			continue
		}
		r.exec(sl, op, false)
	}
}

// exec runs op on slot sl once nothing in flight overlaps it, and checks
// its answer. It returns false if it did not run it (the run stopped, or
// the slot was paused meanwhile, unless force: the closes of a death and
// of the end run on a paused slot).
func (r *Runner) exec(sl *slot, op *Op, force bool) bool {
	r.mu.Lock()
	fp := r.reserve(func() *Footprint { return r.footprint(op) }, func() bool {
		// Its descriptor closed meanwhile (its mount died), or its slot
		// paused for a death.
		return op.throughFD() && r.fds[op.FD] == nil || sl.paused && !force
	})
	if fp == nil {
		r.cond.Broadcast() // others may have waited behind it
		r.mu.Unlock()
		return false
	}
	wfd := r.dispatch(op, fp)
	sl.busy, sl.cur = true, op.N
	r.mu.Unlock()

	resp, err := r.call(sl, op, wfd)

	r.mu.Lock()
	defer r.mu.Unlock()
	sl.busy = false
	r.answered(sl, op, fp, resp, err)
	return true
}

// dispatch numbers op, whose footprint fp is reserved, and puts it in
// flight; it returns the worker's number of its descriptor (r.mu held).
func (r *Runner) dispatch(op *Op, fp *Footprint) (wfd int) {
	r.admit(op)
	r.n++
	op.N, op.Seq = r.n, r.n
	switch op.Kind {
	case "create", "mkdir", "symlink", "mkfifo":
		op.NewID = r.nextIno
		r.nextIno++
	}
	if op.throughFD() {
		fd := r.fds[op.FD]
		op.Ino, wfd = fd.Ino, fd.wfd
	}
	r.inflight[op.N] = fp
	return wfd
}

// call makes op's calls through slot sl's worker (r.mu not held).
func (r *Runner) call(sl *slot, op *Op, wfd int) (*wire.Resp, error) {
	op.Start = time.Now()
	resp, err := sl.w.do(op.req(wfd), opLimit)
	op.Took = time.Since(op.Start)
	return resp, err
}

// answered checks op's answer and takes it out of flight unless its
// outcome is being settled (r.mu held).
func (r *Runner) answered(sl *slot, op *Op, fp *Footprint, resp *wire.Resp, err error) {
	if keep := r.answer(sl, op, fp, resp, err); !keep {
		delete(r.inflight, op.N)
	}
	r.cond.Broadcast()
}

// admit turns op into one the model can judge, now that nothing in
// flight overlaps it (r.mu held): while a descriptor has unflushed writes
// to a file (which land at its close or fsync), nothing else writes or
// truncates the file, since two mounts' unflushed writes are not merged
// and the model applies a descriptor's writes when they land.
func (r *Runner) admit(op *Op) {
	switch op.Kind {
	case "write", "append", "truncate":
		if in := r.st.Get(op.Path); in != nil && r.pending(in.ID) {
			op.Kind = "stat"
		}
	case "ftruncate", "pwrite":
		fd := r.fds[op.FD]
		if op.Kind == "ftruncate" && r.pending(fd.Ino) || r.pendingElsewhere(fd) {
			op.Kind = "fdfsync"
		}
	}
}

// unknownErrno: errors that leave a call's outcome unknown.
func unknownErrno(e int) bool {
	switch unix.Errno(e) {
	case unix.EIO, unix.ETIMEDOUT, unix.EINTR, unix.EAGAIN, unix.ENOTCONN:
		return true
	}
	return false
}

func errname(e int) string {
	if e == 0 {
		return "0"
	}
	return unix.ErrnoName(unix.Errno(e))
}

// answer checks op's answer and applies it to the model (r.mu held). It
// returns true when op's footprint stays reserved: its outcome is
// unknown and being settled.
func (r *Runner) answer(sl *slot, op *Op, fp *Footprint, resp *wire.Resp, err error) bool {
	r.res.Ops[op.Kind]++
	switch {
	case sl.killing && sl.dead && (err == errWorkerGone || err == nil && resp.Err == "" && unknownErrno(resp.Errno)):
		// (dead: the kill happened; a kill given up, at the run's end
		// say, left the call to answer as any (seed 86292771).)
		r.logf("%s -> killed in flight", op)
		if !op.isCheck() && !op.throughFD() && r.st.Copy().Apply(op) == 0 {
			// Landed or not: its mount's death decides, as the last of
			// its calls.
			if op.opens() {
				r.releasePosix(sl, op.Ino)
			}
			alts := r.cutShort(op)
			r.apply(sl, op, true)
			r.hist[len(r.hist)-1].alts = alts
		}
		return false
	case err == errTimeout:
		r.logf("%s -> no answer in %s", op, opLimit)
		r.finding("hang", "%s: no answer within %s", op, opLimit)
		return false
	case err != nil:
		r.logf("%s -> %v", op, err)
		r.finding("worker", "%s: %v", op, err)
		return false
	case resp.Err != "":
		r.logf("%s -> worker error %s", op, resp.Err)
		r.finding("worker", "%s: %s", op, resp.Err)
		return false
	}
	op.Errno, op.Failed, op.Resp = resp.Errno, resp.Failed, resp
	r.logf("%s -> %s%s (%s)", op, errname(op.Errno), failedCall(op), op.Took.Round(time.Millisecond))
	if op.Errno != 0 && unknownErrno(op.Errno) && r.fs != nil && op.Kind != "flock" && op.Kind != "fcntl" {
		r.checkSurpriseDeath(sl)
		if op.Errno == int(unix.EAGAIN) && op.Took >= lockTimeout-time.Second {
			out, _ := r.fs.Run("locks")
			r.finding("stuck-lock", "%s: EAGAIN after %s: a lock was held for the whole --lock-timeout; esfs locks:\n%s",
				op, op.Took.Round(time.Millisecond), out)
			return false
		}
	}
	if op.Kind == "flock" || op.Kind == "fcntl" || op.Kind == "getlk" {
		r.answerLock(sl, op)
		if op.Lock == "un" && op.Kind != "getlk" {
			return r.flushBehind(sl, op, fp, "unlock")
		}
		return false
	}
	c := r.st.Copy()
	want := c.Apply(op)
	if op.Kind == "pwrite" || op.Kind == "close" || op.Kind == "fdfsync" {
		return r.answerFD(sl, op, fp, want)
	}
	switch {
	case op.Errno == want:
		if want == 0 {
			r.effects(sl, op)
		} else if op.opens() && op.Failed != "open" {
			r.releasePosix(sl, op.Ino)
		}
		return false
	case unknownErrno(op.Errno) && r.cfg.Faults && (op.Kind == "open" || op.Kind == "dup"):
		// No descriptor was made, and nothing else: not settled (a shape
		// changes the file while such a call may be in flight).
		return false
	case unknownErrno(op.Errno) && r.cfg.Faults && !op.isCheck():
		if op.opens() {
			r.releasePosix(sl, op.Ino)
		}
		var cands [][]*Op
		switch {
		case op.Kind == "create" && want == 0 && op.Failed == "open":
			// Made or not; nothing was written.
			empty := *op
			empty.Len = 0
			cands = append(cands, nil, []*Op{&empty})
		case (op.Kind == "write" || op.Kind == "append") && op.Failed == "open":
			cands = append(cands, nil) // nothing was written
		case op.Kind == "create" && want == 0 && op.Failed != "open":
			// The file was made (open returned it); its bytes may not
			// have landed, or only its size (a write-back error: zeros).
			empty := *op
			empty.Len = 0
			zeros := &Op{N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.NewID, Len: op.Len}
			cands = append(cands, []*Op{&empty}, []*Op{op}, []*Op{&empty, zeros})
		case (op.Kind == "write" || op.Kind == "append") && want == 0 && op.Failed != "open":
			// Written, or not, or only sized (zeros where the bytes were
			// to go), as after a write-back error.
			off := op.Off
			if op.Kind == "append" {
				off = int64(len(r.st.Inodes[op.Ino].Data))
			}
			zeros := &Op{N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.Ino, Off: off, Len: op.Len}
			cands = append(cands, nil, []*Op{op}, []*Op{zeros})
			if size := int64(len(r.st.Inodes[op.Ino].Data)); off+op.Len > size {
				// Or only the new size landed, the bytes it covers zeros.
				grow := &Op{N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.Ino, Off: size, Len: off + op.Len - size}
				cands = append(cands, []*Op{grow})
			}
		case want == 0:
			cands = append(cands, nil, []*Op{op})
		default:
			cands = append(cands, nil)
		}
		r.settleLater(sl, op, fp, cands)
		return true
	case unknownErrno(op.Errno) && r.cfg.Faults && op.isCheck():
		if op.Failed != "close" || op.throughFD() {
			return false // a look that failed tells nothing of itself
		}
		return r.flushBehind(sl, op, fp, "close")
	}
	r.errnoFinding(sl, op, want)
	return false
}

// cutShort lists what else than all or nothing a write by path (create,
// write, append) that its mount's death cut short may leave, as the
// candidates of such a write that failed (answer): the file made empty,
// or zeros where its bytes were to go, or only the size it grew to, the
// bytes it covers zeros (its size written, and then its chunk taken back
// as past the stored end, or never sent) (r.mu held; op applies, with
// op.Ino set).
func (r *Runner) cutShort(op *Op) [][]*Op {
	switch op.Kind {
	case "create":
		empty := *op
		empty.Len = 0
		alts := [][]*Op{{&empty}}
		if op.Len > 0 {
			alts = append(alts, []*Op{&empty, {N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.NewID, Len: op.Len}})
		}
		return alts
	case "write", "append":
		size := int64(len(r.st.Inodes[op.Ino].Data))
		off := op.Off
		if op.Kind == "append" {
			off = size
		}
		alts := [][]*Op{{{N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.Ino, Off: off, Len: op.Len}}}
		if off+op.Len > size {
			alts = append(alts, []*Op{{N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.Ino, Off: size, Len: off + op.Len - size}})
		}
		return alts
	}
	return nil
}

// flushBehind: op ran the flush of everything its mount buffered for
// its file (esfs keeps one buffer per file and mount), and whether that
// flush failed is not known: the pending writes of that mount's
// descriptors of the file may have landed, in part, or not, as at a
// failed fsync through them (a flush that fails gives them up), and each
// descriptor may hear of it at its next fsync or close (errseq); writes
// made after op are a flush of their own. Two calls do so: a look by path
// whose close failed (seed 385528116), and an unlock, which flushes so
// that the next holder reads what the owner wrote, and answers 0 even
// when that flush fails (seed 189815862: the unlock's flush was refused,
// a later write through the descriptor landed at its close, which said
// EIO for the first). Settled as such an fsync is; keep: op stays in
// flight until then (r.mu held).
func (r *Runner) flushBehind(sl *slot, op *Op, fp *Footprint, at string) (keep bool) {
	pending := r.takePending(sl, op.Ino, nil)
	if len(pending) == 0 {
		return false
	}
	flush := &Op{N: op.N, Mount: op.Mount, Kind: "flush", Ino: op.Ino, Writes: pending}
	failed := &Op{N: op.N, Mount: op.Mount, Kind: "fdfsync", Ino: op.Ino, Errno: op.Errno, Failed: at}
	r.settleLater(sl, failed, fp, [][]*Op{nil, {flush}})
	return true
}

// takePending takes the unflushed writes to ino of every descriptor of
// sl's mount, in the order they were made, for a flush of them whose
// outcome is not known: each of those descriptors may hear of its failure
// at its next fsync or close, but told, which has just been (r.mu held).
func (r *Runner) takePending(sl *slot, ino int, told *FD) []pwrite {
	var pending []pwrite
	for _, fd := range r.fdsOf(sl.idx) {
		if fd.Ino == ino {
			pending = append(pending, fd.Pending...)
			fd.Pending, fd.mayEIO = nil, fd != told
		}
	}
	sort.SliceStable(pending, func(i, j int) bool { return pending[i].Seq < pending[j].Seq })
	return pending
}

// errnoFinding reports op's errno where Linux answers want. A call
// through a descriptor of a file another mount unlinked (class
// unlinked-elsewhere, a documented limit) leaves the model with a
// descriptor whose file nobody else reaches: a close closes it, what it
// had buffered is gone, and its bytes and attributes are no longer
// compared, so that the run goes on when the class is excluded (r.mu
// held).
func (r *Runner) errnoFinding(sl *slot, op *Op, want int) {
	class := r.errnoClass(op)
	r.finding(class, "%s: answered %s%s, Linux answers %s", op, errname(op.Errno), failedCall(op), errname(want))
	r.unlinkedElsewhere(sl, op, class)
}

// unlinkedElsewhere, after a finding of class unlinked-elsewhere that is
// excluded, gives up the model's knowledge of op's file and descriptor
// (see errnoFinding; r.mu held).
func (r *Runner) unlinkedElsewhere(sl *slot, op *Op, class string) {
	if class != "unlinked-elsewhere" || !r.cfg.Exclude[class] {
		return
	}
	if in := r.st.Inodes[op.Ino]; in != nil {
		in.Unsure, in.DataUnknown = true, true
	}
	if fd := r.fds[op.FD]; fd != nil {
		fd.Pending, fd.mayEIO = nil, false
		if op.Kind == "close" {
			r.closed(sl, fd)
		}
	}
}

// errnoClass is the class of an errno finding of op: a call through a
// descriptor of a file that has no name left anywhere, answered ENOENT or
// ESTALE, is a known shape (an unlink on another mount deletes the inode
// of a file this one still has open: esfs keeps an unlinked file until its
// last close on the mount that unlinked it only); others are "errno".
func (r *Runner) errnoClass(op *Op) string {
	if (op.Errno == int(unix.ENOENT) || op.Errno == int(unix.ESTALE)) && r.throughUnlinked(op) {
		return "unlinked-elsewhere"
	}
	return "errno"
}

// throughUnlinked: op goes through a descriptor of a file that has no name
// left (see errnoClass).
func (r *Runner) throughUnlinked(op *Op) bool {
	if !op.throughFD() {
		return false
	}
	in := r.st.Inodes[op.Ino]
	return in != nil && in.Kind != Dir && in.Links == 0
}

func failedCall(op *Op) string {
	if op.Errno == 0 || op.Failed == "" {
		return ""
	}
	return " at " + op.Failed
}

// effects applies op, answered as the model says, to the model and
// checks what it saw (r.mu held).
func (r *Runner) effects(sl *slot, op *Op) {
	switch op.Kind {
	case "stat", "read", "readdir", "fstat", "pread":
		if op.opens() {
			r.releasePosix(sl, op.Ino)
		}
		r.check(sl, op)
		return
	case "open":
		r.nextFD++
		in := r.st.Inodes[op.Ino]
		fd := &FD{ID: r.nextFD, OFD: r.nextFD, Mount: sl.idx, Ino: op.Ino, Dir: in.Kind == Dir, Fifo: in.Kind == Fifo,
			ReadOnly: op.ReadOnly, wfd: op.Resp.FD, gen: sl.gen}
		fd.floor, fd.stale = r.openedAt(op, sl.idx)
		fd.seen = fd.floor
		r.fds[fd.ID], op.NewFD = fd, fd.ID
		how := ""
		if fd.stale {
			how = fmt.Sprintf(" (the file changed while it opened: reads of version %d or later)", fd.floor)
		}
		r.logf("  fd%d is ino%d on m%d%s", fd.ID, fd.Ino, sl.idx, how)
		return
	case "dup":
		orig := r.fds[op.FD]
		r.nextFD++
		fd := *orig
		// What the description has to report, either may (errseq is the
		// description's: the first of them to be closed reports it).
		fd.ID, fd.wfd, fd.Pending, fd.mayEIO, fd.mustEIO = r.nextFD, op.Resp.FD, nil, orig.mayEIO || orig.mustEIO, false
		r.fds[fd.ID], op.NewFD = &fd, fd.ID
		r.logf("  fd%d is a dup of fd%d (ino%d on m%d)", fd.ID, orig.ID, fd.Ino, sl.idx)
		return
	case "fsync", "fsyncdir":
		r.releasePosix(sl, op.Ino)
		r.synced(sl)
		return
	}
	if op.opens() {
		r.releasePosix(sl, op.Ino)
	}
	r.apply(sl, op, true)
}

// apply applies a state change to the model and the history.
func (r *Runner) apply(sl *slot, op *Op, risky bool) {
	if e := r.st.Apply(op); e != 0 {
		panic(fmt.Sprintf("campaign: %s applied with errno %s", op, errname(e)))
	}
	switch op.Kind {
	case "write", "append", "truncate", "ftruncate", "flush", "zero", "bytes":
		for _, fd := range r.fds {
			if fd.Ino == op.Ino && fd.Mount != op.Mount {
				fd.stale = true
			}
		}
	}
	h := &histEntry{op: op, mount: op.Mount, risky: risky}
	r.hist = append(r.hist, h)
	if risky && sl != nil {
		sl.atRisk = append(sl.atRisk, h)
	}
	switch op.Kind {
	case "create", "write", "append", "truncate", "ftruncate", "flush", "zero", "bytes":
		r.noteData(op.Ino, op.Mount)
		r.noteData(op.NewID, op.Mount)
	}
}

// synced: everything slot sl did is durable (an fsync returned).
func (r *Runner) synced(sl *slot) {
	sl.atRisk = nil
	sl.snap = r.st.Copy()
	sl.snapIdx = len(r.hist)
}

// releasePosix: the worker of sl closed a descriptor of ino, which ends
// its fcntl locks on the file.
func (r *Runner) releasePosix(sl *slot, ino int) {
	if ino == 0 {
		return
	}
	owner := r.ownerPosix(sl)
	r.locks.release(ino, func(h *holder) bool { return h.owner == owner }, time.Now().Add(r.releaseWindow()))
}

// answerFD handles what flushes a descriptor's writes: pwrite (buffered),
// fsync through it and its close.
func (r *Runner) answerFD(sl *slot, op *Op, fp *Footprint, want int) bool {
	fd := r.fds[op.FD]
	flushOp := func(writes []pwrite) *Op {
		return &Op{N: op.N, Mount: op.Mount, Kind: "flush", Ino: fd.Ino, Writes: writes}
	}
	if op.Errno == 0 {
		switch op.Kind {
		case "pwrite":
			fd.Pending = append(fd.Pending, pwrite{op.Off, op.Len, op.Seq})
			r.st.Inodes[fd.Ino].MtimeKnown = false // a write sets it at once
			return false
		case "close", "fdfsync":
			if len(fd.Pending) > 0 {
				r.apply(sl, flushOp(fd.Pending), true)
				fd.Pending = nil
			}
			fd.mayEIO = false
			if op.Kind == "close" {
				r.closed(sl, fd)
			} else {
				r.synced(sl)
			}
			return false
		}
	}
	if !unknownErrno(op.Errno) || (!r.cfg.Faults && !fd.mayEIO) {
		r.errnoFinding(sl, op, want)
		return false
	}
	// The write-back failed: what the mount had buffered for the file may
	// or may not have landed, whichever of its descriptors wrote it (esfs
	// keeps one buffer per file and mount, and a flush that fails gives
	// all of it up: later reads, through any descriptor, see what the
	// store holds; seed 269891804). This process is told now, the other
	// descriptors (errseq) once, at their next fsync or close.
	pending := r.takePending(sl, fd.Ino, fd)
	fd.mayEIO = false
	if op.Kind == "close" {
		r.closed(sl, fd)
	}
	cands := [][]*Op{nil}
	if len(pending) > 0 {
		cands = append(cands, []*Op{flushOp(pending)})
	}
	if op.Kind == "pwrite" {
		cands = append(cands, []*Op{flushOp(append(append([]pwrite{}, pending...), pwrite{op.Off, op.Len, op.Seq}))})
	}
	if len(cands) == 1 {
		return false
	}
	r.settleLater(sl, op, fp, cands)
	return true
}

// closed: fd is gone, and with it its worker's fcntl locks on the file,
// and its open file description's flock if it was the description's
// last descriptor.
func (r *Runner) closed(sl *slot, fd *FD) {
	delete(r.fds, fd.ID)
	if !r.ofdOpen(fd.OFD) {
		owner := r.ownerFlock(fd)
		until := time.Now().Add(r.releaseWindow())
		r.locks.release(fd.Ino, func(h *holder) bool { return h.owner == owner }, until)
	}
	if fd.gen == sl.gen {
		r.releasePosix(sl, fd.Ino)
	}
}

// ofdOpen: a descriptor of open file description ofd is still open.
func (r *Runner) ofdOpen(ofd int) bool {
	for _, g := range r.fds {
		if g.OFD == ofd {
			return true
		}
	}
	return false
}

// answerLock checks a flock or fcntl answer against the locks the model
// knows held and released.
func (r *Runner) answerLock(sl *slot, op *Op) {
	fd := r.fds[op.FD]
	posix := op.Kind == "fcntl" || op.Kind == "getlk"
	owner := r.ownerFlock(fd)
	segs := [2]int{-1, -1}
	if posix {
		owner, segs = r.ownerPosix(sl), op.Seg
	}
	now := time.Now()
	if op.Kind == "getlk" {
		// F_GETLK: what would conflict with the worker taking the range.
		if op.Errno != 0 {
			if !(unknownErrno(op.Errno) && r.cfg.Faults) {
				r.finding("errno", "%s: answered %s, Linux answers 0", op, errname(op.Errno))
			}
			return
		}
		held, maybe := r.locks.conflicts(fd.Ino, owner, true, op.Seg, op.Lock == "ex", now)
		got := op.Resp.Value
		switch {
		case got == "un" && len(held) > 0:
			r.finding("lock-two-owners", "%s: F_GETLK reports the range free, while held by %v", op, held)
		case got != "un" && len(held) == 0 && len(maybe) == 0:
			r.finding("lock-outlived", "%s: F_GETLK reports a %s lock, while none conflicts (nor was released within %s)", op, got, r.releaseWindow())
		}
		return
	}
	if op.Lock == "un" {
		if op.Errno != 0 && !(unknownErrno(op.Errno) && r.cfg.Faults) {
			r.finding("errno", "%s: answered %s, Linux answers 0", op, errname(op.Errno))
			return
		}
		// An unlock is done when it returns, but its write may be retried
		// in the background: others may see it a while longer.
		r.locks.release(fd.Ino, func(h *holder) bool {
			return h.owner == owner && (!posix || h.seg >= segs[0] && h.seg <= segs[1])
		}, now.Add(r.releaseWindow()))
		return
	}
	ex := op.Lock == "ex"
	held, maybe := r.locks.conflicts(fd.Ino, owner, posix, segs, ex, now)
	switch {
	case op.Errno == 0 && len(held) > 0:
		r.finding("lock-two-owners", "%s: granted, while held by %v", op, held)
	case op.Errno == 0:
		r.locks.take(fd.Ino, owner, sl.idx, posix, segs, ex)
	case op.Errno == int(unix.EAGAIN) && len(held) == 0 && len(maybe) == 0:
		r.finding("lock-outlived", "%s: EAGAIN, while no lock conflicts (nor was released within %s)", op, r.releaseWindow())
	case op.Errno == int(unix.EAGAIN):
		// Refused for a lock held, or released a moment ago.
	case unknownErrno(op.Errno) && r.cfg.Faults:
		// Granted or not, the process was told it is not: whatever landed
		// is removed in the background.
		r.locks.take(fd.Ino, owner, sl.idx, posix, segs, ex)
		r.locks.release(fd.Ino, func(h *holder) bool {
			return h.owner == owner && (!posix || h.seg >= segs[0] && h.seg <= segs[1])
		}, now.Add(r.releaseWindow()))
	default:
		r.finding("errno", "%s: answered %s; held %v, released %v", op, errname(op.Errno), held, maybe)
	}
}

// Replay is the command that runs cfg again.
func Replay(cfg Config) string {
	s := fmt.Sprintf("test/campaign.sh --seed %d --duration %s --mounts %d", cfg.Seed, cfg.Duration, cfg.Mounts)
	if !cfg.Faults {
		s += " --no-faults"
	}
	if cfg.Cores {
		s += " --cores"
	}
	if cfg.BigWrites {
		s += " --big-writes"
	}
	return s
}

// Totals says in one line what a run did.
func Totals(res *Result) string {
	kinds := make([]string, 0, len(res.Ops))
	n := 0
	for k, c := range res.Ops {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, c))
		n += c
	}
	sort.Strings(kinds)
	faults := make([]string, 0, len(res.Faults))
	for k, c := range res.Faults {
		faults = append(faults, fmt.Sprintf("%s=%d", k, c))
	}
	sort.Strings(faults)
	return fmt.Sprintf("%d operations in %s (%s); faults: %s; findings %d",
		n, res.Took.Round(time.Second), strings.Join(kinds, " "), strings.Join(faults, " "), len(res.Findings))
}

// TotalsLine is Totals for test/campaign.sh to add up: "seed=S ops
// KIND=N ... faults KIND=N ... findings CLASS=N ...".
func TotalsLine(res *Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d ops", res.Seed)
	for _, k := range sortedKeys(res.Ops) {
		fmt.Fprintf(&b, " %s=%d", k, res.Ops[k])
	}
	b.WriteString(" faults")
	for _, k := range sortedKeys(res.Faults) {
		fmt.Fprintf(&b, " %s=%d", k, res.Faults[k])
	}
	b.WriteString(" findings")
	classes := map[string]int{}
	for _, f := range res.Findings {
		classes[f.Class]++
	}
	if res.Excluded != nil {
		classes["excluded-"+res.Excluded.Class]++
	}
	for c, n := range res.ExcludedSeen {
		classes["excluded-"+c] += n
	}
	for _, k := range sortedKeys(classes) {
		fmt.Fprintf(&b, " %s=%d", k, classes[k])
	}
	return b.String()
}

func sortedKeys(m map[string]int) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
