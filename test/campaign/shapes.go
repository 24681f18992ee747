package campaign

// Shapes: a few calls on one file, from two or three mounts, in an order
// and with timing the random mix almost never makes, because each of
// them takes a race or a fault aimed at one request. A shape reserves the
// file's footprint for as long as it runs (nothing else touches the file
// meanwhile), and runs its calls through the workers of the mounts it
// picks, beside their own operations; each call is judged as any
// operation is (Runner.answer), an unknown outcome settled before the
// next call, and a shape adds checks of its own where the model alone
// cannot say (two mounts' reads of a file while its writer holds it open,
// a lock after a dup's close).
//
//   - late-open: on mount B an open of the file whose read of the inode
//     is answered late (a "late" fault: landed at once, answered seconds
//     later); meanwhile a mount (another, or B) changes the file and the
//     change returns, then B opens the file again and reads it; once the
//     late open returns, the second descriptor must read the change again,
//     whole (a slower open must not roll a descriptor back).
//   - hole: mount A holds the file open after an fsync; B writes past a
//     hole beyond the stored end, reads the hole (zeros) with its write
//     still buffered, and closes; A writes into the hole, or past the
//     dirty limit across it (the chunks land while A holds the file open,
//     and then two mounts' opens must agree), and closes, often with its
//     inode write after the chunks refused (a close that fails after its
//     chunks landed); then every mount reads the file (no mount may keep
//     zeros for a hole another filled).
//   - dup-lock: B takes a record lock and a flock through a descriptor,
//     dups it and closes one of the two: the record lock must be gone for
//     other mounts at once (POSIX: any close of the file by the process
//     ends its record locks); then it closes the other, and a flock
//     through a new open of the file must be granted at once (the first
//     went with its open file's last close); unless a fault acted on B's
//     requests meanwhile.

import (
	"fmt"
	"math/rand"
	"time"

	"golang.org/x/sys/unix"
)

var shapes = []struct {
	name string
	// others: how many other live mounts it needs.
	others int
	run    func(r *Runner, sh *shapeRun)
}{
	{"late-open", 0, (*Runner).shapeLateOpen},
	{"hole", 1, (*Runner).shapeHole},
	{"dup-lock", 1, (*Runner).shapeDupLock},
}

// shapeRun is one shape as it runs: the file, its reservation, the
// mounts it uses.
type shapeRun struct {
	name   string
	owner  *slot
	others []*slot // live mounts besides the owner, in random order
	path   string
	ino    int // the model's inode of the file
	fp     *Footprint
	rnd    *rand.Rand
}

// pickShape picks the shape slot sl runs next and its file ("": none
// fits now) (r.mu held).
func (r *Runner) pickShape(sl *slot) string {
	i := sl.rnd.Intn(len(shapes))
	live := 0
	for _, o := range r.slots {
		if o != sl && !o.dead && !o.paused {
			live++
		}
	}
	if shapes[i].others > live {
		return ""
	}
	return shapes[i].name
}

// shapeFile picks the file a shape works on: a file the model knows
// whole, nobody's unflushed writes to it; for the hole shape, smaller
// than a chunk; for the late open, one slot sl has not open (its open
// then reads the inode with the file's chunks, which the late fault
// picks) ("" if none) (r.mu held).
func (r *Runner) shapeFile(sl *slot, name string) string {
	v := view(r.st, names[sl.idx%len(names)])
	open := map[int]bool{}
	for _, fd := range r.fdsOf(sl.idx) {
		open[fd.Ino] = true
	}
	var fit []string
	for _, p := range v.files {
		in := r.st.Get(p)
		if in.Unsure || in.DataUnknown || r.pending(in.ID) || name == "hole" && len(in.Data) >= 1<<20 ||
			name == "late-open" && open[in.ID] {
			continue
		}
		fit = append(fit, p)
	}
	if len(fit) == 0 {
		return ""
	}
	return v.pick(sl.rnd, fit)
}

