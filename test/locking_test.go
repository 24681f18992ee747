package test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// Cross-mount locking tests (issue 4): a storm of renames, creates and
// deletes from three mounts checked against a model of the acknowledged
// operations, and two-mount races of the renames that break naive
// protocols, each repeated, for every locking strategy. Every test ends
// with checkInvariants (invariants_test.go).

var lkStrategies = []string{"tree", "document", "global"}

// lkMount mounts f with a strategy and a short lease (so that the
// invariant check does not wait long for anything a mount left behind).
func lkMount(t *testing.T, f *mounttest.FS, strategy string, cached bool, extra ...string) *mounttest.Mount {
	t.Helper()
	args := []string{"--locking", strategy, "--lease", "2s"}
	if !cached {
		args = append(args, lkNoCache...)
	}
	return f.Mount(t, append(args, extra...)...)
}

// lkEnvInt reads a positive integer from the environment, or def.
func lkEnvInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// lkRounds is how many times each race is repeated (ESFS_RACE_ROUNDS).
func lkRounds(t *testing.T, def int) int { return lkEnvInt(t, "ESFS_RACE_ROUNDS", def) }

// lkErrno names the errno of err: "ok", "ENOENT", ...
func lkErrno(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return e.Error()
	}
	return err.Error()
}

// lkCleanFailure: a failure a racing operation may legitimately meet and
// that must have had no effect: its source vanished (ENOENT, or ESTALE for
// a directory inode renamed away by another mount) or the locks were not
// granted in time (EAGAIN); plus the errnos the caller names.
func lkCleanFailure(err error, extra ...string) bool {
	switch n := lkErrno(err); n {
	case "ENOENT", "ESTALE", "EAGAIN":
		return true
	default:
		return lkContains(extra, n)
	}
}

// lkTally counts outcomes by kind of operation and errno.
type lkTally struct {
	mu   sync.Mutex
	n    map[string]map[string]int
	slow map[string]time.Duration // the longest operation of each kind
}

// took records how long one operation of kind took.
func (c *lkTally) took(kind string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slow == nil {
		c.slow = map[string]time.Duration{}
	}
	c.slow[kind] = max(c.slow[kind], d)
}

func (c *lkTally) add(kind string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]map[string]int{}
	}
	if c.n[kind] == nil {
		c.n[kind] = map[string]int{}
	}
	c.n[kind][lkErrno(err)]++
}

func (c *lkTally) total() (all, ok int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.n {
		for e, k := range m {
			all += k
			if e == "ok" {
				ok += k
			}
		}
	}
	return all, ok
}

func (c *lkTally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for _, kind := range lkSorted(c.n) {
		var parts []string
		for _, e := range lkSorted(c.n[kind]) {
			parts = append(parts, fmt.Sprintf("%s=%d", e, c.n[kind][e]))
		}
		if d, ok := c.slow[kind]; ok {
			parts = append(parts, fmt.Sprintf("(slowest %s)", d.Round(time.Millisecond)))
		}
		lines = append(lines, fmt.Sprintf("  %-18s %s", kind, strings.Join(parts, " ")))
	}
	return strings.Join(lines, "\n")
}

// lkRace runs a and b at the same moment, each on its own goroutine
// (both wait on one channel, closed once both are ready).
func lkRace(a, b func() error) (errA, errB error) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(2)
	done.Add(2)
	go func() { defer done.Done(); ready.Done(); <-start; errA = a() }()
	go func() { defer done.Done(); ready.Done(); <-start; errB = b() }()
	ready.Wait()
	close(start)
	done.Wait()
	return errA, errB
}

