package campaign

import (
	"errors"
	"fmt"
	"math/rand"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/test/campaign/wire"
)

// dataSkip: the file's bytes and size are not compared (a descriptor has
// unflushed writes to it, or an unsettled outcome left them unknown).
func (r *Runner) dataSkip(in *Inode) bool {
	return in.DataUnknown || in.Unsure || r.pending(in.ID)
}

// diffStat says how what a mount reported of in differs from the model
// ("" if it does not); sum and size are compared when withData.
func (r *Runner) diffStat(st *State, in *Inode, e *wire.Stat, withData bool, size int64, sum string) string {
	var d []string
	if got := e.Mode & unix.S_IFMT; got != in.Kind.ifmt() {
		return fmt.Sprintf("type %o, want a %s", got, in.Kind)
	}
	if in.Unsure {
		return ""
	}
	if got := e.Mode & 0o7777; got != in.Mode {
		d = append(d, fmt.Sprintf("mode %o, want %o", got, in.Mode))
	}
	if want := st.Nlink(in); e.Nlink != want {
		d = append(d, fmt.Sprintf("nlink %d, want %d", e.Nlink, want))
	}
	switch in.Kind {
	case File:
		if !r.dataSkip(in) {
			if want := int64(len(in.Data)); e.Size != want {
				d = append(d, fmt.Sprintf("size %d, want %d", e.Size, want))
			}
			if withData && (size != int64(len(in.Data)) || sum != wire.Sum(in.Data)) {
				d = append(d, fmt.Sprintf("bytes read: %d (digest %s), want %d (digest %s)", size, sum, len(in.Data), wire.Sum(in.Data)))
			}
		}
	case Symlink:
		if e.Target != in.Target {
			d = append(d, fmt.Sprintf("target %q, want %q", e.Target, in.Target))
		}
		if e.Size != int64(len(in.Target)) {
			d = append(d, fmt.Sprintf("size %d, want %d", e.Size, len(in.Target)))
		}
	}
	if in.Kind == File || in.Kind == Dir {
		if !sameXattrs(e.Xattrs, in.Xattr) {
			d = append(d, fmt.Sprintf("xattrs %v, want %v", e.Xattrs, in.Xattr))
		}
	}
	// A descriptor's unflushed writes set the time when they land.
	if in.MtimeKnown && in.Kind != Dir && !r.pending(in.ID) && e.Mtime != in.Mtime {
		d = append(d, fmt.Sprintf("mtime %d, want %d", e.Mtime, in.Mtime))
	}
	return strings.Join(d, "; ")
}