// runShape runs the shape op names on slot sl, if a file fits it and the
// mounts it needs are live.
func (r *Runner) runShape(sl *slot, op *Op) {
	var run func(*Runner, *shapeRun)
	need := 0
	for _, s := range shapes {
		if s.name == op.Shape {
			run, need = s.run, s.others
		}
	}
	r.mu.Lock()
	p := r.shapeFile(sl, op.Shape)
	if p == "" {
		r.mu.Unlock()
		return
	}
	fp := r.reserve(func() *Footprint {
		fp := &Footprint{}
		fp.add(r.st, p)
		return fp
	}, func() bool { return r.stopped || sl.paused })
	if fp == nil {
		r.cond.Broadcast()
		r.mu.Unlock()
		return
	}
	// What it waited for may have changed the file.
	in := r.st.Get(p)
	sh := &shapeRun{name: op.Shape, owner: sl, path: p, fp: fp, rnd: sl.rnd}
	for _, i := range sl.rnd.Perm(len(r.slots)) {
		if o := r.slots[i]; o != sl && !o.dead && !o.paused {
			sh.others = append(sh.others, o)
		}
	}
	if in == nil || in.Kind != File || in.Unsure || in.DataUnknown || r.pending(in.ID) || len(sh.others) < need ||
		op.Shape == "hole" && len(in.Data) >= 1<<20 {
		r.cond.Broadcast()
		r.mu.Unlock()
		return
	}
	sh.ino = in.ID
	r.n++
	key := -r.n
	r.inflight[key] = fp
	sl.busy = true
	sl.observing++
	for _, o := range sh.others {
		o.observing++
	}
	r.res.Ops["shape-"+op.Shape]++
	r.logf("SHAPE %s on m%d (others %s): %s, ino%d", op.Shape, sl.idx, slotNames(sh.others), p, in.ID)
	r.mu.Unlock()

	run(r, sh)

	r.mu.Lock()
	r.logf("SHAPE %s on m%d done", op.Shape, sl.idx)
	delete(r.inflight, key)
	sl.busy = false
	sl.observing--
	for _, o := range sh.others {
		o.observing--
	}
	r.cond.Broadcast()
	r.mu.Unlock()
}

func slotNames(sls []*slot) string {
	s := ""
	for _, sl := range sls {
		s += fmt.Sprintf(" m%d", sl.idx)
	}
	if s == "" {
		return "none"
	}
	return s[1:]
}

// step runs op on slot sl as one call of a shape, whose reservation
// covers it, and waits until its outcome is known (settled, if it had to
// be). It returns op answered, or nil if it did not run: the run stopped,
// or its descriptor is gone (r.mu not held).
func (r *Runner) step(sh *shapeRun, sl *slot, op *Op) *Op {
	op.Mount = sl.idx
	r.mu.Lock()
	if r.stopped || op.throughFD() && r.fds[op.FD] == nil {
		r.mu.Unlock()
		return nil
	}
	wfd := r.dispatch(op, sh.fp)
	r.mu.Unlock()
	resp, err := r.call(sl, op, wfd)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answered(sl, op, sh.fp, resp, err)
	for r.inflight[op.N] != nil {
		r.cond.Wait()
	}
	if op.Resp == nil {
		return nil // the worker failed: a finding
	}
	return op
}

// ok: the call ran and succeeded.
func ok(op *Op) bool { return op != nil && op.Errno == 0 }

// stepAsync is step in the background: its answer comes on the channel.
func (r *Runner) stepAsync(sh *shapeRun, sl *slot, op *Op) <-chan *Op {
	ch := make(chan *Op, 1)
	go func() { ch <- r.step(sh, sl, op) }()
	return ch
}

// fileSize is the model's size of the shape's file (r.mu not held).
func (r *Runner) fileSize(sh *shapeRun) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if in := r.st.Inodes[sh.ino]; in != nil {
		return int64(len(in.Data))
	}
	return 0
}

// isStopped: the run has stopped (r.mu not held).
func (r *Runner) isStopped() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopped
}