// lkMake builds a tree below root: keys ending in "/" are directories,
// the others files with their content. Parents sort before children.
func lkMake(t *testing.T, root string, spec map[string]string) {
	t.Helper()
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range lkSorted(spec) {
		if strings.HasSuffix(p, "/") {
			if err := os.Mkdir(root+strings.TrimSuffix(p, "/"), 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(root+p, []byte(spec[p]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lkSnapFresh is lkSnap after a refresh of the path index. Listings are
// searches, near-realtime by design (README, "Consistency model"), and
// worse: a listing on another mount shortly after a directory rename may
// show the directory in neither place (TestRemoteRenameListedAtomically).
// The races check the locking, so they read a refreshed index.
func lkSnapFresh(t *testing.T, f *mounttest.FS, root string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	return lkSnap(t, root)
}

// lkSnap reads the tree below root through a mount, in lkMake's form.
func lkSnap(t *testing.T, root string) map[string]string {
	t.Helper()
	files, dirs, err := lkWalk(root)
	if err != nil {
		t.Errorf("reading %s: %v", root, err)
	}
	out := map[string]string{}
	for p, c := range files {
		out[p] = c
	}
	for p := range dirs {
		out[p+"/"] = ""
	}
	return out
}

func lkSame(a, b map[string]string) bool {
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

func lkFmt(m map[string]string) string {
	var s []string
	for _, k := range lkSorted(m) {
		if strings.HasSuffix(k, "/") {
			s = append(s, k)
		} else {
			s = append(s, fmt.Sprintf("%s=%q", k, m[k]))
		}
	}
	return "{" + strings.Join(s, " ") + "}"
}

// lkAdd records that round directory root must end up holding tree.
func (w *lkWant) lkAdd(root string, tree map[string]string) {
	if w.unknown {
		return
	}
	if w.files == nil {
		w.files, w.dirs = map[string]string{}, map[string]bool{}
	}
	w.dirs[root] = true
	for p, c := range tree {
		if strings.HasSuffix(p, "/") {
			w.dirs[root+strings.TrimSuffix(p, "/")] = true
		} else {
			w.files[root+p] = c
		}
	}
}

// lkRename is rename(2) itself. os.Rename refuses to replace a directory
// (EEXIST) before asking the kernel, which POSIX allows when it is empty.
func lkRename(from, to string) error {
	if err := unix.Rename(from, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// lkCreate creates path exclusively with content. opened says whether
// the file came into existence (then a later error leaves its content
// unknown).
func lkCreate(path, content string) (opened bool, err error) {
	fd, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return false, err
	}
	_, werr := fd.WriteString(content)
	cerr := fd.Close()
	if werr != nil {
		return true, werr
	}
	return true, cerr
}

// lkCreateAt is lkCreate relative to an open directory (openat).
func lkCreateAt(dirfd int, name, content string) (opened bool, err error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return false, err
	}
	_, werr := unix.Write(fd, []byte(content))
	cerr := unix.Close(fd)
	if werr != nil {
		return true, werr
	}
	return true, cerr
}

// ---------------------------------------------------------------------
// The storm.

func TestStorm_tree(t *testing.T)     { lkStorm(t, "tree") }
func TestStorm_document(t *testing.T) { lkStorm(t, "document") }
func TestStorm_global(t *testing.T)   { lkStorm(t, "global") }

// Why the model of the storm is exact, although operations from three
// mounts race:
//
//   - Names are never reused. Directories are the 6 "slots", each renamed
//     only by the directory worker that owns it (slots 0-2 by the one on
//     mount 0, 3-5 by the one on mount 1), and every rename gives it a fresh
//     name "D<slot>.<n>". Files belong to one file worker each, which names
//     them "f<worker>.<n>" and gives a fresh name on every rename that
//     changes the name. So a path, whenever it resolves, names one slot or
//     one file, forever: an operation that succeeds took effect on exactly
//     the objects its paths named when it was built from the model.
//   - Each object has a single writer of its model: a slot's (parent,
//     name) changes only by its owner's acknowledged renames, a file's
//     (slot, name) only by its owner's. The owner updates the model after
//     the operation returns; until then other workers build paths from the
//     old names, which either still resolve (the operation is ordered
//     before the rename, and its effect follows the object: a file created
//     in slot 3 stays in slot 3 however slot 3 moves) or fail with ENOENT
//     or ESTALE (ordered after). Either way "file f is in slot s" and "slot
//     s is in slot p" stay true, so the final path of everything is the
//     model's parent chain, whatever interleaving happened.
//   - A failed operation (ENOENT, ESTALE, EAGAIN, and EINVAL for a
//     directory moved into its own subtree) is taken to have had no effect;
//     the final comparison proves it. An errno outside these is a bug; its
//     operation's outcome is unknown, so the file is frozen and may end up
//     at either place (lkWant.maybe); for a directory, the worker looks
//     which of its two possible paths exists (its names are unique), and
//     only if that stays inconclusive is the comparison given up for the
//     structural invariants alone.
//   - Two acknowledged directory renames that no serial order allows (s0
//     into s3 and s3 into s0: the #4800 pair) make the model's parent
//     chain a cycle, which is reported as the bug it is.
//   - Mount 0 keeps its caches (kernel and daemon), mounts 1 and 2 have
//     none: a stale cache may only make an operation fail, since a stale
//     path never names another object.
const lkSlots = 6

type lkDirs struct {
	mu     sync.Mutex // protects the following
	parent [lkSlots]int
	name   [lkSlots]string
}

// pathLocked is slot s's path, or ok=false when the model has a cycle.
func (d *lkDirs) pathLocked(s int) (string, bool) {
	p := ""
	for i := 0; s >= 0; i++ {
		if i > lkSlots {
			return "", false
		}
		p = "/" + d.name[s] + p
		s = d.parent[s]
	}
	return p, true
}

func (d *lkDirs) path(s int) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pathLocked(s)
}

// withinLocked: slot x is s or below s.
func (d *lkDirs) withinLocked(x, s int) bool {
	for i := 0; x >= 0 && i <= lkSlots; i++ {
		if x == s {
			return true
		}
		x = d.parent[x]
	}
	return false
}

func (d *lkDirs) depthLocked(s int) int {
	n := 0
	for i := 0; s >= 0 && i <= lkSlots; i++ {
		n++
		s = d.parent[s]
	}
	return n
}

func (d *lkDirs) heightLocked(s int) int {
	h := 1
	for x := 0; x < lkSlots; x++ {
		if x != s && d.withinLocked(x, s) {
			h = max(h, d.depthLocked(x)-d.depthLocked(s)+1)
		}
	}
	return h
}

type lkFile struct {
	slot    int
	name    string
	content string
}

// lkUnknown is a file whose last operation failed with an unexpected
// errno: it may be at any of locs (slot -1: absent).
type lkUnknown struct {
	content string
	locs    []lkFile
}

type lkStormRun struct {
	t        *testing.T
	probe    *mounttest.Mount // uncached, to look at outcomes
	dirs     lkDirs
	tally    lkTally
	deadline time.Time
	cycle    sync.Once
	// tolerate, if set, says whether an unexpected errno is excused now.
	tolerate func(error) bool

	mu          sync.Mutex // protects the following
	files       []lkFile
	unknown     []lkUnknown
	dirsUnknown bool
}

// unexpected reports an errno outside the clean failures: a bug, unless
// the run tolerates it now (while a cluster node is being killed, EIO is an
// honest "outcome unknown"; the model treats it as such either way). It
// returns whether err was tolerated.
func (s *lkStormRun) unexpected(err error, format string, args ...any) bool {
	if s.tolerate != nil && s.tolerate(err) {
		s.tally.add("tolerated-"+lkErrno(err), nil)
		s.t.Logf("tolerated: "+format, args...)
		return true
	}
	s.t.Errorf(format, args...)
	return false
}

func (s *lkStormRun) reportCycle() {
	s.cycle.Do(func() {
		s.dirs.mu.Lock()
		defer s.dirs.mu.Unlock()
		s.t.Errorf("storm: the acknowledged directory renames form a cycle (two renames that no serial order allows both succeeded): parents %v names %v", s.dirs.parent, s.dirs.name)
	})
}

func lkStorm(t *testing.T, strategy string) {
	lkStormOn(t, mounttest.NewFS(t), lkStormCfg{strategy: strategy, secs: lkEnvInt(t, "ESFS_STORM_SECONDS", 120)})
}

// lkStormCfg varies a storm: extra mount flags, and something done to the
// world while it runs (during gets the run, to set tolerate, and the
// storm's start).
type lkStormCfg struct {
	strategy string
	secs     int
	extra    []string
	during   func(s *lkStormRun, start time.Time)
	tolerate func(error) bool // see lkStormRun.tolerate
}

func lkStormOn(t *testing.T, f *mounttest.FS, cfg lkStormCfg) {
	strategy, secs := cfg.strategy, cfg.secs
	mounts := []*mounttest.Mount{
		lkMount(t, f, strategy, true, cfg.extra...),
		lkMount(t, f, strategy, false, cfg.extra...),
		lkMount(t, f, strategy, false, cfg.extra...),
	}
	s := &lkStormRun{t: t, probe: mounts[2], tolerate: cfg.tolerate}
	for i := 0; i < lkSlots; i++ {
		s.dirs.parent[i], s.dirs.name[i] = -1, fmt.Sprintf("D%d.0", i)
		if err := os.Mkdir(mounts[0].Path(s.dirs.name[i]), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("storm: strategy %s, %ds, seed %d (3 mounts, 2 directory workers, 4 file workers)", strategy, secs, seed)
	start := time.Now()
	s.deadline = start.Add(time.Duration(secs) * time.Second)

	var wg sync.WaitGroup
	run := func(fn func()) { wg.Add(1); go func() { defer wg.Done(); fn() }() }
	run(func() { s.dirWorker(0, mounts[0], []int{0, 1, 2}, rand.New(rand.NewPCG(seed, 100))) })
	run(func() { s.dirWorker(1, mounts[1], []int{3, 4, 5}, rand.New(rand.NewPCG(seed, 101))) })
	for k, m := range []*mounttest.Mount{mounts[0], mounts[1], mounts[2], mounts[2]} {
		run(func() { s.fileWorker(k, m, rand.New(rand.NewPCG(seed, uint64(k)))) })
	}
	if cfg.during != nil {
		run(func() { cfg.during(s, start) })
	}
	wg.Wait()
	all, ok := s.tally.total()
	t.Logf("storm: %d operations in %s, %d acknowledged; outcomes:\n%s", all, time.Since(start).Round(time.Millisecond), ok, s.tally.String())
	for _, m := range mounts {
		m.Unmount(t)
	}

	want := lkWant{files: map[string]string{}, dirs: map[string]bool{}, maybe: map[string][]string{}}
	for i := 0; i < lkSlots; i++ {
		p, ok := s.dirs.path(i)
		if !ok {
			s.reportCycle()
			s.dirsUnknown = true
			break
		}
		want.dirs[p] = true
	}
	where := func(f lkFile) string {
		if f.slot < 0 {
			return ""
		}
		p, _ := s.dirs.path(f.slot)
		return p + "/" + f.name
	}
	for _, f := range s.files {
		want.files[where(f)] = f.content
	}
	for _, u := range s.unknown {
		for _, l := range u.locs {
			want.maybe[u.content] = append(want.maybe[u.content], where(l))
		}
	}
	if s.dirsUnknown {
		t.Errorf("storm: a directory operation had an unknown outcome (above): only the structural invariants are checked")
		want.giveUp()
	}
	t.Logf("storm: the model holds %d directories, %d files, %d files of unknown outcome", len(want.dirs), len(want.files), len(want.maybe))
	checkInvariantsWant(t, f, want)
}

func (s *lkStormRun) dirWorker(j int, m *mounttest.Mount, own []int, rng *rand.Rand) {
	gen := 1
	for time.Now().Before(s.deadline) && len(own) > 0 {
		// Paced, so that the file workers get their share even with the
		// global lock, which is not fair among exclusive requests.
		time.Sleep(time.Duration(20+rng.IntN(180)) * time.Millisecond)
		slot := own[rng.IntN(len(own))]
		kind := "dir-move"
		s.dirs.mu.Lock()
		parent := -1
		if rng.IntN(10) >= 3 {
			parent = rng.IntN(lkSlots)
		}
		if parent >= 0 && s.dirs.withinLocked(parent, slot) {
			if rng.IntN(5) == 0 {
				kind = "dir-move-into-self" // must fail with EINVAL
			} else {
				parent = -1
			}
		}
		if kind == "dir-move" && parent >= 0 && s.dirs.depthLocked(parent)+s.dirs.heightLocked(slot) > 4 {
			parent = -1 // keep the tree shallow
		}
		src, ok1 := s.dirs.pathLocked(slot)
		dstDir, ok2 := "", true
		if parent >= 0 {
			dstDir, ok2 = s.dirs.pathLocked(parent)
		}
		s.dirs.mu.Unlock()
		if !ok1 || !ok2 {
			s.reportCycle()
			return
		}
		name := fmt.Sprintf("D%d.%d", slot, gen)
		gen++
		t0 := time.Now()
		err := lkRename(m.Dir+src, m.Dir+dstDir+"/"+name)
		s.tally.add(kind, err)
		s.tally.took(kind, time.Since(t0))
		switch {
		case err == nil && kind == "dir-move-into-self":
			s.t.Errorf("storm: moving %s into its own subtree %s succeeded", src, dstDir+"/"+name)
			fallthrough
		case err == nil:
			s.dirs.mu.Lock()
			s.dirs.parent[slot], s.dirs.name[slot] = parent, name
			s.dirs.mu.Unlock()
		case lkCleanFailure(err, "EINVAL"):
			if kind == "dir-move" && lkErrno(err) == "EINVAL" {
				// The model was stale: the target moved below us meanwhile.
				s.tally.add("dir-move-EINVAL-stale-model", nil)
			}
		default:
			tolerated := s.unexpected(err, "storm: dir worker %d: mv %s %s: unexpected %v", j, src, dstDir+"/"+name, err)
			if s.resolveDir(slot, parent, name, tolerated) {
				continue
			}
			s.mu.Lock()
			s.dirsUnknown = true
			s.mu.Unlock()
			for i, x := range own {
				if x == slot {
					own = append(own[:i:i], own[i+1:]...)
					break
				}
			}
		}
	}
}

// resolveDir finds out, after a directory rename with an unexpected
// error, whether it happened: names are unique, so exactly one of the old
// and the new path exists, as seen through the uncached probe mount (other
// slots may move meanwhile, which only makes a probe inconclusive).
func (s *lkStormRun) resolveDir(slot, parent int, name string, tolerated bool) bool {
	for try := 0; try < 50; try++ {
		s.dirs.mu.Lock()
		oldPath, ok1 := s.dirs.pathLocked(slot)
		newPath, ok2 := "", true
		if parent >= 0 {
			newPath, ok2 = s.dirs.pathLocked(parent)
		}
		newPath += "/" + name
		s.dirs.mu.Unlock()
		if !ok1 || !ok2 {
			return false
		}
		_, errOld := os.Lstat(s.probe.Dir + oldPath)
		_, errNew := os.Lstat(s.probe.Dir + newPath)
		switch {
		case errOld == nil && errNew != nil:
			s.t.Logf("storm: the failed rename of %s to %s had no effect", oldPath, newPath)
			return true
		case errNew == nil && errOld != nil:
			if tolerated {
				s.t.Logf("storm: the rename of %s to %s whose outcome was unknown happened", oldPath, newPath)
			} else {
				s.t.Errorf("storm: the rename of %s to %s that failed happened anyway", oldPath, newPath)
			}
			s.dirs.mu.Lock()
			s.dirs.parent[slot], s.dirs.name[slot] = parent, name
			s.dirs.mu.Unlock()
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

func (s *lkStormRun) fileWorker(k int, m *mounttest.Mount, rng *rand.Rand) {
	var live []lkFile
	serial := 0
	fresh := func() string { serial++; return fmt.Sprintf("f%d.%d", k, serial) }
	path := func(f lkFile) (string, bool) {
		d, ok := s.dirs.path(f.slot)
		if !ok {
			s.reportCycle()
		}
		return m.Dir + d + "/" + f.name, ok
	}
	var unknown []lkUnknown
	freeze := func(i int, locs ...lkFile) {
		unknown = append(unknown, lkUnknown{content: live[i].content, locs: locs})
		live = append(live[:i], live[i+1:]...)
	}
	for time.Now().Before(s.deadline) {
		op := rng.IntN(100)
		t0 := time.Now()
		note := func(kind string, err error) {
			s.tally.add(kind, err)
			s.tally.took(kind, time.Since(t0))
		}
		switch {
		case len(live) < 15 || (op < 20 && len(live) < 35):
			f := lkFile{slot: rng.IntN(lkSlots), name: fresh()}
			f.content = fmt.Sprintf("worker %d file %s %016x\n", k, f.name, rng.Uint64())
			p, ok := path(f)
			if !ok {
				return
			}
			opened, err := lkCreate(p, f.content)
			note("file-create", err)
			switch {
			case err == nil:
				live = append(live, f)
			case !opened && lkCleanFailure(err):
			default:
				s.unexpected(err, "storm: file worker %d: create %s: unexpected %v (opened: %v)", k, p, err, opened)
				live = append(live, f)
				freeze(len(live)-1, f, lkFile{slot: -1})
			}
		case op < 35:
			i := rng.IntN(len(live))
			p, ok := path(live[i])
			if !ok {
				return
			}
			err := os.Remove(p)
			note("file-delete", err)
			switch {
			case err == nil:
				live = append(live[:i], live[i+1:]...)
			case lkCleanFailure(err):
			default:
				s.unexpected(err, "storm: file worker %d: rm %s: unexpected %v", k, p, err)
				freeze(i, live[i], lkFile{slot: -1})
			}
		case op < 80:
			// A move to another directory, keeping the name or not, or a
			// rename in place.
			i := rng.IntN(len(live))
			to := lkFile{slot: rng.IntN(lkSlots), name: live[i].name, content: live[i].content}
			kind := "file-move"
			if op >= 70 || to.slot == live[i].slot {
				to.name, kind = fresh(), "file-rename"
			}
			src, ok1 := path(live[i])
			dst, ok2 := path(to)
			if !ok1 || !ok2 {
				return
			}
			err := lkRename(src, dst)
			note(kind, err)
			switch {
			case err == nil:
				live[i] = to
			case lkCleanFailure(err):
			default:
				s.unexpected(err, "storm: file worker %d: mv %s %s: unexpected %v", k, src, dst, err)
				freeze(i, live[i], to)
			}
		case op < 90:
			// Replace one of our files by another: POSIX rename over an
			// existing file.
			i, j := rng.IntN(len(live)), rng.IntN(len(live))
			if i == j {
				continue
			}
			src, ok1 := path(live[i])
			dst, ok2 := path(live[j])
			if !ok1 || !ok2 {
				return
			}
			err := lkRename(src, dst)
			note("file-replace", err)
			switch {
			case err == nil:
				live[i].slot, live[i].name = live[j].slot, live[j].name
				live = append(live[:j], live[j+1:]...)
			case lkCleanFailure(err):
			default:
				s.unexpected(err, "storm: file worker %d: mv %s %s (replacing): unexpected %v", k, src, dst, err)
				target := live[j]
				moved := lkFile{slot: target.slot, name: target.name}
				freeze(i, live[i], moved)
				for x := range live {
					if live[x].name == target.name {
						freeze(x, target, lkFile{slot: -1})
						break
					}
				}
			}
		default:
			i := rng.IntN(len(live))
			p, ok := path(live[i])
			if !ok {
				return
			}
			b, err := os.ReadFile(p)
			note("file-read", err)
			switch {
			case err == nil && string(b) != live[i].content:
				s.t.Errorf("storm: file worker %d: %s reads %q, want %q", k, p, lkShort(string(b)), lkShort(live[i].content))
			case err == nil, lkCleanFailure(err):
			default:
				s.unexpected(err, "storm: file worker %d: cat %s: unexpected %v", k, p, err)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files = append(s.files, live...)
	s.unknown = append(s.unknown, unknown...)
}

// ---------------------------------------------------------------------
// Races of two mounts. Each round runs in its own directory /rNN, built
// through mount A; both mounts are uncached, so each sees the other's
// changes at once. A round's outcome is judged from the errors: the tree
// must be what the successful operations imply in some serial order, and
// failed operations must have left no trace. All rounds' expected trees
// are checked together at the end by checkInvariants.

// lkRaceTest runs body for each strategy with two uncached mounts, then
// unmounts them and checks the invariants against what body expects.
func lkRaceTest(t *testing.T, body func(t *testing.T, f *mounttest.FS, a, b *mounttest.Mount, want *lkWant, tally *lkTally)) {
	for _, strategy := range lkStrategies {
		t.Run(strategy, func(t *testing.T) {
			start := time.Now()
			f := mounttest.NewFS(t)
			a := lkMount(t, f, strategy, false)
			b := lkMount(t, f, strategy, false)
			want := &lkWant{files: map[string]string{}, dirs: map[string]bool{}}
			var tally lkTally
			body(t, f, a, b, want, &tally)
			t.Logf("%s: outcomes in %s:\n%s", strategy, time.Since(start).Round(time.Millisecond), tally.String())
			a.Unmount(t)
			b.Unmount(t)
			checkInvariantsWant(t, f, *want)
		})
	}
}

// lkJudge compares a round's tree with the trees its outcome allows; it
// records the expected tree (the one found, if allowed) in want, unless
// want is nil (an intermediate state of the round).
func lkJudge(t *testing.T, round string, got map[string]string, want *lkWant, what string, allowed ...map[string]string) {
	t.Helper()
	for _, a := range allowed {
		if lkSame(got, a) {
			if want != nil {
				want.lkAdd(round, a)
			}
			return
		}
	}
	var s []string
	for _, a := range allowed {
		s = append(s, lkFmt(a))
	}
	t.Errorf("%s: %s: the tree is %s, but the outcome allows only %s", round, what, lkFmt(got), strings.Join(s, " or "))
	if want != nil {
		want.giveUp() // no longer knowable: only the structure is checked
	}
}

// TestRaceJuiceFS4800: `mv a b/d/e` on one mount against `mv b/d a/c` on
// another (JuiceFS issue 4800, where directories got lost). In either
// serial order the second rename finds its source or target parent gone,
// so exactly one may succeed (or neither, on a lock timeout); both
// succeeding makes a cycle that detaches a and b/d from the tree.
func TestRaceJuiceFS4800(t *testing.T) {
	rounds := lkRounds(t, 20)
	lkRaceTest(t, func(t *testing.T, f *mounttest.FS, a, b *mounttest.Mount, want *lkWant, tally *lkTally) {
		for i := 0; i < rounds; i++ {
			r := fmt.Sprintf("/r%02d", i)
			before := map[string]string{"/a/": "", "/a/x": "x" + r, "/b/": "", "/b/d/": "", "/b/d/y": "y" + r}
			lkMake(t, a.Path(r), before)
			errA, errB := lkRace(
				func() error { return lkRename(a.Path(r, "a"), a.Path(r, "b", "d", "e")) },
				func() error { return lkRename(b.Path(r, "b", "d"), b.Path(r, "a", "c")) })
			tally.add("mv a b/d/e", errA)
			tally.add("mv b/d a/c", errB)
			what := fmt.Sprintf("mv a b/d/e: %s, mv b/d a/c: %s", lkErrno(errA), lkErrno(errB))
			for _, err := range []error{errA, errB} {
				if err != nil && !lkCleanFailure(err) {
					t.Errorf("%s: %s: unexpected error %v", r, what, err)
				}
			}
			got := lkSnapFresh(t, f, a.Path(r))
			switch {
			case errA == nil && errB == nil:
				t.Errorf("%s: both renames of the #4800 pair succeeded (no serial order allows it): the tree is %s", r, lkFmt(got))
				want.giveUp()
			case errA == nil:
				lkJudge(t, r, got, want, what, map[string]string{"/b/": "", "/b/d/": "", "/b/d/y": "y" + r, "/b/d/e/": "", "/b/d/e/x": "x" + r})
			case errB == nil:
				lkJudge(t, r, got, want, what, map[string]string{"/a/": "", "/a/x": "x" + r, "/a/c/": "", "/a/c/y": "y" + r, "/b/": ""})
			default:
				lkJudge(t, r, got, want, what, before)
			}
		}
	})
}

// TestRaceSwap: `mv a b` against `mv b a`, with files (both may succeed,
// in either order: one file is legitimately replaced), empty directories
// (the same, by inode), and non-empty directories (both must fail:
// ENOTEMPTY, with no effect).
func TestRaceSwap(t *testing.T) {
	rounds := lkRounds(t, 12)
	lkRaceTest(t, func(t *testing.T, f *mounttest.FS, a, b *mounttest.Mount, want *lkWant, tally *lkTally) {
		for i := 0; i < rounds; i++ {
			r := fmt.Sprintf("/r%02d", i)
			variant := []string{"files", "empty dirs", "full dirs"}[i%3]
			var before map[string]string
			switch variant {
			case "files":
				before = map[string]string{"/a": "A" + r, "/b": "B" + r}
			case "empty dirs":
				before = map[string]string{"/a/": "", "/b/": ""}
			case "full dirs":
				before = map[string]string{"/a/": "", "/a/x": "x" + r, "/b/": "", "/b/y": "y" + r}
			}
			lkMake(t, a.Path(r), before)
			inoA, inoB := lkIno(t, a.Path(r, "a")), lkIno(t, a.Path(r, "b"))
			errA, errB := lkRace(
				func() error { return lkRename(a.Path(r, "a"), a.Path(r, "b")) },
				func() error { return lkRename(b.Path(r, "b"), b.Path(r, "a")) })
			tally.add("mv a b ("+variant+")", errA)
			tally.add("mv b a ("+variant+")", errB)
			what := fmt.Sprintf("%s: mv a b: %s, mv b a: %s", variant, lkErrno(errA), lkErrno(errB))
			extra := []string{}
			if variant == "full dirs" {
				extra = []string{"ENOTEMPTY", "EEXIST"}
			}
			for _, err := range []error{errA, errB} {
				if err != nil && !lkCleanFailure(err, extra...) {
					t.Errorf("%s: %s: unexpected error %v", r, what, err)
				}
			}
			got := lkSnapFresh(t, f, a.Path(r))
			// Which inode is at a and b (0: nothing), to tell directories apart.
			gotIno := map[string]uint64{"a": lkInoOrZero(a.Path(r, "a")), "b": lkInoOrZero(a.Path(r, "b"))}
			type state struct {
				tree     map[string]string
				ina, inb uint64
			}
			aAtB := map[string]string{"/b/": ""}
			bAtA := map[string]string{"/a/": ""}
			if variant == "files" {
				aAtB, bAtA = map[string]string{"/b": "A" + r}, map[string]string{"/a": "B" + r}
			}
			var allowed []state
			switch {
			case variant == "full dirs":
				if errA == nil || errB == nil {
					t.Errorf("%s: %s: a directory replaced a non-empty one", r, what)
				}
				allowed = []state{{before, inoA, inoB}}
			case errA == nil && errB == nil:
				// a->b then b->a leaves A at a; b->a then a->b leaves B at b.
				aAtA := map[string]string{"/a/": ""}
				bAtB := map[string]string{"/b/": ""}
				if variant == "files" {
					aAtA, bAtB = map[string]string{"/a": "A" + r}, map[string]string{"/b": "B" + r}
				}
				allowed = []state{{aAtA, inoA, 0}, {bAtB, 0, inoB}}
			case errA == nil:
				allowed = []state{{aAtB, 0, inoA}}
			case errB == nil:
				allowed = []state{{bAtA, inoB, 0}}
			default:
				allowed = []state{{before, inoA, inoB}}
			}
			var trees []map[string]string
			treeOK, inoOK := false, false
			for _, s := range allowed {
				trees = append(trees, s.tree)
				if lkSame(got, s.tree) {
					treeOK = true
					inoOK = inoOK || (gotIno["a"] == s.ina && gotIno["b"] == s.inb)
				}
			}
			if treeOK && !inoOK {
				t.Errorf("%s: %s: the names are right but not the inodes: a=%d b=%d (before: a=%d b=%d)",
					r, what, gotIno["a"], gotIno["b"], inoA, inoB)
			}
			lkJudge(t, r, got, want, what, trees...)
		}
	})
}

func lkIno(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func lkInoOrZero(path string) uint64 {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// TestRaceSameDestination: two renames to one destination. Files with
// plain rename may both succeed (POSIX replaces the first by the second):
// the destination then holds one of the two and the other is legitimately
// gone. With RENAME_NOREPLACE, and with non-empty directories, exactly one
// wins (the other gets EEXIST or ENOTEMPTY).
func TestRaceSameDestination(t *testing.T) {
	rounds := lkRounds(t, 12)
	lkRaceTest(t, func(t *testing.T, f *mounttest.FS, a, b *mounttest.Mount, want *lkWant, tally *lkTally) {
		for i := 0; i < rounds; i++ {
			r := fmt.Sprintf("/r%02d", i)
			variant := []string{"files", "files noreplace", "dirs"}[i%3]
			before := map[string]string{"/s1/": "", "/s1/x": "X" + r, "/s2/": "", "/s2/y": "Y" + r, "/t/": ""}
			if variant == "dirs" {
				before = map[string]string{"/s1/": "", "/s1/x/": "", "/s1/x/in": "X" + r, "/s2/": "", "/s2/y/": "", "/s2/y/in": "Y" + r, "/t/": ""}
			}
			lkMake(t, a.Path(r), before)
			mv := func(from, to string) error {
				if variant == "files noreplace" {
					return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_NOREPLACE)
				}
				return lkRename(from, to)
			}
			errA, errB := lkRace(
				func() error { return mv(a.Path(r, "s1", "x"), a.Path(r, "t", "z")) },
				func() error { return mv(b.Path(r, "s2", "y"), b.Path(r, "t", "z")) })
			tally.add("mv s1/x t/z ("+variant+")", errA)
			tally.add("mv s2/y t/z ("+variant+")", errB)
			what := fmt.Sprintf("%s: mv s1/x t/z: %s, mv s2/y t/z: %s", variant, lkErrno(errA), lkErrno(errB))
			extra := []string{}
			if variant != "files" {
				extra = []string{"EEXIST", "ENOTEMPTY"}
			}
			for _, err := range []error{errA, errB} {
				if err != nil && !lkCleanFailure(err, extra...) {
					t.Errorf("%s: %s: unexpected error %v", r, what, err)
				}
			}
			xAtZ := map[string]string{"/s1/": "", "/s2/": "", "/s2/y": "Y" + r, "/t/": "", "/t/z": "X" + r}
			yAtZ := map[string]string{"/s1/": "", "/s1/x": "X" + r, "/s2/": "", "/t/": "", "/t/z": "Y" + r}
			bothX := map[string]string{"/s1/": "", "/s2/": "", "/t/": "", "/t/z": "X" + r}
			bothY := map[string]string{"/s1/": "", "/s2/": "", "/t/": "", "/t/z": "Y" + r}
			if variant == "dirs" {
				xAtZ = map[string]string{"/s1/": "", "/s2/": "", "/s2/y/": "", "/s2/y/in": "Y" + r, "/t/": "", "/t/z/": "", "/t/z/in": "X" + r}
				yAtZ = map[string]string{"/s1/": "", "/s1/x/": "", "/s1/x/in": "X" + r, "/s2/": "", "/t/": "", "/t/z/": "", "/t/z/in": "Y" + r}
			}
			got := lkSnapFresh(t, f, a.Path(r))
			switch {
			case errA == nil && errB == nil && variant != "files":
				t.Errorf("%s: %s: both renames to one destination succeeded: the tree is %s", r, what, lkFmt(got))
				want.giveUp()
			case errA == nil && errB == nil:
				// Either order: the later one replaced the earlier.
				lkJudge(t, r, got, want, what, bothX, bothY)
			case errA == nil:
				lkJudge(t, r, got, want, what, xAtZ)
			case errB == nil:
				lkJudge(t, r, got, want, what, yAtZ)
			default:
				lkJudge(t, r, got, want, what, before)
			}
		}
	})
}

// TestRaceRenameDirUnderCreates: one mount creates files in a directory,
// continuously, while another renames that directory. Every acknowledged
// create must end up in the renamed directory (created before the rename,
// it moved with it); creates after the rename fail, or, through a
// descriptor of the directory opened before (openat), may land in the
// renamed directory too, which is where POSIX puts them. Nothing may land
// in a directory the renamer makes at the old name, and nothing may be
// orphaned at the old path.
func TestRaceRenameDirUnderCreates(t *testing.T) {
	rounds := lkRounds(t, 6)
	lkRaceTest(t, func(t *testing.T, f *mounttest.FS, a, b *mounttest.Mount, want *lkWant, tally *lkTally) {
		var beforeN, afterN int
		for i := 0; i < rounds; i++ {
			r := fmt.Sprintf("/r%02d", i)
			viaFd := i%2 == 1
			lkMake(t, a.Path(r), map[string]string{"/s/": "", "/s/seed": "seed" + r})
			dirfd := -1
			if viaFd {
				var err error
				if dirfd, err = unix.Open(a.Path(r, "s"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
					t.Fatal(err)
				}
			}
			go1 := make(chan struct{})
			renamed := make(chan error, 1)
			var renameErr error
			var mkdirErr error
			go func() {
				<-go1
				err := lkRename(b.Path(r, "s"), b.Path(r, "t"))
				if err == nil && viaFd {
					mkdirErr = os.Mkdir(b.Path(r, "s"), 0o755) // a new directory at the old name
				}
				renamed <- err
			}()
			trigger := 2 + i%5
			acked := map[string]string{}
			done := false
			failsAfter, triesAfter := 0, 0
			for j := 0; j < 300 && (!done || (failsAfter < 3 && triesAfter < 20)); j++ {
				name := fmt.Sprintf("c%03d", j)
				content := fmt.Sprintf("%s create %d\n", r, j)
				var opened bool
				var err error
				if viaFd {
					opened, err = lkCreateAt(dirfd, name, content)
				} else {
					opened, err = lkCreate(a.Path(r, "s", name), content)
				}
				kind := "create (path)"
				if viaFd {
					kind = "create (openat)"
				}
				if done {
					kind += " after"
					triesAfter++
				}
				tally.add(kind, err)
				switch {
				case err == nil:
					acked[name] = content
					if done {
						afterN++
					} else {
						beforeN++
					}
				case !opened && lkCleanFailure(err):
					if done {
						failsAfter++
					}
				default:
					t.Errorf("%s: create %s: unexpected %v (opened: %v)", r, name, err, opened)
					want.giveUp()
				}
				if j+1 == trigger {
					close(go1)
				}
				if !done {
					select {
					case renameErr = <-renamed:
						done = true
					default:
					}
				}
			}
			if !done {
				renameErr = <-renamed
			}
			if dirfd >= 0 {
				unix.Close(dirfd)
			}
			tally.add("mv s t", renameErr)
			if renameErr != nil && !lkCleanFailure(renameErr) {
				t.Errorf("%s: mv s t: unexpected %v", r, renameErr)
			}
			if mkdirErr != nil {
				t.Fatalf("%s: mkdir s after the rename: %v", r, mkdirErr)
			}
			exp := map[string]string{}
			dir := "/t"
			if renameErr != nil {
				dir = "/s"
			}
			exp[dir+"/"] = ""
			exp[dir+"/seed"] = "seed" + r
			for n, c := range acked {
				exp[dir+"/"+n] = c
			}
			if viaFd && renameErr == nil {
				exp["/s/"] = "" // the new, empty directory
			}
			got := lkSnapFresh(t, f, a.Path(r))
			lkJudge(t, r, got, want, fmt.Sprintf("mv s t: %s, %d creates acknowledged", lkErrno(renameErr), len(acked)), exp)
		}
		t.Logf("acknowledged creates: %d before the rename returned, %d after", beforeN, afterN)
	})
}

// TestRaceRenameIntoItself: `mv /a /a/b` is EINVAL, also deeper and from
// both mounts at once; and the cross-mount form no single kernel can see
// (`mv a c/a2` on one mount, `mv c a/c2` on the other): at most one may
// succeed.
func TestRaceRenameIntoItself(t *testing.T) {
	rounds := lkRounds(t, 6)
	lkRaceTest(t, func(t *testing.T, f *mounttest.FS, a, b *mounttest.Mount, want *lkWant, tally *lkTally) {
		for i := 0; i < rounds; i++ {
			r := fmt.Sprintf("/r%02d", i)
			before := map[string]string{"/a/": "", "/a/x/": "", "/a/x/y/": "", "/a/x/y/f": "f" + r, "/c/": "", "/c/g": "g" + r}
			lkMake(t, a.Path(r), before)
			errA, errB := lkRace(
				func() error { return lkRename(a.Path(r, "a"), a.Path(r, "a", "b")) },
				func() error { return lkRename(b.Path(r, "a", "x"), b.Path(r, "a", "x", "y", "z")) })
			tally.add("mv a a/b", errA)
			tally.add("mv a/x a/x/y/z", errB)
			for _, err := range []error{errA, errB} {
				if lkErrno(err) != "EINVAL" {
					t.Errorf("%s: moving a directory into itself: %v, want EINVAL", r, err)
				}
			}
			lkJudge(t, r, lkSnapFresh(t, f, a.Path(r)), nil, "after the EINVAL renames", before)

			errA, errB = lkRace(
				func() error { return lkRename(a.Path(r, "a"), a.Path(r, "c", "a2")) },
				func() error { return lkRename(b.Path(r, "c"), b.Path(r, "a", "c2")) })
			tally.add("mv a c/a2", errA)
			tally.add("mv c a/c2", errB)
			what := fmt.Sprintf("mv a c/a2: %s, mv c a/c2: %s", lkErrno(errA), lkErrno(errB))
			for _, err := range []error{errA, errB} {
				if err != nil && !lkCleanFailure(err, "EINVAL") {
					t.Errorf("%s: %s: unexpected error %v", r, what, err)
				}
			}
			got := lkSnapFresh(t, f, a.Path(r))
			switch {
			case errA == nil && errB == nil:
				t.Errorf("%s: %s: both succeeded, a cycle: the tree is %s", r, what, lkFmt(got))
				want.giveUp()
			case errA == nil:
				lkJudge(t, r, got, want, what, map[string]string{"/c/": "", "/c/g": "g" + r, "/c/a2/": "", "/c/a2/x/": "", "/c/a2/x/y/": "", "/c/a2/x/y/f": "f" + r})
			case errB == nil:
				lkJudge(t, r, got, want, what, map[string]string{"/a/": "", "/a/x/": "", "/a/x/y/": "", "/a/x/y/f": "f" + r, "/a/c2/": "", "/a/c2/g": "g" + r})
			default:
				lkJudge(t, r, got, want, what, before)
			}
		}
	})
}

// TestRenameNotStarved: two mounts create files under a directory in tight
// loops; a rename of that directory from a third mount must still
// complete within the lock timeout (20s): a stream of operations holding
// shared locks must not starve an exclusive one. Every acknowledged create
// ends up in the renamed directory.
func TestRenameNotStarved(t *testing.T) {
	const lockTimeout = 20 * time.Second
	for _, strategy := range lkStrategies {
		t.Run(strategy, func(t *testing.T) {
			f := mounttest.NewFS(t)
			flags := []string{"--lock-timeout", lockTimeout.String()}
			ms := []*mounttest.Mount{lkMount(t, f, strategy, false, flags...), lkMount(t, f, strategy, false, flags...), lkMount(t, f, strategy, false, flags...)}
			lkMake(t, ms[0].Path("r"), map[string]string{"/s/": ""})
			var tally lkTally
			var mu sync.Mutex
			acked := map[string]string{}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var started sync.WaitGroup
			const perMount = 2
			started.Add(2 * perMount)
			for k := 0; k < 2*perMount; k++ {
				m := ms[k/perMount]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := 0; ; j++ {
						select {
						case <-stop:
							return
						default:
						}
						name := fmt.Sprintf("w%d-%05d", k, j)
						content := name + "\n"
						opened, err := lkCreate(m.Path("r", "s", name), content)
						tally.add("create", err)
						if j == 5 {
							started.Done()
						}
						switch {
						case err == nil:
							mu.Lock()
							acked[name] = content
							mu.Unlock()
						case !opened && lkCleanFailure(err):
						default:
							t.Errorf("create %s: unexpected %v (opened: %v)", name, err, opened)
						}
					}
				}()
			}
			started.Wait()
			mu.Lock()
			n0 := len(acked)
			mu.Unlock()
			t0 := time.Now()
			err := lkRename(ms[2].Path("r", "s"), ms[2].Path("r", "t"))
			took := time.Since(t0)
			mu.Lock()
			n1 := len(acked)
			mu.Unlock()
			close(stop)
			wg.Wait()
			tally.add("mv s t", err)
			t.Logf("%s: the rename took %s (%v) while %d creates were acknowledged (%d before it started); outcomes:\n%s",
				strategy, took.Round(time.Millisecond), lkErrno(err), n1-n0, n0, tally.String())
			if err != nil {
				t.Errorf("the rename of a directory under a stream of creates failed after %s: %v (starved)", took.Round(time.Millisecond), err)
			} else if took > lockTimeout {
				t.Errorf("the rename took %s, more than the lock timeout %s", took, lockTimeout)
			}
			want := lkWant{files: map[string]string{}, dirs: map[string]bool{"/r": true}}
			dir := "/r/t"
			if err != nil {
				dir = "/r/s"
			}
			want.dirs[dir] = true
			names := make([]string, 0, len(acked))
			for n := range acked {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				want.files[dir+"/"+n] = acked[n]
			}
			for _, m := range ms {
				m.Unmount(t)
			}
			checkInvariantsWant(t, f, want)
		})
	}
}

// TestRemoteRenameListedAtomically: readers see a rename atomically, old
// paths before its commit point and new ones after, never neither (DESIGN,
// protocol point 7). A listing is a search, so another mount may list a
// slightly old state (README: up to the refresh interval), but never a
// state that did not exist: right after `mv c a/c2` on mount B returned,
// mount A (no caches) must list c in the round directory or c2 in a.
func TestRemoteRenameListedAtomically(t *testing.T) {
	rounds := lkRounds(t, 10)
	f := mounttest.NewFS(t)
	a := lkMount(t, f, "tree", false)
	b := lkMount(t, f, "tree", false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := func(dir string) map[string]bool {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Errorf("listing %s: %v", dir, err)
		}
		out := map[string]bool{}
		for _, e := range es {
			out[e.Name()] = true
		}
		return out
	}
	neither := 0
	for i := 0; i < rounds; i++ {
		r := fmt.Sprintf("/r%02d", i)
		lkMake(t, b.Path(r), map[string]string{"/a/": "", "/c/": "", "/c/g": "g"})
		if err := f.Store.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if err := lkRename(b.Path(r, "c"), b.Path(r, "a", "c2")); err != nil {
			t.Fatal(err)
		}
		old, moved := names(a.Path(r))["c"], names(a.Path(r, "a"))["c2"]
		if !old && !moved {
			neither++
			t.Errorf("%s: right after mv c a/c2 on another mount, the listings show c neither in %s nor as a/c2", r, r)
		}
	}
	t.Logf("%d of %d rounds listed the renamed directory in neither place", neither, rounds)
	a.Unmount(t)
	b.Unmount(t)
	checkInvariants(t, f, nil)
}

// TestRaceCreateVsAncestorRename: creates in a/b/c while the ancestor a is
// renamed again and again, both on one mount (and, in a second phase, the
// renames on the other mount while the creating mount looks the new names
// up). A create that returns success must be found at the path the renames
// imply; none may be left under a path that no longer exists.
func TestRaceCreateVsAncestorRename(t *testing.T) {
	secs := lkEnvInt(t, "ESFS_RACE_SECONDS", 3)
	for _, strategy := range lkStrategies {
		t.Run(strategy, func(t *testing.T) {
			f := mounttest.NewFS(t)
			a := lkMount(t, f, strategy, false)
			b := lkMount(t, f, strategy, false)
			var tally lkTally
			want := lkWant{files: map[string]string{}, dirs: map[string]bool{}}
			for phase, renamer := range []*mounttest.Mount{a, b} {
				top := fmt.Sprintf("p%d", phase)
				lkMake(t, a.Path(top), map[string]string{"/a0/": "", "/a0/b/": "", "/a0/b/c/": ""})
				var mu sync.Mutex
				cur := "a0" // the current name of a, as acknowledged
				stop := make(chan struct{})
				var wg sync.WaitGroup
				wg.Add(1)
				go func() {
					defer wg.Done()
					for g := 1; ; g++ {
						select {
						case <-stop:
							return
						default:
						}
						mu.Lock()
						from := cur
						mu.Unlock()
						to := fmt.Sprintf("a%d", g)
						err := lkRename(renamer.Path(top, from), renamer.Path(top, to))
						tally.add("mv a", err)
						if err == nil {
							mu.Lock()
							cur = to
							mu.Unlock()
						} else if !lkCleanFailure(err) {
							t.Errorf("mv %s %s: unexpected %v", from, to, err)
						}
					}
				}()
				acked := map[string]string{}
				deadline := time.Now().Add(time.Duration(secs) * time.Second)
				for j := 0; time.Now().Before(deadline); j++ {
					mu.Lock()
					dir := cur
					mu.Unlock()
					name := fmt.Sprintf("f%04d", j)
					content := top + " " + name + "\n"
					opened, err := lkCreate(a.Path(top, dir, "b", "c", name), content)
					tally.add("create in a/b/c", err)
					switch {
					case err == nil:
						acked[name] = content
					case !opened && lkCleanFailure(err):
					default:
						t.Errorf("create %s: unexpected %v (opened: %v)", name, err, opened)
					}
				}
				close(stop)
				wg.Wait()
				want.dirs["/"+top] = true
				for _, d := range []string{"", "/b", "/b/c"} {
					want.dirs["/"+top+"/"+cur+d] = true
				}
				for n, c := range acked {
					want.files["/"+top+"/"+cur+"/b/c/"+n] = c
				}
			}
			t.Logf("%s: outcomes:\n%s", strategy, tally.String())
			a.Unmount(t)
			b.Unmount(t)
			checkInvariantsWant(t, f, want)
		})
	}
}