func sameXattrs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// check compares what a look (stat, read, readdir, fstat, pread) saw with
// the model (r.mu held).
func (r *Runner) check(sl *slot, op *Op) {
	resp := op.Resp
	var in *Inode
	if op.throughFD() {
		in = r.st.Inodes[op.Ino]
	} else {
		in = r.st.Get(op.Path)
	}
	class, diff := "attr", ""
	switch op.Kind {
	case "stat", "fstat":
		diff = r.diffStat(r.st, in, resp.Stat, false, 0, "")
	case "read":
		if !r.dataSkip(in) && (resp.Size != int64(len(in.Data)) || resp.Sum != wire.Sum(in.Data)) {
			class, diff = "data", fmt.Sprintf("read %d bytes (digest %s), want %d (digest %s)%s", resp.Size, resp.Sum, len(in.Data), wire.Sum(in.Data),
				r.olderVersion(in.ID, in.Data, resp.Size, resp.Sum))
		}
	case "pread":
		fd := r.fds[op.FD]
		switch {
		case in.DataUnknown || in.Unsure || r.pendingElsewhere(fd):
		case fd.stale && len(fd.Pending) == 0:
			if d := r.checkStaleRead(fd, resp.Size, resp.Sum); d != "" {
				class, diff = "data", d
			}
		case !fd.stale:
			want := in.Data
			for _, w := range fd.Pending {
				want = writeAt(want, w.Off, wire.Pattern(w.Seq, w.Off, w.Len))
			}
			if resp.Size != int64(len(want)) || resp.Sum != wire.Sum(want) {
				class, diff = "data", fmt.Sprintf("read %d bytes (digest %s), want %d (digest %s)%s", resp.Size, resp.Sum, len(want), wire.Sum(want),
					r.olderVersion(fd.Ino, want, resp.Size, resp.Sum))
			} else {
				fd.seen = len(r.dataHist[fd.Ino]) - 1
			}
		}
	case "readdir":
		var want []string
		for n := range in.Entries {
			want = append(want, n)
		}
		sort.Strings(want)
		if strings.Join(want, " ") != strings.Join(resp.Names, " ") {
			class, diff = "names", fmt.Sprintf("listed %q, want %q", resp.Names, want)
		}
	}
	if diff == "" {
		return
	}
	if class == "attr" && in != nil && in.Kind == Dir && onlyNlink.MatchString(diff) {
		class = "dir-nlink"
	}
	if r.throughUnlinked(op) {
		// What another mount's unlink deleted, writes through this
		// descriptor included (errnoClass).
		class = "unlinked-elsewhere"
	}
	r.finding(class, "%s: %s", op, diff)
	r.unlinkedElsewhere(sl, op, class)
	if class == "data" && op.Kind == "read" && len(r.res.Findings) > 0 {
		// Say which bytes differ, and whose they look like.
		idx, want, seqs := len(r.res.Findings)-1, in.Data, r.writeSeqs(in.ID)
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			e := r.explainData(sl, op.Path, want, seqs)
			r.mu.Lock()
			defer r.mu.Unlock()
			r.logf("  %s: %s", op, e)
			r.res.Findings[idx].Text += "\nread again: " + e
		}()
	}
}

// modelTree is what a tree request at p must see in st, in the worker's
// order.
type mEntry struct {
	path  string
	errno int
	in    *Inode
}

func modelTree(st *State, p string, out []mEntry) []mEntry {
	id, e := st.lookup(p)
	if e != 0 {
		return append(out, mEntry{path: p, errno: e})
	}
	in := st.Inodes[id]
	out = append(out, mEntry{path: p, in: in})
	if in.Kind == Dir {
		names := make([]string, 0, len(in.Entries))
		for n := range in.Entries {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			out = modelTree(st, path.Join(p, n), out)
		}
	}
	return out
}

// diffTree says how what a mount saw below the paths differs from st.
func (r *Runner) diffTree(st *State, obs [][]wire.Entry, paths []string) string {
	for i, p := range paths {
		want := modelTree(st, p, nil)
		got := obs[i]
		for j := 0; j < len(want) || j < len(got); j++ {
			switch {
			case j >= len(got):
				return fmt.Sprintf("%s: missing", want[j].path)
			case j >= len(want):
				return fmt.Sprintf("%s: not in the model", got[j].Path)
			case got[j].Path != want[j].path && strings.HasSuffix(got[j].Path, "/"):
				// The worker's mark of a directory it could not list.
				return fmt.Sprintf("could not list %q (%s) where the model has %q", strings.TrimSuffix(got[j].Path, "/"), errname(got[j].Errno), want[j].path)
			case got[j].Path != want[j].path:
				return fmt.Sprintf("saw %q where the model has %q", got[j].Path, want[j].path)
			case got[j].Errno != want[j].errno && !(want[j].errno == 0 && got[j].Stat != nil):
				return fmt.Sprintf("%s: %s, want %s", got[j].Path, errname(got[j].Errno), errname(want[j].errno))
			case want[j].errno != 0:
				continue
			}
			if d := r.diffStat(st, want[j].in, got[j].Stat, want[j].in.Kind == File, got[j].Size, got[j].Sum); d != "" {
				return got[j].Path + ": " + d
			}
		}
	}
	return ""
}