// shapeLateOpen: a slower concurrent open. On mount B (the owner) open #1 of the
// file has its read of the inode answered late; while it waits, a mount
// changes the file (another mount mostly, B itself sometimes) and the
// change returns; B's open #2 then reads the change; once #1 returns, a
// read through #2 must still return it, whole (the checker's exact read:
// #2 began after the change), and #1 nothing older than the file before
// the change (a stale descriptor: it began before).
//
// The change must return within the late answer's hold: another mount
// mostly makes it as the close of a descriptor it wrote through before
// #1 began (a flush: one chunk write and one inode write); B, and
// another mount sometimes, by a write, an append or a truncate by path
// (B cannot have the file open: #1 would then read the inode alone,
// which the fault does not pick).
func (r *Runner) shapeLateOpen(sh *shapeRun) {
	b, rnd := sh.owner, sh.rnd
	writer := b
	if len(sh.others) > 0 && rnd.Intn(4) > 0 {
		writer = sh.others[0]
	}
	size := r.fileSize(sh)
	change := &Op{Kind: "write", Path: sh.path, Off: 0, Len: size + 1 + rnd.Int63n(4096)} // rewritten, longer
	switch rnd.Intn(4) {
	case 0:
		change = &Op{Kind: "append", Path: sh.path, Len: 1 + rnd.Int63n(4096)}
	case 1:
		change = &Op{Kind: "truncate", Path: sh.path, Len: rnd.Int63n(size + 1)} // shorter
	}
	if writer != b && rnd.Intn(3) > 0 {
		opW := r.step(sh, writer, &Op{Kind: "open", Path: sh.path})
		if !ok(opW) {
			return
		}
		n := min(size+1+rnd.Int63n(4096), 1<<20) // chunk 0, rewritten, longer if it fits
		if !ok(r.step(sh, writer, &Op{Kind: "pwrite", FD: opW.NewFD, Len: n})) {
			return
		}
		change = &Op{Kind: "close", FD: opW.NewFD}
	}
	st := r.step(sh, b, &Op{Kind: "stat", Path: sh.path})
	if !ok(st) || st.Resp.Stat == nil {
		return
	}
	var arrived <-chan struct{}
	if b.proxy != nil {
		// Held as long as the request timeout lets the open go on.
		a := newArmed("late", 1, openRead(st.Resp.Stat.Ino))
		a.f.Late, a.f.Until = r.cfg.Timeout*4/5, time.Now().Add(10*time.Second)
		if !r.arm(b, a, fmt.Sprintf("read of inode %d for an open (%s)", st.Resp.Stat.Ino, sh.path)) {
			return
		}
		arrived = a.f.Arrived()
	}
	first := r.stepAsync(sh, b, &Op{Kind: "open", Path: sh.path, ReadOnly: true})
	var op1 *Op
	select {
	case <-arrived:
	case op1 = <-first:
		first = nil
	case <-time.After(r.cfg.Timeout):
	}
	r.step(sh, writer, change)
	op2 := r.step(sh, b, &Op{Kind: "open", Path: sh.path, ReadOnly: rnd.Intn(2) == 0})
	if ok(op2) {
		r.step(sh, b, &Op{Kind: "pread", FD: op2.NewFD})
	}
	if first != nil {
		op1 = <-first
	}
	if ok(op2) {
		r.step(sh, b, &Op{Kind: "pread", FD: op2.NewFD})
		r.step(sh, b, &Op{Kind: "fstat", FD: op2.NewFD})
	}
	if ok(op1) {
		r.step(sh, b, &Op{Kind: "pread", FD: op1.NewFD})
	}
}

// bigWriteLen is how much a write must buffer to pass a mount's dirty
// limit (vfs.Options.DirtyLimit), one chunk more (0: not on these
// mounts, where it costs too much for the suite: Config.BigWrites).
func (r *Runner) bigWriteLen() int64 {
	switch {
	case r.cfg.Cores, r.cfg.Roots != nil:
		return coreDirtyLimit + 1<<20
	case r.cfg.BigWrites:
		return 33 << 20 // vfs's default limit, 32 MiB
	}
	return 0
}

// shapeHole: a hole filled by another mount. Mount A (another) holds the file open
// after an fsync (its writes have a data generation); B (the owner)
// writes 4 KiB past a hole beyond the file's stored end, reads the hole
// (zeros) before its write lands, and closes; A writes into the hole,
// and closes, two times in three with its inode write after its chunks
// refused (503: the close fails, its chunks landed); then each mount
// reads the file. With big, A's write passes the dirty limit, so its
// chunks land while it holds the file open: then a mount's open, B's,
// must read what another's opens before and after it read.
func (r *Runner) shapeHole(sh *shapeRun) {
	const chunk = 1 << 20
	b, a, rnd := sh.owner, sh.others[0], sh.rnd
	big := r.bigWriteLen()
	if rnd.Intn(3) > 0 {
		big = 0
	}
	// The hole is chunk 1 (the file is smaller than chunk 0), and with
	// big as many chunks as A writes: B's chunks (0, and the one it
	// writes) are kept with their versions, the hole's are not.
	holeEnd := int64(2 * chunk)
	if big > 0 {
		holeEnd = chunk + (big+chunk-1)/chunk*chunk
	}
	st := r.step(sh, a, &Op{Kind: "stat", Path: sh.path})
	if !ok(st) || st.Resp.Stat == nil {
		return
	}
	ino := st.Resp.Stat.Ino
	opA := r.step(sh, a, &Op{Kind: "open", Path: sh.path})
	if !ok(opA) {
		return
	}
	fdA := opA.NewFD
	size := r.fileSize(sh)
	n := 1 + rnd.Int63n(4096)
	r.step(sh, a, &Op{Kind: "pwrite", FD: fdA, Off: oneChunk(rnd.Int63n(size+1), n), Len: n})
	if !ok(r.step(sh, a, &Op{Kind: "fdfsync", FD: fdA})) {
		return
	}
	if r.fileSize(sh) >= chunk {
		return // the pwrite's chunk 0 ended past it: no hole past the end
	}
	opB := r.step(sh, b, &Op{Kind: "open", Path: sh.path})
	if !ok(opB) {
		return
	}
	n = 1 + rnd.Int63n(4096)
	r.step(sh, b, &Op{Kind: "pwrite", FD: opB.NewFD, Off: oneChunk(holeEnd+rnd.Int63n(64<<10), n), Len: n})
	r.step(sh, b, &Op{Kind: "pread", FD: opB.NewFD})
	if !ok(r.step(sh, b, &Op{Kind: "close", FD: opB.NewFD})) {
		return
	}
	fill := &Op{Kind: "pwrite", FD: fdA, Off: chunk + rnd.Int63n(chunk/2)}
	fill.Len = 2*chunk - fill.Off // to the hole chunk's end
	if big > 0 {
		fill.Off, fill.Len = chunk, big
	}
	if !ok(r.step(sh, a, fill)) {
		return
	}
	if big > 0 && len(sh.others) > 1 {
		r.agree(sh, b, sh.others[1])
	}
	if a.proxy != nil && rnd.Intn(3) > 0 {
		// Past the dirty limit the chunks were sent by the write itself.
		f := newArmed("refused-503", 1, inodeWriteAfterChunks(ino, big > 0))
		f.f.Refuse, f.f.Until = 503, time.Now().Add(10*time.Second)
		r.arm(a, f, fmt.Sprintf("write of inode %d after its chunks (%s)", ino, sh.path))
	}
	// Settled by a look from elsewhere than B, whose reads are checked
	// after it.
	r.step(sh, a, &Op{Kind: "close", FD: fdA, NotSeenFrom: b.idx + 1})
	for _, sl := range append([]*slot{b}, sh.others...) {
		r.step(sh, sl, &Op{Kind: "read", Path: sh.path})
	}
	if big > 0 {
		// Small again: the rest of the run reads it whole, often.
		r.step(sh, a, &Op{Kind: "truncate", Path: sh.path, Len: rnd.Int63n(64 << 10)})
	}
}

// agree: while a writer holds the file open with its chunks landed past
// the dirty limit (not its size: close-to-open does not say what others
// read of it), mount b's open, between two of mount c's that read the
// same bytes, must read those bytes too: they are what the cluster
// holds, and b's open began after c's first one returned. The model does
// not judge these reads (the file has unflushed writes).
func (r *Runner) agree(sh *shapeRun, b, c *slot) {
	c1 := r.step(sh, c, &Op{Kind: "read", Path: sh.path})
	rb := r.step(sh, b, &Op{Kind: "read", Path: sh.path})
	c2 := r.step(sh, c, &Op{Kind: "read", Path: sh.path})
	if !ok(c1) || !ok(rb) || !ok(c2) || c1.Resp.Sum != c2.Resp.Sum || c1.Resp.Size != c2.Resp.Size {
		return
	}
	if rb.Resp.Sum != c1.Resp.Sum || rb.Resp.Size != c1.Resp.Size {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.finding("data", "%s: read %d bytes (digest %s), while m%d's opens before and after it (#%d, #%d) read %d bytes (digest %s): "+
			"chunks another mount wrote and holds open (past its dirty limit) read as they were before on one mount only",
			rb, rb.Resp.Size, rb.Resp.Sum, c.idx, c1.N, c2.N, c1.Resp.Size, c1.Resp.Sum)
	}
}