// outermost drops the paths below another path of the list, and
// duplicates.
func outermost(paths []string) []string {
	var out []string
	for _, p := range paths {
		covered := false
		for _, q := range paths {
			if q != p && isAncestor(q, p) {
				covered = true
			}
		}
		for _, q := range out {
			if q == p {
				covered = true
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// observe asks slot sl's worker what it sees below each path. A look
// that meets a fault of its own (EIO) is tried again.
func (r *Runner) observe(sl *slot, paths []string) ([][]wire.Entry, error) {
	var out [][]wire.Entry
	for _, p := range paths {
		for try := 1; ; try++ {
			resp, err := sl.w.do(&wire.Req{Op: "tree", Path: p}, opLimit)
			if err != nil {
				return nil, fmt.Errorf("tree %q on m%d: %w", p, sl.idx, err)
			}
			if stuck := stuckEntry(resp.Tree); stuck != "" && try >= 2 {
				out, _ := r.fs.Run("locks")
				return nil, &stuckError{what: fmt.Sprintf("a look at %q from m%d: %s twice", p, sl.idx, stuck), locks: out}
			}
			if bad := unknownEntry(resp.Tree); bad != "" && try < 5 {
				r.logf("  a look at %q from m%d met %s: looking again", p, sl.idx, bad)
				time.Sleep(time.Second)
				continue
			}
			out = append(out, resp.Tree)
			break
		}
	}
	return out, nil
}

// stuckError: a look waited out --lock-timeout (EAGAIN): a lock is held
// that nobody gives back.
type stuckError struct{ what, locks string }

func (e *stuckError) Error() string { return e.what + "; esfs locks:\n" + e.locks }

// stuckEntry names an entry of a look that failed with EAGAIN, if any.
func stuckEntry(tree []wire.Entry) string {
	for _, e := range tree {
		if e.Errno == int(unix.EAGAIN) {
			return fmt.Sprintf("EAGAIN at %q", e.Path)
		}
	}
	return ""
}

// unknownEntry names an entry of a look that failed with an error that
// says nothing of the tree (EIO), if any.
func unknownEntry(tree []wire.Entry) string {
	for _, e := range tree {
		if e.Errno != 0 && unknownErrno(e.Errno) {
			return fmt.Sprintf("%s at %q", errname(e.Errno), e.Path)
		}
	}
	return ""
}

// observer picks a live slot to look from, another than not (and than
// also) if it can (r.mu held); doneObserving gives it back.
func (r *Runner) observer(not *slot, also ...*slot) *slot {
	sl := r.pickObserver(not, also...)
	if sl != nil {
		sl.observing++
	}
	return sl
}

// doneObserving gives back a slot observer picked (r.mu not held).
func (r *Runner) doneObserving(sl *slot) {
	r.mu.Lock()
	r.doneObservingLocked(sl)
	r.mu.Unlock()
}

func (r *Runner) doneObservingLocked(sl *slot) {
	if sl == nil {
		return
	}
	sl.observing--
	r.cond.Broadcast()
}

func (r *Runner) pickObserver(not *slot, also ...*slot) *slot {
	var live []*slot
	for _, sl := range r.slots {
		if sl != not && !slices.Contains(also, sl) && !sl.dead && !sl.paused {
			live = append(live, sl)
		}
	}
	if len(live) == 0 {
		if not.dead || len(also) > 0 {
			return nil
		}
		return not
	}
	return live[rand.Intn(len(live))]
}

// settleLater settles op's unknown outcome in the background: once the
// faults that could still land have, a look from another mount decides
// which of the candidates (lists of operations that may have happened)
// did. Its footprint stays reserved until then (r.mu held).
func (r *Runner) settleLater(sl *slot, op *Op, fp *Footprint, cands [][]*Op) {
	sl.resolving++
	r.logf("  #%d: outcome unknown, settling it", op.N)
	go func() {
		r.settle(sl)
		if r.fs != nil {
			// What a failed fsync or close left in the writer's memory is
			// tried again in the background: the outcome is known once an
			// fsync of the writer lands everything it holds.
			for try := 1; try <= 5; try++ {
				resp, err := sl.w.do(&wire.Req{Op: "fsync", Path: rootPath}, opLimit)
				if err == nil && resp.Errno == 0 {
					break
				}
				r.logf("  #%d: m%d's fsync before settling it failed (%v %v)", op.N, sl.idx, err, resp)
				time.Sleep(time.Second)
			}
		}
		r.mu.Lock()
		obsSlot := r.observer(sl)
		if op.NotSeenFrom > 0 && obsSlot != nil && obsSlot.idx == op.NotSeenFrom-1 {
			// A third mount, or else the call's own (a death may be
			// waiting for the third, paused).
			other := r.observer(obsSlot, sl)
			if other == nil && !sl.dead && !sl.paused {
				sl.observing++
				other = sl
			}
			if other != nil {
				r.doneObservingLocked(obsSlot)
				obsSlot = other
			}
		}
		r.mu.Unlock()
		paths := outermost(fp.Paths)
		var obs [][]wire.Entry
		var err error
		if obsSlot != nil && len(paths) > 0 {
			obs, err = r.observe(obsSlot, paths)
		}
		r.doneObserving(obsSlot)
		r.mu.Lock()
		defer r.mu.Unlock()
		defer r.cond.Broadcast()
		defer delete(r.inflight, op.N)
		sl.resolving--
		var stuck *stuckError
		if errors.As(err, &stuck) {
			r.finding("stuck-lock", "settling %s (answered %s): %v", op, errname(op.Errno), err)
			return
		}
		if err != nil {
			r.finding("worker", "settling %s: %v", op, err)
			return
		}
		if obsSlot != nil {
			for _, ino := range fp.Inodes {
				r.releasePosix(obsSlot, ino)
			}
		}
		chosen := -1
		var diffs []string
		if obs != nil && (op.Kind == "truncate" || op.Kind == "ftruncate") && r.partialTruncate(op, obs, paths) {
			return
		}
		if obs != nil {
			for i, c := range cands {
				st := r.st.Copy()
				for _, o := range c {
					st.Apply(o)
				}
				d := r.diffTree(st, obs, paths)
				if d == "" {
					chosen = i
					break
				}
				diffs = append(diffs, fmt.Sprintf("candidate %d (%d operations): %s", i, len(c), d))
			}
		}
		if chosen < 0 && obs != nil && len(cands) > 1 && (op.Kind == "close" || op.Kind == "fdfsync" || op.Kind == "pwrite" ||
			((op.Kind == "write" || op.Kind == "append") && op.Failed != "open")) {
			if mixed := r.mixedFlush(obsSlot, op, cands, obs, paths); mixed != nil {
				r.logf("  #%d settled: in part (a flush that failed may land chunk by chunk), seen from %v", op.N, slotName(obsSlot))
				r.apply(sl, mixed, false)
				return
			}
		}
		if chosen < 0 {
			if obs != nil {
				r.finding("unknown-outcome", "%s: answered %s; seen from m%d, neither before nor after it: %s",
					op, errname(op.Errno), obsSlot.idx, strings.Join(diffs, "; "))
				if in := r.st.Inodes[op.Ino]; in != nil && in.Kind == File && len(r.res.Findings) > 0 && op.Path != "" {
					idx, seqs := len(r.res.Findings)-1, r.writeSeqs(op.Ino)
					st := r.st.Copy()
					for _, o := range cands[len(cands)-1] {
						st.Apply(o)
					}
					want := st.Inodes[op.Ino].Data
					r.mu.Unlock()
					e := r.explainData(obsSlot, op.Path, want, append(seqs, op.Seq))
					r.mu.Lock()
					r.res.Findings[idx].Text += "\nagainst the last candidate, read again: " + e
				}
				return
			}
			// Nothing to look at (a file no name reaches): assume it
			// happened, and compare it no longer.
			chosen = len(cands) - 1
			for _, ino := range fp.Inodes {
				if in := r.st.Inodes[ino]; in != nil {
					in.Unsure, in.DataUnknown = true, true
				}
			}
		}
		r.logf("  #%d settled: %d of its %d candidate outcomes (seen from %v)", op.N, chosen, len(cands), slotName(obsSlot))
		for _, o := range cands[chosen] {
			r.apply(sl, o, false)
		}
	}()
}

// mixedFlush recognizes what a flush that failed (EIO at a descriptor's
// close, fsync or write, or at the close of a write by path) may leave
// besides all or nothing: it writes chunk by chunk (1 MiB), and a chunk
// whose write failed is dropped while others, and the size, land; Linux's write-back leaves pages the same
// way. The bytes a look from obsSlot reads must each be the file's before
// the flush, or after it, or zero where a pending write was to go (the
// size landed, the chunk not); the size one or the other; and everything
// else as the candidates say. It returns the model operation that sets
// those bytes, nil if they are not such a mix (r.mu held; unlocked while
// reading).
func (r *Runner) mixedFlush(obsSlot *slot, op *Op, cands [][]*Op, obs [][]wire.Entry, paths []string) *Op {
	last := cands[len(cands)-1]
	var written []pwrite
	if op.Kind == "write" || op.Kind == "append" {
		// A write by path is a flush at its close: the same shape, its
		// one write the flush's.
		off := op.Off
		if in := r.st.Inodes[op.Ino]; in != nil && op.Kind == "append" {
			off = int64(len(in.Data))
		}
		last, written = []*Op{op}, []pwrite{{off, op.Len, op.Seq}}
	}
	if len(last) == 0 {
		return nil
	}
	ino := last[0].Ino // the flush's: the descriptor is gone after a close
	in := r.st.Inodes[ino]
	if in == nil || in.Kind != File || in.DataUnknown || in.Unsure {
		return nil
	}
	after := r.st.Copy()
	for _, o := range last {
		after.Apply(o)
		written = append(written, o.Writes...)
	}
	// A name to read the file by, as the model has it.
	name := ""
	for _, p := range paths {
		for _, e := range modelTree(after, p, nil) {
			if name == "" && e.in != nil && e.in.ID == ino {
				name = e.path
			}
		}
	}
	if name == "" {
		return nil
	}
	before, want := in.Data, after.Inodes[ino].Data
	r.mu.Unlock()
	resp, err := obsSlot.w.do(&wire.Req{Op: "read", Path: name, Full: true}, opLimit)
	r.mu.Lock()
	if err != nil || resp.Errno != 0 {
		return nil
	}
	got := resp.Data
	if !isMix(before, want, got, written) {
		return nil
	}
	mixed := &Op{N: op.N, Mount: op.Mount, Kind: "bytes", Ino: ino, Data: got}
	st := r.st.Copy()
	st.Apply(mixed)
	if r.diffTree(st, obs, paths) != "" {
		return nil
	}
	return mixed
}

// isMix: got is the size of before or of after, and each of its bytes is
// before's or after's at its offset (zero past their ends), or zero within
// one of the writes that made after.
func isMix(before, after, got []byte, written []pwrite) bool {
	if len(got) != len(before) && len(got) != len(after) {
		return false
	}
	at := func(b []byte, i int) byte {
		if i < len(b) {
			return b[i]
		}
		return 0
	}
	covered := func(i int) bool {
		for _, w := range written {
			if int64(i) >= w.Off && int64(i) < w.Off+w.Len {
				return true
			}
		}
		return false
	}
	for i, c := range got {
		if c != at(before, i) && c != at(after, i) && !(c == 0 && covered(i)) {
			return false
		}
	}
	return true
}

// partialTruncate recognizes a truncate that failed halfway: the bytes
// past its size cut (zeros) and the size not written, a known esfs bug
// (campaign_findings_test.go). It reports it as a finding of its own
// class and, when that class is excluded, makes that state the model's so
// that the run goes on (r.mu held).
func (r *Runner) partialTruncate(op *Op, obs [][]wire.Entry, paths []string) bool {
	in := r.st.Inodes[op.Ino]
	if in == nil || in.Kind != File || op.Len >= int64(len(in.Data)) {
		return false
	}
	st := r.st.Copy()
	st.Apply(&Op{Kind: "zero", Ino: op.Ino, Off: op.Len, Len: int64(len(in.Data)) - op.Len})
	if r.diffTree(st, obs, paths) != "" {
		return false
	}
	r.finding("truncate-partial", "%s: answered %s; another mount sees the bytes past %d cut (zeros) and the size still %d",
		op, errname(op.Errno), op.Len, len(in.Data))
	if r.cfg.Exclude["truncate-partial"] {
		r.st = st
		r.hist = append(r.hist, &histEntry{op: &Op{N: op.N, Mount: op.Mount, Kind: "zero", Ino: op.Ino,
			Off: op.Len, Len: int64(len(in.Data)) - op.Len}, mount: op.Mount})
		r.noteData(op.Ino, op.Mount)
	}
	return true
}

func slotName(sl *slot) string {
	if sl == nil {
		return "nowhere"
	}
	return fmt.Sprintf("m%d", sl.idx)
}

// settle waits until every fault that picked one of sl's requests has
// acted (a held request landed), and a moment more for what the mount
// does about it.
func (r *Runner) settle(sl *slot) {
	r.mu.Lock()
	faults := append([]*armed{}, sl.faults...)
	r.mu.Unlock()
	for _, a := range faults {
		if a.picked.Load() {
			select {
			case <-a.f.Fired():
			case <-time.After(a.f.Delay + time.Minute):
			}
		}
	}
	time.Sleep(time.Second)
}

// explainData reads path in full through slot sl and says where its
// bytes differ from want and whose they look like (r.mu not held).
func (r *Runner) explainData(sl *slot, p string, want []byte, seqs []int64) string {
	resp, err := sl.w.do(&wire.Req{Op: "read", Path: p, Full: true}, opLimit)
	if err != nil || resp.Errno != 0 {
		return fmt.Sprintf("(reading it again: %v %s)", err, errname(resp.Errno))
	}
	got := resp.Data
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	if i == len(got) && i == len(want) {
		return "(read again, the bytes are right now)"
	}
	j := i
	for j < len(got) && j < len(want) && got[j] != want[j] {
		j++
	}
	whose := func(b []byte, off int) string {
		if off >= len(b) {
			return "nothing"
		}
		zero := true
		for _, c := range b[off:min(len(b), off+64)] {
			if c != 0 {
				zero = false
			}
		}
		if zero {
			return "zeros"
		}
		for _, s := range seqs {
			if wire.Pattern(s, int64(off), 1)[0] == b[off] && (off+1 >= len(b) || wire.Pattern(s, int64(off+1), 1)[0] == b[off+1]) {
				return fmt.Sprintf("the bytes of #%d", s)
			}
		}
		return "other bytes"
	}
	return fmt.Sprintf("%d bytes, %d wanted; the first difference is at %d, to %d: %s where the model has %s",
		len(got), len(want), i, j, whose(got, i), whose(want, i))
}

// writeSeqs lists the sequence numbers of the writes the history made to
// ino (r.mu held).
func (r *Runner) writeSeqs(ino int) []int64 {
	var out []int64
	for _, h := range r.hist {
		switch {
		case h.op.Ino != ino && h.op.NewID != ino:
		case h.op.Kind == "flush":
			for _, w := range h.op.Writes {
				out = append(out, w.Seq)
			}
		case h.op.Seq != 0:
			out = append(out, h.op.Seq)
		}
	}
	for _, fd := range r.fds {
		if fd.Ino == ino {
			for _, w := range fd.Pending {
				out = append(out, w.Seq)
			}
		}
	}
	return out
}