// shapeDupLock: B (the owner) takes a record lock and a flock through a
// descriptor of the file, dups it, and closes the dup or the first (the
// open file description stays open): the process's record locks on the
// file are gone with that close (POSIX), so another mount's F_GETLK says
// the range is free; then B closes the other (the description's last
// close: its flock goes) and takes a flock through a new open of the
// file, which must be granted: the release of the first is a RELEASE the
// kernel sends as the close returns, before this lock's request (xfstests
// generic/478). Both at once if no fault acted on B's requests since the
// locks were asked for (else answerLock's window judges them); a lock
// still seen is a finding of its own class, lock-after-close.
func (r *Runner) shapeDupLock(sh *shapeRun) {
	b, c, rnd := sh.owner, sh.others[0], sh.rnd
	op1 := r.step(sh, b, &Op{Kind: "open", Path: sh.path})
	if !ok(op1) {
		return
	}
	r.mu.Lock()
	ownerX := r.ownerFlock(r.fds[op1.NewFD]) // the description's flock
	r.mu.Unlock()
	s := rnd.Intn(nSegs)
	segs := [2]int{s, s + rnd.Intn(nSegs-s)}
	acted := r.faultsActed(b)
	if !ok(r.step(sh, b, &Op{Kind: "fcntl", FD: op1.NewFD, Lock: "ex", Seg: segs})) {
		return
	}
	flocked := ok(r.step(sh, b, &Op{Kind: "flock", FD: op1.NewFD, Lock: "ex"}))
	dup := r.step(sh, b, &Op{Kind: "dup", FD: op1.NewFD})
	if !ok(dup) {
		return
	}
	closing, other := op1.NewFD, dup.NewFD
	if rnd.Intn(2) == 0 {
		closing, other = other, closing
	}
	if !ok(r.step(sh, b, &Op{Kind: "close", FD: closing})) {
		return
	}
	closed := time.Now()
	opC := r.step(sh, c, &Op{Kind: "open", Path: sh.path})
	if !ok(opC) {
		return
	}
	r.mu.Lock() // the lock table is the runner's: other shapes and operations answer into it meanwhile
	ownerB := r.ownerPosix(b)
	strict := r.onlyHeldBy(sh.ino, r.ownerPosix(c), true, segs, ownerB)
	r.mu.Unlock()
	for {
		g := r.step(sh, c, &Op{Kind: "getlk", FD: opC.NewFD, Lock: "ex", Seg: segs})
		if !ok(g) || g.Resp.Value == "un" || !strict {
			break
		}
		if r.stillHeld(b, acted, closed, "%s: F_GETLK reports the range held %s after m%d's worker closed fd%d, one of two descriptors of the open file it took its record lock through (fd%d and its dup; %s)",
			g, b.idx, closing, op1.NewFD) {
			return
		}
	}
	if !flocked || !ok(r.step(sh, b, &Op{Kind: "close", FD: other})) {
		return
	}
	closed = time.Now()
	op3 := r.step(sh, b, &Op{Kind: "open", Path: sh.path})
	if !ok(op3) {
		return
	}
	r.mu.Lock()
	fd3 := r.fds[op3.NewFD]
	strict = fd3 != nil && r.onlyHeldBy(sh.ino, r.ownerFlock(fd3), false, [2]int{-1, -1}, ownerX)
	r.mu.Unlock()
	for {
		f := r.step(sh, b, &Op{Kind: "flock", FD: op3.NewFD, Lock: "ex"})
		if f == nil || f.Errno != int(unix.EAGAIN) || !strict {
			return
		}
		if r.stillHeld(b, acted, closed, "%s: EAGAIN %s after m%d's worker closed fd%d, the last descriptor of the open file that held the flock (fd%d's; %s)",
			f, b.idx, other, op1.NewFD) {
			return
		}
	}
}

// onlyHeldBy: the only locks of the file's that conflict with owner
// taking an exclusive lock (of segs, or a flock), held or released a
// moment ago, are holder's, so that a lock still seen is holder's (r.mu
// held).
func (r *Runner) onlyHeldBy(ino int, owner string, posix bool, segs [2]int, holder string) bool {
	held, maybe := r.locks.conflicts(ino, owner, posix, segs, true, time.Now())
	for _, h := range append(held, maybe...) {
		if h.owner != holder {
			return false
		}
	}
	return true
}

// stillHeld, for a lock slot b released by a close at closed and still
// seen held since: past two seconds (or answerLock's window less a
// second, if a fault acted on b's requests since acted was counted: the
// release may be retried in the background) it reports a finding of
// class lock-after-close (format's last %s says which) and returns true;
// before that it waits a moment and returns false, to look again (r.mu
// not held).
func (r *Runner) stillHeld(b *slot, acted int, closed time.Time, format string, op *Op, args ...any) bool {
	wait, faults := 2*time.Second, "no fault acted on its requests since it asked for the lock"
	if r.faultsActed(b) != acted {
		wait, faults = r.releaseWindow()-time.Second, "faults acted on its requests"
	}
	if time.Since(closed) <= wait {
		if r.isStopped() {
			return true
		}
		time.Sleep(500 * time.Millisecond)
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.finding("lock-after-close", format, append(append([]any{op, time.Since(closed).Round(time.Millisecond)}, args...), faults)...)
	return true
}

// faultsActed counts the faults that picked a request of slot sl or acted
// on one (r.mu not held).
func (r *Runner) faultsActed(sl *slot) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, a := range sl.faults {
		if a.picked.Load() {
			n++
		}
	}
	return n
}
