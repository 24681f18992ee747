package test

// Crash, zombie and LOCKING-REVIEW tests (issue 4): real mounts on one
// index, killed (ESFS_CRASH_POINT, SIGKILL), paused (SIGSTOP/SIGCONT) or cut
// off (mounttest.Proxy) in the middle of the protocol, and a survivor that
// must recover within lease + grace. After each scenario the index is
// checked against the invariants: no path document carries an intent, no
// duplicate path or inode, every document's parent exists and is a
// directory, no lock document and no unfinished operation record is left;
// and the files acknowledged to the test exist exactly once where the
// acknowledged operations put them, read through a mount.
//
// Every helper here is prefixed with cr so as not to collide with the
// other test files of the package. Lines starting "REPORT" in the test log
// are the measurements and findings that go into the issue note.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"golang.org/x/sys/unix"
)

const (
	// crLease is the --lease of every mount here.
	crLease = 2 * time.Second
	// crBound: a survivor must have finished recovering a dead mount's
	// work this long after the death: lease + grace (lease/2) is when the
	// death can be declared; 3s covers the sweeper's period (lease/3), the
	// recovery itself and scheduling on a loaded 2-core machine.
	crBound = crLease*3/2 + 3*time.Second
	// crPerDoc: on top of crBound, the survivor's own work of finishing or
	// undoing a rename grows with the documents it moved (a scan and two
	// bulk items each); under -race on a loaded 2-core machine about 1 ms.
	crPerDoc = 2 * time.Millisecond
	// crStale: the README's bound on how stale another mount's listing may
	// be (3s with default flags), plus slack for this loaded machine.
	crStale = 5 * time.Second
)

// crFlags: a short lease and no caching anywhere, so that what a mount
// shows is what the index holds.
var crFlags = []string{"--lease", crLease.String(), "--attr-timeout=0", "--entry-timeout=0", "--negative-timeout=0", "--cache-ttl=0"}

// crMount mounts with crFlags (plus extra) and env.
func crMount(t *testing.T, f *mounttest.FS, env []string, extra ...string) *mounttest.Mount {
	t.Helper()
	flags := append(append([]string{}, crFlags...), extra...)
	return f.MountAt(t, t.TempDir(), env, flags...)
}

// crContent is the content the tests give the file at relative path name.
func crContent(name string) string { return "content of " + name + "\n" }

// crNames returns n relative file names, one in ten in a few
// subdirectories.
func crNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		if i%10 == 9 {
			out[i] = fmt.Sprintf("sub-%d/f-%05d", i%7, i)
		} else {
			out[i] = fmt.Sprintf("f-%05d", i)
		}
	}
	return out
}

// crTree is an expected visible tree, by path relative to the mount (no
// leading slash): files with their contents and directories. Parents are
// implied. The listing of every directory in it (the root included) must
// be exactly its children, so an entry that shows twice, or in two places,
// or that is missing, is caught.
type crTree struct {
	files map[string]string
	dirs  map[string]bool
}

func newCrTree() crTree { return crTree{files: map[string]string{}, dirs: map[string]bool{}} }

// add puts files prefix/name with crContent(name) in the tree, and prefix
// itself as a directory.
func (w crTree) add(prefix string, names []string) crTree {
	w.dirs[prefix] = true
	for _, n := range names {
		w.files[prefix+"/"+n] = crContent(n)
	}
	return w
}

// count is the number of files and directories in the tree.
func (w crTree) count() int { return len(w.files) + len(w.dirs) }

// children maps every directory ("" is the root) to its entries.
func (w crTree) children() map[string]map[string]bool {
	out := map[string]map[string]bool{"": {}}
	var note func(p string)
	note = func(p string) {
		dir, name := filepath.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		if out[dir] == nil {
			out[dir] = map[string]bool{}
			if dir != "" {
				note(dir)
			}
		}
		out[dir][name] = true
	}
	for p := range w.files {
		note(p)
	}
	for p := range w.dirs {
		if out[p] == nil {
			out[p] = map[string]bool{}
		}
		note(p)
	}
	return out
}

// crCap shortens a list for a message.
func crCap(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, "\n  ")
	}
	return strings.Join(list[:n], "\n  ") + fmt.Sprintf("\n  ... and %d more", len(list)-n)
}

// crVerifyMount compares what mount m shows with w: every directory's
// listing, and with contents, every file's bytes. It returns the problems.
func crVerifyMount(m *mounttest.Mount, w crTree, contents bool) []string {
	return crVerifyUnder(m, w, "", contents)
}

// crVerifyUnder is crVerifyMount for the directory under and below it only
// ("" is everything).
func crVerifyUnder(m *mounttest.Mount, w crTree, under string, contents bool) []string {
	within := func(p string) bool { return under == "" || p == under || strings.HasPrefix(p, under+"/") }
	var probs []string
	kids := w.children()
	dirs := make([]string, 0, len(kids))
	for d := range kids {
		if within(d) {
			dirs = append(dirs, d)
		}
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		want := kids[dir]
		es, err := os.ReadDir(m.Path(dir))
		if err != nil {
			probs = append(probs, fmt.Sprintf("listing /%s: %v", dir, err))
			continue
		}
		got := map[string]bool{}
		var extra, missing []string
		for _, e := range es {
			if got[e.Name()] {
				probs = append(probs, fmt.Sprintf("/%s lists %q twice", dir, e.Name()))
			}
			got[e.Name()] = true
			if !want[e.Name()] {
				extra = append(extra, fmt.Sprintf("%q", e.Name()))
			}
		}
		for n := range want {
			if !got[n] {
				missing = append(missing, fmt.Sprintf("%q", n))
			}
		}
		sort.Strings(extra)
		sort.Strings(missing)
		if len(missing) > 0 {
			probs = append(probs, fmt.Sprintf("/%s: %d of %d entries missing from the listing: %s", dir, len(missing), len(want), crCap(missing, 5)))
		}
		if len(extra) > 0 {
			probs = append(probs, fmt.Sprintf("/%s: %d unexpected entries listed: %s", dir, len(extra), crCap(extra, 5)))
		}
	}
	if contents {
		// Reading a file through an uncached mount costs several round
		// trips: for big trees, read a fixed sample of 300 (the listings
		// above already cover every name).
		var paths []string
		for p := range w.files {
			if within(p) {
				paths = append(paths, p)
			}
		}
		sort.Strings(paths)
		if step := len(paths) / 300; step > 1 {
			var sample []string
			for i := 0; i < len(paths); i += step {
				sample = append(sample, paths[i])
			}
			paths = sample
		}
		for _, p := range paths {
			c := w.files[p]
			b, err := os.ReadFile(m.Path(p))
			if err != nil {
				probs = append(probs, fmt.Sprintf("reading /%s: %v", p, err))
			} else if string(b) != c {
				probs = append(probs, fmt.Sprintf("/%s holds %q, want %q", p, b, c))
			}
		}
	}
	return probs
}

// crEventually is crVerifyUnder retried for up to crStale: for views of
// another mount's changes, which the README allows to lag (listings follow
// the index refresh interval).
func crEventually(m *mounttest.Mount, w crTree, under string, contents bool) []string {
	var probs []string
	for start := time.Now(); time.Since(start) < crStale; time.Sleep(100 * time.Millisecond) {
		if probs = crVerifyUnder(m, w, under, contents); len(probs) == 0 {
			break
		}
	}
	return probs
}

// crIndex checks the index itself (not through a mount). problems are
// invariant violations; orphans are path documents whose parent document
// is missing (kept apart so that a test can tolerate and report them).
// With full it also checks that every path's inode exists and reports, in
// notes, inode documents no path names and data chunks of missing inodes
// (leaks, which only cost space).
func crIndex(t *testing.T, f *mounttest.FS, full bool) (problems, orphans, notes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx); err != nil {
		return []string{"refresh: " + err.Error()}, nil, nil
	}
	sc := f.Store.ScanTree("/", store.DefaultPageSize)
	defer sc.Close()
	docs := map[string]store.Dentry{}
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return []string{"scanning the path index: " + err.Error()}, nil, nil
		}
		for _, b := range bad {
			problems = append(problems, "corrupt path document: "+b.Error())
		}
		if page == nil {
			break
		}
		for _, d := range page {
			if _, dup := docs[d.Path]; dup {
				problems = append(problems, fmt.Sprintf("path %q stored twice", d.Path))
			}
			docs[d.Path] = d
			if d.Intent.Op != "" {
				problems = append(problems, fmt.Sprintf("path %q carries intent {op %s, role %s}", d.Path, d.Intent.Op, d.Intent.Role))
			}
		}
	}
	if _, ok := docs["/"]; !ok {
		problems = append(problems, "the root document is missing")
	}
	byIno := map[uint64][]string{}
	for p, d := range docs {
		byIno[d.Ino] = append(byIno[d.Ino], p)
		if p == "/" {
			continue
		}
		parent, ok := docs[d.Parent]
		switch {
		case !ok:
			orphans = append(orphans, fmt.Sprintf("%q (parent %q missing)", p, d.Parent))
		case parent.Type != store.TypeDir:
			problems = append(problems, fmt.Sprintf("path %q has parent %q, a %s", p, d.Parent, parent.Type))
		}
	}
	var inos, shared []uint64
	for ino, ps := range byIno {
		inos = append(inos, ino)
		if len(ps) > 1 {
			shared = append(shared, ino)
		}
	}
	check := shared
	if full {
		check = inos
	}
	found := map[uint64]bool{}
	for i := 0; i < len(check); i += 1000 {
		part := check[i:min(i+1000, len(check))]
		res, err := f.Store.GetInodes(ctx, part)
		if err != nil {
			problems = append(problems, "reading inodes: "+err.Error())
			break
		}
		for k, r := range res {
			ino, ps := part[k], byIno[part[k]]
			sort.Strings(ps)
			if r.Err != nil {
				problems = append(problems, fmt.Sprintf("paths %q name inode %d: %v", ps, ino, r.Err))
				continue
			}
			found[ino] = true
			if len(ps) > 1 && (r.Inode.Type == store.TypeDir || int(r.Inode.Nlink) < len(ps)) {
				problems = append(problems, fmt.Sprintf("inode %d (%s, nlink %d) is named by %d paths: %q", ino, r.Inode.Type, r.Inode.Nlink, len(ps), ps))
			}
		}
	}
	// A live mount keeps the shared locks of its last creates a moment (a
	// lease, given back 0.3 s after its last use): wait for them.
	var locks []store.LockDoc
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		locks, err = f.Store.SearchLocks(ctx)
		if err != nil || len(locks) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		problems = append(problems, "listing locks: "+err.Error())
	}
	for _, l := range locks {
		problems = append(problems, fmt.Sprintf("lock document %q left: holders %+v, waiters %+v", l.Path, l.Holders, l.Waiters))
	}
	ops, err := f.Store.SearchOps(ctx, store.OpPrepared, store.OpCommitted, store.OpAborted)
	if err != nil {
		problems = append(problems, "listing operations: "+err.Error())
	}
	for _, o := range ops {
		problems = append(problems, fmt.Sprintf("operation %s left %s (%q -> %q, owner %s, epoch %d)", o.ID, o.State, o.Src, o.Dst, o.Owner, o.Epoch))
	}
	sort.Strings(problems)
	sort.Strings(orphans)
	if full {
		inodes := crSearchIDs(t, f, "-inodes", "ino")
		leaked := 0
		for _, id := range inodes {
			var ino uint64
			if _, err := fmt.Sscan(id, &ino); err == nil && !found[ino] && len(byIno[ino]) == 0 {
				leaked++
			}
		}
		if leaked > 0 {
			notes = append(notes, fmt.Sprintf("%d inode documents named by no path (leaked)", leaked))
		}
		chunks := crSearchIDs(t, f, "-data", "ino", "chunk")
		stray := 0
		for _, id := range chunks {
			var ino uint64
			if _, err := fmt.Sscan(strings.SplitN(id, ".", 2)[0], &ino); err == nil && !found[ino] {
				stray++
			}
		}
		if stray > 0 {
			notes = append(notes, fmt.Sprintf("%d data chunks of inodes no path names (leaked)", stray))
		}
	}
	return problems, orphans, notes
}

// crSearchIDs lists the _id of every document of index P<suffix> (after a
// refresh), with raw HTTP, paging on the unique sort keys (Elasticsearch 8
// does not sort on _id).
func crSearchIDs(t *testing.T, f *mounttest.FS, suffix string, keys ...string) []string {
	t.Helper()
	base := strings.TrimSuffix(f.URL, "/") + "/" + f.Index + suffix
	if res, err := http.Post(base+"/_refresh", "application/json", nil); err == nil {
		res.Body.Close()
	}
	var ids []string
	var after []json.RawMessage // raw: inode numbers do not survive float64
	for {
		var sortBy []any
		for _, k := range keys {
			sortBy = append(sortBy, map[string]any{k: "asc"})
		}
		q := map[string]any{"size": 5000, "_source": false, "sort": sortBy}
		if after != nil {
			q["search_after"] = after
		}
		body, _ := json.Marshal(q)
		res, err := http.Post(base+"/_search", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Errorf("listing %s: %v", suffix, err)
			return ids
		}
		raw, _ := io.ReadAll(res.Body)
		res.Body.Close()
		var out struct {
			Hits struct {
				Hits []struct {
					ID   string            `json:"_id"`
					Sort []json.RawMessage `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := json.Unmarshal(raw, &out); err != nil || res.StatusCode != 200 {
			t.Errorf("listing %s: %s %s", suffix, res.Status, raw)
			return ids
		}
		for _, h := range out.Hits.Hits {
			ids = append(ids, h.ID)
		}
		if len(out.Hits.Hits) < 5000 {
			return ids
		}
		after = out.Hits.Hits[len(out.Hits.Hits)-1].Sort
	}
}

// crProblems is every violation: the index's (orphans included) and what
// mount m shows compared with w (listings only unless contents).
func crProblems(t *testing.T, f *mounttest.FS, m *mounttest.Mount, w crTree, contents, full bool) []string {
	t.Helper()
	probs, orphans, _ := crIndex(t, f, full)
	for _, o := range orphans {
		probs = append(probs, "orphan path "+o)
	}
	if m != nil {
		probs = append(probs, crVerifyMount(m, w, contents)...)
	}
	return probs
}

// crWaitClean polls until the index is clean and mount m shows exactly w,
// and returns how long after since that was first seen. On timeout it
// reports the last problems and returns ok=false.
func crWaitClean(t *testing.T, f *mounttest.FS, m *mounttest.Mount, w crTree, since time.Time, limit time.Duration) (time.Duration, bool) {
	t.Helper()
	for {
		probs := crProblems(t, f, m, w, false, false)
		if len(probs) == 0 {
			return time.Since(since), true
		}
		if time.Since(since) > limit {
			t.Errorf("not clean %s after the event; problems:\n  %s", limit, crCap(probs, 25))
			return time.Since(since), false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crFinalCheck is the thorough check once a scenario settled: index with
// inodes, and every file's content (a sample of big trees) through m; then
// the shared checker (invariants_test.go), with the exact set of files
// when the tree is small enough to read whole through a mount.
func crFinalCheck(t *testing.T, f *mounttest.FS, m *mounttest.Mount, w crTree) {
	t.Helper()
	if probs := crProblems(t, f, m, w, true, true); len(probs) > 0 {
		t.Errorf("final check through %s:\n  %s", m.Dir, crCap(probs, 25))
	}
	if _, _, notes := crIndex(t, f, true); len(notes) > 0 {
		t.Logf("REPORT %s: leaks: %s", t.Name(), strings.Join(notes, "; "))
	}
	var want map[string]string
	if len(w.files) <= 500 {
		want = map[string]string{}
		for p, c := range w.files {
			want["/"+p] = c
		}
	}
	checkInvariants(t, f, want)
}

// crQ quotes s for bash.
func crQ(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// crPopulate writes root and its files, with crContent, straight into
// the index (see mounttest.Populate).
func crPopulate(t *testing.T, f *mounttest.FS, root string, names []string) {
	t.Helper()
	mounttest.Populate(t, f, root, names, crContent)
}

// crResult is the outcome of a command run in the background.
type crResult struct {
	out  string
	err  error
	took time.Duration
	end  time.Time
}

// crRun runs a command with a time limit.
func crRun(limit time.Duration, dir, name string, args ...string) crResult {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return crResult{out: string(out), err: err, took: time.Since(start), end: time.Now()}
}

// crGo runs fn in the background; the channel delivers its result.
func crGo(fn func() crResult) <-chan crResult {
	ch := make(chan crResult, 1)
	go func() { ch <- fn() }()
	return ch
}

// crWaitResult waits for a background command.
func crWaitResult(t *testing.T, what string, ch <-chan crResult, limit time.Duration) crResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("%s did not finish within %s", what, limit)
	}
	return crResult{}
}

// crSession returns the live session document of mount m.
func crSession(t *testing.T, f *mounttest.FS, m *mounttest.Mount) store.SessionDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	all, err := f.Store.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.Pid == m.Pid() && !s.Dead {
			return s
		}
	}
	t.Fatalf("no live session of the mount at %s (pid %d) among %+v", m.Dir, m.Pid(), all)
	return store.SessionDoc{}
}

// crWaitDeclaredDead waits until session id is declared dead and returns
// how long after since.
func crWaitDeclaredDead(t *testing.T, f *mounttest.FS, id string, since time.Time, limit time.Duration) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit+time.Minute)
	defer cancel()
	for {
		s, err := f.Store.GetSession(ctx, id)
		if err == nil && s.Dead {
			return time.Since(since)
		}
		if time.Since(since) > limit {
			t.Fatalf("session %s not declared dead within %s (last read: %+v, %v)", id, limit, s, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crWaitLog waits until the mount's log contains s.
func crWaitLog(t *testing.T, m *mounttest.Mount, s string, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for !strings.Contains(m.Log(), s) {
		if time.Since(start) > limit {
			t.Fatalf("the mount at %s did not log %q within %s", m.Dir, s, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// crErrno names the errno inside err ("ok" for nil).
func crErrno(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// crCase is one crash of a rename at a crash point: prepare builds the tree
// through the survivor B (or the index), A runs `mv src dst` and kills
// itself at point; B must then show before (point before the commit) or
// after (at or after it), cleanly, within crBound.
type crCase struct {
	point     string
	committed bool
	prepare   func(t *testing.T, f *mounttest.FS, b *mounttest.Mount)
	src, dst  string
	before    crTree
	after     crTree
	check     func(t *testing.T, f *mounttest.FS, b *mounttest.Mount)
}

// crCrash runs c and returns the recovery time, from A's death to B
// showing a finished, consistent state.
func crCrash(t *testing.T, c crCase) time.Duration {
	f := mounttest.NewFS(t)
	b := crMount(t, f, nil)
	c.prepare(t, f, b)
	a := crMount(t, f, []string{"ESFS_CRASH_POINT=" + c.point})
	mv := crGo(func() crResult { return crRun(2*time.Minute, "/", "mv", "-T", a.Path(c.src), a.Path(c.dst)) })
	if _, ok := a.WaitExit(2 * time.Minute); !ok {
		t.Fatalf("mount A did not die at %s", c.point)
	}
	died := time.Now()
	a.Kill() // reap, and lazily unmount its dead mount point
	if !strings.Contains(a.Log(), "crash point "+c.point+" reached") {
		t.Fatalf("mount A exited without reaching %s:\n%s", c.point, a.Log())
	}
	want := c.before
	if c.committed {
		want = c.after
	}
	took, ok := crWaitClean(t, f, b, want, died, crBound+30*time.Second)
	r := crWaitResult(t, "mv on the dead mount", mv, time.Minute)
	t.Logf("mv on the mount that died: %v %s", r.err, strings.TrimSpace(r.out))
	bound := crBound + time.Duration(want.count())*crPerDoc
	if ok && took > bound {
		t.Errorf("recovery after %s took %s, bound %s", c.point, took.Round(time.Millisecond), bound)
	}
	crFinalCheck(t, f, b, want)
	if c.check != nil {
		c.check(t, f, b)
	}
	return took
}

// TestCrashPoints kills a mount at every crash point of a directory rename
// and measures how long a survivor takes to finish or undo it.
func TestCrashPoints(t *testing.T) {
	small := []string{"a", "b", "sub/c", "sub/deeper/d", "e"}
	big := crNames(2500) // > 2 pages of 1000: rename-mid-stage fires after the 2nd
	var report []string
	for _, p := range []struct {
		point     string
		committed bool
	}{
		{"rename-after-record", false},
		{"rename-mid-stage", false},
		{"rename-before-commit", false},
		{"rename-after-commit", true},
		{"rename-mid-finish", true},
		{"rename-before-release", true},
	} {
		t.Run(p.point, func(t *testing.T) {
			names := small
			if p.point == "rename-mid-stage" {
				names = big
			}
			took := crCrash(t, crCase{
				point: p.point, committed: p.committed, src: "src", dst: "dst",
				prepare: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					crPopulate(t, f, "/src", names)
				},
				before: newCrTree().add("src", names),
				after:  newCrTree().add("dst", names),
			})
			report = append(report, fmt.Sprintf("%s (%d files): %s", p.point, len(names), took.Round(10*time.Millisecond)))
		})
	}
	t.Logf("REPORT recovery times after a crash (lease %s, bound %s):\n  %s", crLease, crBound, strings.Join(report, "\n  "))
}

// TestCrashRenameOverExisting (LOCKING-REVIEW [9]): a file renamed over an
// existing file, killed at every stage; before the commit both files keep
// their contents and inodes, after it the target has the source's and the
// replaced inode is gone.
func TestCrashRenameOverExisting(t *testing.T) {
	var report []string
	for _, p := range []struct {
		point     string
		committed bool
	}{
		{"rename-after-record", false},
		{"rename-before-commit", false},
		{"rename-after-commit", true},
		{"rename-mid-finish", true},
		{"rename-before-release", true},
	} {
		t.Run(p.point, func(t *testing.T) {
			var oldIno, newIno uint64
			before, after := newCrTree(), newCrTree()
			before.files["src"], before.files["dst"], before.files["keep"] = "new\n", "old\n", "keep\n"
			after.files["dst"], after.files["keep"] = "new\n", "keep\n"
			took := crCrash(t, crCase{
				point: p.point, committed: p.committed, src: "src", dst: "dst",
				prepare: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					for name, c := range before.files {
						if err := os.WriteFile(b.Path(name), []byte(c), 0o644); err != nil {
							t.Fatal(err)
						}
					}
					var st syscall.Stat_t
					if err := syscall.Lstat(b.Path("dst"), &st); err != nil {
						t.Fatal(err)
					}
					oldIno = st.Ino
					if err := syscall.Lstat(b.Path("src"), &st); err != nil {
						t.Fatal(err)
					}
					newIno = st.Ino
				},
				before: before, after: after,
				check: func(t *testing.T, f *mounttest.FS, b *mounttest.Mount) {
					var st syscall.Stat_t
					if err := syscall.Lstat(b.Path("dst"), &st); err != nil {
						t.Fatal(err)
					}
					want := oldIno
					if p.committed {
						want = newIno
					}
					if st.Ino != want {
						t.Errorf("dst is inode %d, want %d (old %d, new %d)", st.Ino, want, oldIno, newIno)
					}
					_, err := f.Store.GetInode(context.Background(), oldIno)
					switch {
					case p.committed && err == nil:
						t.Errorf("the replaced inode %d still exists after the rename committed (a leaked link)", oldIno)
					case !p.committed && err != nil:
						t.Errorf("the target's inode %d is gone although the rename was rolled back: %v", oldIno, err)
					}
				},
			})
			report = append(report, fmt.Sprintf("%s: %s", p.point, took.Round(10*time.Millisecond)))
		})
	}
	t.Logf("REPORT recovery times, rename over an existing file:\n  %s", strings.Join(report, "\n  "))
}

// TestZombie (LOCKING-REVIEW [1,2], [3]): the owner of a large directory
// rename is paused (SIGSTOP) right after its commit, past lease + grace.
// The survivor declares it dead, rolls the rename forward, renames the
// same paths again and creates files there. Then the owner wakes: its
// late writes must change nothing, its rename must fail with EIO, and it
// must go on working under a new session.
func TestZombie(t *testing.T) {
	f := mounttest.NewFS(t)
	b := crMount(t, f, nil)
	a := crMount(t, f, nil)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) }) // before the mount's own cleanup
	names := crNames(5000)
	crPopulate(t, f, "/src", names)
	sessA := crSession(t, f, a)

	// rename(2) itself, not mv: GNU mv (9.1) retries a rename that failed
	// with any errno (it lstats dst and calls renameat again, or, without
	// -T, moves src into dst when dst is now a directory), and that retry
	// is a new operation that A's new session rightly carries out. The
	// test wants the errno of the one rename that was fenced off.
	mv := crGo(func() crResult {
		s := time.Now()
		err := os.Rename(a.Path("src"), a.Path("dst"))
		return crResult{err: err, took: time.Since(s), end: time.Now()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var op store.OpRecord
	start := time.Now()
	for op.ID == "" {
		recs, err := f.Store.SearchOps(ctx, store.OpCommitted)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Src == "/src" && r.Owner == sessA.ID {
				op = r
			}
		}
		if op.ID != "" {
			break
		}
		select {
		case r := <-mv:
			t.Fatalf("the rename finished (%v) before its commit was seen: nothing to pause", r.err)
		default:
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatal("the rename did not commit within 3 minutes")
		}
	}
	a.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	rec, err := f.Store.GetOp(ctx, op.ID)
	t.Logf("A stopped %s after its rename started; its operation %s is %s at the stop (%v)", stopped.Sub(start).Round(time.Millisecond), op.ID, rec.State, err)
	if rec.State == store.OpDone {
		t.Logf("REPORT %s: A finished its rename before the stop landed; the zombie has nothing left to do", t.Name())
	}

	// B takes over and rolls forward.
	took, ok := crWaitClean(t, f, b, newCrTree().add("dst", names), stopped, crBound+30*time.Second)
	if !ok {
		t.FailNow()
	}
	t.Logf("REPORT %s: B finished A's committed rename of %d files %s after A was stopped", t.Name(), len(names), took.Round(10*time.Millisecond))
	if bound := crBound + time.Duration(len(names))*crPerDoc; took > bound {
		t.Errorf("recovery took %s, bound %s", took.Round(time.Millisecond), bound)
	}
	if rec, err := f.Store.GetOp(ctx, op.ID); err != nil || rec.Owner == sessA.ID || rec.State != store.OpDone {
		t.Errorf("after recovery the record is %+v (%v); want DONE, taken over by another session", rec, err)
	}

	// B renames the same paths again and creates files there.
	if err := os.Rename(b.Path("dst"), b.Path("src")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(b.Path("dst"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"dst/b-file", "src/b-new"} {
		if err := os.WriteFile(b.Path(p), []byte("from B\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if time.Since(stopped) < 2*crBound {
		time.Sleep(2*crBound - time.Since(stopped)) // keep A stopped well past lease + grace
	}

	a.Signal(syscall.SIGCONT)
	r := crWaitResult(t, "A's rename after SIGCONT", mv, time.Minute)
	t.Logf("REPORT %s: A's rename(2) after waking: %v", t.Name(), r.err)
	if !errors.Is(r.err, syscall.EIO) {
		t.Errorf("A's rename, taken over while A was stopped, reported %v; want EIO", r.err)
	}
	renewed := crWaitLog(t, a, "started a new session", 15*time.Second)
	t.Logf("A started a new session %s after SIGCONT (waited)", renewed.Round(time.Millisecond))
	if err := os.WriteFile(a.Path("after-a"), []byte("A lives\n"), 0o644); err != nil {
		t.Errorf("a create in A under its new session: %v", err)
	}

	want := newCrTree().add("src", names)
	want.files["src/b-new"] = "from B\n"
	want.files["dst/b-file"] = "from B\n"
	want.files["after-a"] = "A lives\n"
	if _, ok := crWaitClean(t, f, b, want, time.Now(), 20*time.Second); !ok {
		t.FailNow()
	}
	crFinalCheck(t, f, b, want)
	if probs := crEventually(a, want, "", false); len(probs) > 0 {
		t.Errorf("A's view after it woke up:\n  %s", crCap(probs, 20))
	}
}

// crCreator creates files name-000, name-001, ... in dir through a mount
// until stopped, recording each attempt.
type crCreator struct {
	// mkdir: make directories instead of files (a create with no open,
	// write, flush or release around it).
	mkdir bool
	mu    sync.Mutex
	ops   []crCreate
	stop  atomic.Bool
	wg    sync.WaitGroup
}

type crCreate struct {
	path       string // as the creator named it, relative to the mount
	name       string
	step       string // "create", "write" or "close": where it failed
	err        error
	start, end time.Time
	created    time.Time // when the create (open with O_CREAT) returned
}

// run starts workers creators; dirOf(k) is the directory (relative to the
// mount m) worker k creates in, read before each create.
func (c *crCreator) run(m *mounttest.Mount, workers int, prefix string, dirOf func(k int) string) {
	for w := 0; w < workers; w++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for i := 0; !c.stop.Load(); i++ {
				name := fmt.Sprintf("%s%d-%04d", prefix, w, i)
				rel := dirOf(w) + "/" + name
				op := crCreate{path: rel, name: name, step: "create", start: time.Now()}
				if c.mkdir {
					err := os.Mkdir(m.Path(rel), 0o755)
					op.created, op.end, op.err = time.Now(), time.Now(), err
					if err == nil {
						op.step = "close"
					}
					c.mu.Lock()
					c.ops = append(c.ops, op)
					c.mu.Unlock()
					if err != nil {
						time.Sleep(20 * time.Millisecond)
					}
					continue
				}
				fh, err := os.OpenFile(m.Path(rel), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
				op.created = time.Now()
				if err == nil {
					op.step = "write"
					if _, err = fh.Write([]byte(crContent(name))); err != nil {
						fh.Close()
					} else {
						op.step = "close"
						err = fh.Close()
					}
				}
				op.err, op.end = err, time.Now()
				c.mu.Lock()
				c.ops = append(c.ops, op)
				c.mu.Unlock()
				if err != nil {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
}

func (c *crCreator) finish(t *testing.T) []crCreate {
	c.stop.Store(true)
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("creators did not stop within 2 minutes")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]crCreate(nil), c.ops...)
}

// TestReviewStoppedCreatorOrphan (LOCKING-REVIEW [3,4]): a mount creating
// entries (directories) in d/s0..d/s15 is paused while some of its creates
// hold their locks; another mount, once the first is declared dead,
// removes d and everything in it; the first wakes. Its pending creates
// must fail (EIO: its entries were removed), and nothing of it may turn
// up, even when d/sK are made again. Whether the pause lands between a
// create's locked re-check and its write (the case that orphans) is down
// to timing: it does in some runs, not all.
func TestReviewStoppedCreatorOrphan(t *testing.T) {
	f := mounttest.NewFS(t)
	b := crMount(t, f, nil)
	a := crMount(t, f, nil)
	t.Cleanup(func() { a.Signal(syscall.SIGCONT) })
	const creators = 16
	for k := 0; k < creators; k++ {
		if err := os.MkdirAll(b.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sessA := crSession(t, f, a)
	// mkdir: the create alone, so that a large share of each creator's
	// time is between its locked re-check and its write, the window this
	// test wants the stop to land in.
	cr := crCreator{mkdir: true}
	// One directory per creator: the kernel serialises creates in one
	// directory (its inode lock), and the point is to catch creates
	// holding their locks at the stop.
	cr.run(a, creators, "w", func(k int) string { return fmt.Sprintf("d/s%d", k) })
	time.Sleep(1500 * time.Millisecond)
	a.Signal(syscall.SIGSTOP)
	stopped := time.Now()
	dead := crWaitDeclaredDead(t, f, sessA.ID, stopped, crBound+10*time.Second)
	t.Logf("A declared dead %s after SIGSTOP", dead.Round(time.Millisecond))
	rm := crRun(time.Minute, b.Dir, "rm", "-rf", "d")
	if rm.err != nil {
		t.Errorf("rm -rf d in B while A is stopped: %v %s", rm.err, rm.out)
	}
	t.Logf("REPORT %s: rm -rf d in B (A declared dead) took %s", t.Name(), rm.took.Round(time.Millisecond))
	a.Signal(syscall.SIGCONT)
	woke := time.Now()
	time.Sleep(time.Second) // let the creators meet the missing d
	ops := cr.finish(t)

	var acked, inflight, okPending []string
	eio := 0
	for _, op := range ops {
		if op.err == nil && op.end.Before(stopped) {
			acked = append(acked, op.name)
		}
		// A create (the locked operation) pending across the stop.
		if op.start.Before(stopped) && op.created.After(woke) {
			res := crErrno(op.err)
			if op.step != "create" {
				// Legitimate when its last request (the release) was
				// applied before the stop and only the answer was
				// pending; not if it wrote after B removed its parent
				// (checked against the orphans below).
				res = "ok"
				okPending = append(okPending, "/"+op.path)
			}
			inflight = append(inflight, op.path+": "+res)
		}
		if op.end.After(woke) && errors.Is(op.err, syscall.EIO) {
			eio++
		}
	}
	t.Logf("REPORT %s: %d creates acknowledged before the stop; creates pending across the stop: %s; EIO after waking: %d",
		t.Name(), len(acked), strings.Join(inflight, ", "), eio)
	crWaitLog(t, a, "started a new session", 15*time.Second)

	// Quiescence: no lock, record or intent. Orphans are reported.
	var probs, orphans []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		probs, orphans, _ = crIndex(t, f, false)
		if len(probs) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(probs) > 0 {
		t.Errorf("index after A woke:\n  %s", crCap(probs, 20))
	}
	t.Logf("REPORT %s: orphan path documents (parent missing) left in the index: %d %s", t.Name(), len(orphans), crCap(orphans, 5))
	for _, p := range okPending {
		for _, o := range orphans {
			if strings.HasPrefix(o, fmt.Sprintf("%q", p)) {
				t.Errorf("the create of %s reported success, but wrote after B removed its parent (an orphan)", p)
			}
		}
	}

	// A new d (and new d/sK) must not show anything of the old ones.
	want := newCrTree()
	for k := 0; k < creators; k++ {
		want.dirs[fmt.Sprintf("d/s%d", k)] = true
		if err := os.MkdirAll(b.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range []*mounttest.Mount{b, a} {
		if probs := crVerifyMount(m, want, false); len(probs) > 0 {
			t.Errorf("new d/sK directories, listed through %s, show files of the old ones:\n  %s", m.Dir, crCap(probs, 10))
		}
	}
	if rm := crRun(time.Minute, b.Dir, "rm", "-r", "d"); rm.err != nil {
		t.Errorf("rm -r of the new d: %v %s", rm.err, rm.out)
	}
	// Orphans were reported above; everything else must hold.
	probs, _, notes := crIndex(t, f, true)
	probs = append(probs, crVerifyMount(b, newCrTree(), true)...)
	if len(probs) > 0 {
		t.Errorf("final check:\n  %s", crCap(probs, 20))
	}
	if len(notes) > 0 {
		t.Logf("REPORT %s: leaks: %s", t.Name(), strings.Join(notes, "; "))
	}
}

// TestReviewRmdirAfterCreatorKilled (LOCKING-REVIEW [5]): a mount creating
// files in d is killed at a random point between its writes; another mount
// then removes d with rm -rf, which must succeed (not ENOTEMPTY forever,
// not an orphaned subtree). esfs keeps no child count (rmdir refreshes and
// searches), so this checks that the search-based emptiness test holds up.
func TestReviewRmdirAfterCreatorKilled(t *testing.T) {
	f := mounttest.NewFS(t)
	b := crMount(t, f, nil)
	a := crMount(t, f, nil)
	if err := os.Mkdir(b.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 8; k++ {
		if err := os.Mkdir(b.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var cr crCreator
	cr.run(a, 8, "w", func(k int) string { return fmt.Sprintf("d/s%d", k) })
	time.Sleep(1500 * time.Millisecond)
	a.Kill()
	killed := time.Now()
	ops := cr.finish(t)
	acked := 0
	for _, op := range ops {
		if op.err == nil {
			acked++
		}
	}
	// Listings of another mount's changes lag the index refresh interval
	// (1s, README "Consistency model"): rm -r lists first, so wait that out.
	time.Sleep(1500 * time.Millisecond)
	rm := crRun(time.Minute, b.Dir, "rm", "-rf", "d")
	t.Logf("REPORT %s: %d files acknowledged before the kill; rm -rf d in B: %v after %s (%s after the kill) %s",
		t.Name(), acked, rm.err, rm.took.Round(time.Millisecond), time.Since(killed).Round(time.Millisecond), strings.TrimSpace(rm.out))
	if rm.err != nil {
		t.Errorf("rm -rf d after the creator died: %v %s", rm.err, rm.out)
	}
	if took, ok := crWaitClean(t, f, b, newCrTree(), killed, crBound+20*time.Second); ok {
		t.Logf("clean %s after the kill", took.Round(time.Millisecond))
	}
	crFinalCheck(t, f, b, newCrTree())
}

// TestReviewHotAncestorRelease (LOCKING-REVIEW [12], [3]): many creates
// at once below one directory, from two mounts, make the lock document of
// that directory hot (every create writes its shared entry there twice).
// No mount is paused or cut off, so every create must report its true
// outcome (no EIO), and no lock entry may outlive its operation: once the
// creators stop, no lock document is left and the directory can be
// removed at once.
func TestReviewHotAncestorRelease(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	const per = 8
	for k := 0; k < 2*per; k++ {
		if err := os.MkdirAll(a.Path("d", fmt.Sprintf("s%d", k)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ca, cb := crCreator{mkdir: true}, crCreator{mkdir: true}
	ca.run(a, per, "a", func(k int) string { return fmt.Sprintf("d/s%d", k) })
	cb.run(b, per, "b", func(k int) string { return fmt.Sprintf("d/s%d", per+k) })
	time.Sleep(4 * time.Second)
	ops := append(ca.finish(t), cb.finish(t)...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	paths := make([]string, len(ops))
	for i, op := range ops {
		paths[i] = "/" + op.path
	}
	res, err := f.Store.GetDentries(ctx, paths)
	if err != nil {
		t.Fatal(err)
	}
	ok, bad := 0, map[string]int{}
	var wrong []string
	for i, op := range ops {
		exists := res[i].Err == nil
		if op.err == nil {
			ok++
			if !exists {
				wrong = append(wrong, fmt.Sprintf("%s reported success but does not exist", op.path))
			}
			continue
		}
		bad[crErrno(op.err)]++
		if exists {
			wrong = append(wrong, fmt.Sprintf("%s reported %s but exists", op.path, crErrno(op.err)))
		}
	}
	t.Logf("REPORT %s: %d mkdirs below one directory from two mounts in 4s: %d ok, failures by errno %v", t.Name(), len(ops), ok, bad)
	if len(bad) > 0 || len(wrong) > 0 {
		t.Errorf("with no mount paused or cut off, creates failed (%v); outcomes that disagree with the index:\n  %s", bad, crCap(wrong, 10))
	}
	var probs []string
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(200 * time.Millisecond) {
		if probs, _, _ = crIndex(t, f, false); len(probs) == 0 {
			break
		}
	}
	if len(probs) > 0 {
		// Seen: `rm -rf d` then fails with EIO after ~45s (its rmdir waits
		// for X on /d behind the leftover shared entries of live
		// sessions until its request deadline). Not worth the wait here.
		t.Fatalf("after the creators stopped (both mounts alive):\n  %s", crCap(probs, 10))
	}
	rm := crRun(time.Minute, b.Dir, "rm", "-rf", "d")
	t.Logf("REPORT %s: rm -rf d afterwards: %v in %s %s", t.Name(), crErrno(rm.err), rm.took.Round(time.Millisecond), strings.TrimSpace(rm.out))
	if rm.err != nil {
		t.Errorf("rm -rf d after the creators stopped: %v after %s (lock timeout 30s): %s", rm.err, rm.took.Round(time.Millisecond), rm.out)
	}
	crFinalCheck(t, f, b, newCrTree())
}

// TestReviewAppendWhileDirRenamed (LOCKING-REVIEW [4]): one mount appends
// continuously to files in a directory, through a held-open descriptor and
// by opening the path for each append, while another mount renames the
// directory back and forth. Nothing acknowledged may be lost.
func TestReviewAppendWhileDirRenamed(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	if err := os.Mkdir(a.Path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(a.Path("dir", "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var heldData, pathData bytes.Buffer
	var heldErr error
	var pathFails []string
	wg.Add(2)
	go func() { // the held-open appender, fsync every 10 lines
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			line := fmt.Sprintf("held %06d\n", i)
			if _, err := held.WriteString(line); err != nil {
				heldErr = fmt.Errorf("write %d: %w", i, err)
				return
			}
			heldData.WriteString(line)
			if i%10 == 9 {
				if err := held.Sync(); err != nil {
					heldErr = fmt.Errorf("fsync after %d: %w", i, err)
					return
				}
			}
		}
	}()
	go func() { // open, append, close by path, under whichever name the directory has
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			line := fmt.Sprintf("path %06d\n", i)
			var err error
			for _, dir := range []string{"dir", "moved"} {
				var fh *os.File
				fh, err = os.OpenFile(a.Path(dir, "log2"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
				if err != nil {
					continue
				}
				if _, err = fh.WriteString(line); err != nil {
					fh.Close()
					pathFails = append(pathFails, fmt.Sprintf("write %d: %v", i, err))
					break
				}
				if err = fh.Close(); err != nil {
					pathFails = append(pathFails, fmt.Sprintf("close %d: %v", i, err))
					break
				}
				pathData.WriteString(line)
				break
			}
		}
	}()
	names := []string{"dir", "moved"}
	renames := 0
	for i := 0; i < 8; i++ {
		time.Sleep(250 * time.Millisecond)
		from, to := names[i%2], names[(i+1)%2]
		start := time.Now()
		if err := os.Rename(b.Path(from), b.Path(to)); err != nil {
			t.Errorf("rename %d (%s -> %s) in B: %v", i, from, to, err)
			break
		}
		renames++
		t.Logf("rename %s -> %s took %s", from, to, time.Since(start).Round(time.Millisecond))
	}
	time.Sleep(250 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if err := held.Close(); err != nil {
		t.Errorf("closing the held-open file: %v", err)
	}
	if heldErr != nil {
		t.Errorf("held-open appender: %v", heldErr)
	}
	if len(pathFails) > 0 {
		t.Errorf("appends by path failed after opening: %s", crCap(pathFails, 10))
	}
	final := names[renames%2]
	t.Logf("REPORT %s: %d renames in B; %d bytes appended through a held descriptor, %d bytes by path; final name %s",
		t.Name(), renames, heldData.Len(), pathData.Len(), final)
	want := newCrTree()
	want.files[final+"/log"] = heldData.String()
	want.files[final+"/log2"] = pathData.String()
	for _, m := range []*mounttest.Mount{b, a} {
		if probs := crEventually(m, want, "", true); len(probs) > 0 {
			t.Errorf("through %s:\n  %s", m.Dir, crCap(probs, 10))
		}
	}
	crFinalCheck(t, f, b, want)
}

// TestReviewStaleCwdCreate (LOCKING-REVIEW [6]): a shell in another mount
// has its cwd in /a; this mount runs `mv /a /z; mkdir /a`; the shell's
// `touch x` must fail with ESTALE or land in /z, never in the new /a.
// Checked for an uncached mount and for one with the default caches.
func TestReviewStaleCwdCreate(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	c := f.MountAt(t, t.TempDir(), nil, "--lease", crLease.String()) // default caches
	for round, m := range []*mounttest.Mount{b, c} {
		dirA, dirZ := fmt.Sprintf("a%d", round), fmt.Sprintf("z%d", round)
		if err := os.Mkdir(a.Path(dirA), 0o755); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the documented staleness bound, so m sees /a
		cmd := exec.Command("bash", "-c", `read _; touch x; echo "touch rc=$?"`)
		cmd.Dir = m.Path(dirA)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(m.Path(dirA), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(a.Path(dirA), a.Path(dirZ)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(a.Path(dirA), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(in)
		in.Close()
		_ = cmd.Wait()
		nfd, oerr := unix.Openat(fd, "y", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if oerr == nil {
			unix.Close(nfd)
		}
		unix.Close(fd)
		shell := strings.TrimSpace(out.String())
		t.Logf("REPORT %s (%s): shell in the old /%s: %q; openat(dirfd of the old /%s, \"y\", O_CREAT): %s",
			t.Name(), map[int]string{0: "uncached", 1: "default caches"}[round], dirA, shell, dirA, crErrno(oerr))
		if !strings.Contains(shell, "touch rc=0") && !strings.Contains(shell, "Stale file handle") {
			t.Errorf("touch in a stale cwd: %q; want success in /%s or ESTALE", shell, dirZ)
		}
		if oerr != nil && !errors.Is(oerr, syscall.ESTALE) {
			t.Errorf("openat in a stale directory: %v, want ESTALE (or success in /%s)", oerr, dirZ)
		}
		// Wherever they went, never into the new /a.
		for _, n := range []string{"x", "y"} {
			if _, err := os.Lstat(a.Path(dirA, n)); err == nil {
				t.Errorf("%s, created in the stale cwd, landed in the new /%s", n, dirA)
			}
		}
		for n, ok := range map[string]bool{"x": strings.Contains(shell, "touch rc=0"), "y": oerr == nil} {
			if _, err := os.Lstat(a.Path(dirZ, n)); (err == nil) != ok {
				t.Errorf("%s in /%s: %v, but its create reported success=%v", n, dirZ, err, ok)
			}
		}
	}
	probs, orphans, _ := crIndex(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index: %s %s", crCap(probs, 10), crCap(orphans, 10))
	}
	checkInvariants(t, f, nil)
}

// TestReviewRenamePairWithCreates (LOCKING-REVIEW [7], JuiceFS #4800):
// `mv a b/d/e` on one mount and `mv b/d a/c` on another, at once, while
// creates run in both sources. One must win, the other fail cleanly; both
// must answer within a bound (no deadlock until the lock timeout, no
// waiting-marker livelock), and no cycle or lost file may result.
func TestReviewRenamePairWithCreates(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	const bound = 10 * time.Second // the lock timeout is 30s
	var report []string
	for round := 0; round < 3; round++ {
		r := fmt.Sprintf("r%d", round)
		if err := os.MkdirAll(a.Path(r, "a"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(a.Path(r, "b", "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		var ca, cb crCreator
		ca.run(a, 2, "ca", func(int) string { return r + "/a" })
		cb.run(b, 2, "cb", func(int) string { return r + "/b/d" })
		time.Sleep(300 * time.Millisecond)
		go1 := make(chan crResult, 1)
		go2 := make(chan crResult, 1)
		var startGate sync.WaitGroup
		startGate.Add(1)
		go func() {
			startGate.Wait()
			s := time.Now()
			err := os.Rename(a.Path(r, "a"), a.Path(r, "b", "d", "e"))
			go1 <- crResult{err: err, took: time.Since(s)}
		}()
		go func() {
			startGate.Wait()
			s := time.Now()
			err := os.Rename(b.Path(r, "b", "d"), b.Path(r, "a", "c"))
			go2 <- crResult{err: err, took: time.Since(s)}
		}()
		startGate.Done()
		r1 := crWaitResult(t, "mv a b/d/e", go1, time.Minute)
		r2 := crWaitResult(t, "mv b/d a/c", go2, time.Minute)
		time.Sleep(200 * time.Millisecond)
		opsA, opsB := ca.finish(t), cb.finish(t)
		report = append(report, fmt.Sprintf("round %d: mv a b/d/e: %s in %s; mv b/d a/c: %s in %s", round,
			crErrno(r1.err), r1.took.Round(time.Millisecond), crErrno(r2.err), r2.took.Round(time.Millisecond)))
		for _, x := range []crResult{r1, r2} {
			if x.took > bound {
				t.Errorf("round %d: a rename of the pair took %s (%v), bound %s", round, x.took, x.err, bound)
			}
			if errors.Is(x.err, syscall.EAGAIN) {
				t.Errorf("round %d: a rename of the pair gave up waiting for locks: %v", round, x.err)
			}
		}
		if (r1.err == nil) == (r2.err == nil) {
			t.Errorf("round %d: want exactly one rename of the pair to succeed: %v, %v", round, r1.err, r2.err)
			continue
		}
		// Where every acknowledged file must be now.
		want := newCrTree()
		aDir, bDir := r+"/b/d/e", r+"/b/d" // mv a b/d/e won
		want.dirs[r+"/b/d/e"] = true
		if r2.err == nil { // mv b/d a/c won
			aDir, bDir = r+"/a", r+"/a/c"
			want.dirs[r+"/b"], want.dirs[r+"/a/c"] = true, true
			delete(want.dirs, r+"/b/d/e")
		}
		for _, set := range []struct {
			ops []crCreate
			dir string
		}{{opsA, aDir}, {opsB, bDir}} {
			for _, op := range set.ops {
				if op.err == nil {
					want.files[set.dir+"/"+op.name] = crContent(op.name)
				}
			}
		}
		if probs := crEventually(b, want, r, true); len(probs) > 0 {
			t.Errorf("round %d: acknowledged files after the pair:\n  %s", round, crCap(probs, 15))
		}
	}
	t.Logf("REPORT %s:\n  %s", t.Name(), strings.Join(report, "\n  "))
	probs, orphans, _ := crIndex(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index after the pairs: %s\n  %s", crCap(probs, 10), crCap(orphans, 10))
	}
	checkInvariants(t, f, nil)
}

// TestReviewCutOffOwnerSelfFences (LOCKING-REVIEW [8], [3]): the owner of
// a large rename loses its connection to the cluster (a proxy resets every
// connection) mid-stage, for longer than its lease. It must fence itself;
// the survivor declares it dead and undoes (or finishes) the rename; when
// the connection comes back, the owner starts a new session and nothing
// of its old operation is left.
func TestReviewCutOffOwnerSelfFences(t *testing.T) {
	f := mounttest.NewFS(t)
	proxy := mounttest.NewProxy(t, testenv.URL(t))
	b := crMount(t, f, nil)
	a := crMount(t, f, nil, "--es-url", proxy.URL, "--es-timeout", "2s")
	names := crNames(2500)
	crPopulate(t, f, "/src", names)
	sessA := crSession(t, f, a)
	mv := crGo(func() crResult { // rename(2), not mv: see TestZombie
		s := time.Now()
		err := os.Rename(a.Path("src"), a.Path("dst"))
		return crResult{err: err, took: time.Since(s), end: time.Now()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var op store.OpRecord
	for op.ID == "" {
		recs, err := f.Store.SearchOps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Owner == sessA.ID && r.Src == "/src" {
				op = r
			}
		}
		if time.Since(start) > time.Minute {
			t.Fatal("A's rename record did not appear within a minute")
		}
	}
	proxy.SetUp(false)
	cut := time.Now()
	t.Logf("cut A off %s after its rename started; its operation was %s when seen", cut.Sub(start).Round(time.Millisecond), op.State)
	r := crWaitResult(t, "A's rename while cut off", mv, time.Minute)
	t.Logf("REPORT %s: A's rename(2) while cut off: %v, %s after the cut", t.Name(), r.err, r.end.Sub(cut).Round(time.Millisecond))

	// B must recover while A is still cut off.
	var probs []string
	var took time.Duration
	for {
		probs, _, _ = crIndex(t, f, false)
		took = time.Since(cut)
		if len(probs) == 0 || took > crBound+30*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(probs) > 0 {
		t.Fatalf("B did not recover A's rename while A was cut off:\n  %s", crCap(probs, 20))
	}
	if took > crBound {
		t.Errorf("recovery took %s after the cut, bound %s", took.Round(time.Millisecond), crBound)
	}
	rec, err := f.Store.GetOp(ctx, op.ID)
	t.Logf("REPORT %s: B cleaned up A's rename %s after the cut; record now %s aborted=%v owner=%s (%v)",
		t.Name(), took.Round(10*time.Millisecond), rec.State, rec.Aborted, rec.Owner, err)
	want := newCrTree().add("src", names)
	if rec.State == store.OpDone && !rec.Aborted {
		want = newCrTree().add("dst", names)
		if r.err != nil {
			t.Logf("REPORT %s: the rename happened but A's rename(2) reported %v (an unknown outcome reported as an error)", t.Name(), r.err)
		}
	} else if r.err == nil {
		t.Errorf("A's rename(2) reported success but the rename was rolled back")
	}
	if probs := crEventually(b, want, "", false); len(probs) > 0 {
		t.Errorf("B's view after recovery:\n  %s", crCap(probs, 20))
	}
	if time.Since(cut) < 2*crLease {
		time.Sleep(2*crLease - time.Since(cut))
	}
	if !strings.Contains(a.Log(), "heartbeat failed") {
		t.Errorf("A's log does not show its heartbeat failing while cut off")
	}

	proxy.SetUp(true)
	restored := time.Now()
	crWaitLog(t, a, "started a new session", 30*time.Second)
	t.Logf("REPORT %s: A started a new session %s after the connection came back", t.Name(), time.Since(restored).Round(time.Millisecond))
	if err := os.WriteFile(a.Path("after-a"), []byte("A is back\n"), 0o644); err != nil {
		t.Errorf("a create in A after it came back: %v", err)
	}
	want.files["after-a"] = "A is back\n"
	if _, ok := crWaitClean(t, f, b, want, time.Now(), 20*time.Second); ok {
		crFinalCheck(t, f, b, want)
	}
	if probs := crEventually(a, want, "", false); len(probs) > 0 {
		t.Errorf("A's view after it came back:\n  %s", crCap(probs, 20))
	}
}

// TestReviewGitCommitLoopTwoMounts (LOCKING-REVIEW [9]): one repository,
// committed to alternately from two mounts (index.lock -> index, ref locks:
// renames over existing files), then git fsck and a clean status from both.
func TestReviewGitCommitLoopTwoMounts(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	env := "export HOME=" + crQ(t.TempDir()) + " GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'\n"
	start := time.Now()
	mounttest.Sh(t, a.Dir, env+`mkdir repo && git -C repo init -q -b main
git -C repo config user.name 'Esfs Test'
git -C repo config user.email test@esfs.invalid
git -C repo config gc.auto 0
git -C repo config maintenance.auto false`) // no background gc: it only costs time here
	const rounds = 10
	for i := 0; i < rounds; i++ {
		if i > 0 && i%5 == 0 {
			t.Logf("%d rounds in %s", i, time.Since(start).Round(100*time.Millisecond))
		}
		for _, m := range []struct {
			mt   *mounttest.Mount
			name string
		}{{a, "a"}, {b, "b"}} {
			mounttest.Sh(t, m.mt.Dir, env+fmt.Sprintf(`printf '%%s\n' %s-%d > repo/%s-%d.txt
echo %s-%d >> repo/shared.txt
git -C repo add -A
git -C repo commit -q -m %s-%d`, m.name, i, m.name, i, m.name, i, m.name, i))
		}
	}
	for _, m := range []*mounttest.Mount{a, b} {
		mounttest.Sh(t, m.Dir, env+"git -C repo fsck --full --strict --no-progress")
		if st := mounttest.Sh(t, m.Dir, env+"git -C repo status --porcelain"); st != "" {
			t.Errorf("git status through %s:\n%s", m.Dir, st)
		}
		if n := strings.Count(mounttest.Sh(t, m.Dir, env+"git -C repo log --format=%s"), "\n"); n != 2*rounds {
			t.Errorf("git log through %s shows %d commits, want %d", m.Dir, n, 2*rounds)
		}
	}
	t.Logf("REPORT %s: %d commits alternating between two mounts + fsck in %s", t.Name(), 2*rounds, time.Since(start).Round(100*time.Millisecond))
	probs, orphans, notes := crIndex(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index after the git loop: %s\n  %s", crCap(probs, 10), crCap(orphans, 10))
	}
	if len(notes) > 0 {
		t.Logf("REPORT %s: leaks: %s", t.Name(), strings.Join(notes, "; "))
	}
	checkInvariants(t, f, nil)
}

// TestReviewRemoteCpAfterRename (LOCKING-REVIEW [10]): right after a
// directory rename returns on one mount, another (uncached) mount copies
// the new path with cp -r; the copy must be the whole tree.
func TestReviewRemoteCpAfterRename(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	local := filepath.Join(t.TempDir(), "tree")
	for i, n := range crNames(150) {
		p := filepath.Join(local, fmt.Sprintf("l%d", i%3), n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(crContent(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mounttest.Sh(t, "/", "cp -r "+crQ(local)+" "+crQ(a.Path("n0")))
	time.Sleep(1500 * time.Millisecond) // the copy itself is refreshed, whatever the rename does
	var report []string
	failed := 0
	for round := 1; round <= 4; round++ {
		from, to := fmt.Sprintf("n%d", round-1), fmt.Sprintf("n%d", round)
		if err := os.Rename(a.Path(from), a.Path(to)); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "copy")
		cp := crRun(time.Minute, "/", "cp", "-r", b.Path(to), dst)
		diff := crRun(time.Minute, "/", "diff", "-r", local, dst)
		missing := strings.Count(diff.out, "Only in "+local)
		// How long until B's listing of the new directory is complete.
		lag := time.Duration(0)
		for s := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			es, err := os.ReadDir(b.Path(to))
			if err == nil && len(es) == 3 {
				lag = time.Since(s) + cp.took
				break
			}
			if time.Since(s) > 10*time.Second {
				lag = -1
				break
			}
		}
		report = append(report, fmt.Sprintf("round %d: cp %v, diff: %d entries missing from the copy; B lists the new directory completely %s after the rename returned",
			round, crErrno(cp.err), missing, lag.Round(10*time.Millisecond)))
		if cp.err != nil || diff.err != nil {
			failed++
			t.Errorf("round %d: cp -r of %s right after the rename: %v %s\ndiff -r against the tree: %s", round, to, cp.err,
				strings.TrimSpace(cp.out), crCap(strings.Split(strings.TrimSpace(diff.out), "\n"), 8))
		}
	}
	t.Logf("REPORT %s: %d of 4 copies incomplete:\n  %s", t.Name(), failed, strings.Join(report, "\n  "))
}

// crOpenDir opens the directory at the components below base, one openat
// at a time (the whole path may exceed PATH_MAX).
func crOpenDir(base string, comps []string) (int, error) {
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range comps {
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("openat %q: %w", c, err)
		}
		fd = nfd
	}
	return fd, nil
}

// crReadAt reads file name in the directory at base/comps.
func crReadAt(base string, comps []string, name string) (string, error) {
	dfd, err := crOpenDir(base, comps)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY, 0)
	if err != nil {
		return "", fmt.Errorf("openat %q: %w", name, err)
	}
	fh := os.NewFile(uintptr(fd), name)
	defer fh.Close()
	b, err := io.ReadAll(fh)
	return string(b), err
}

// TestReviewLongPathsAndRawNamesRenamed (LOCKING-REVIEW [11]): a directory
// holding a 4096-byte path and names that are not UTF-8 (or that a lossy
// encoding would merge) is renamed; everything must be found at the new
// path. A rename that would push the deep path past 4096 bytes must fail
// cleanly or keep everything reachable.
func TestReviewLongPathsAndRawNamesRenamed(t *testing.T) {
	f := mounttest.NewFS(t)
	a := crMount(t, f, nil)
	b := crMount(t, f, nil)
	var deep []string
	for k := 0; k < 15; k++ {
		c := fmt.Sprintf("%02d", k) + strings.Repeat("x", 253)
		if k == 7 {
			c = "\xff" + c[1:]
		}
		deep = append(deep, c)
	}
	leaf := strings.Repeat("f", 4096-len("/d")-15*256-1) // "/d/<15 x 255>/<leaf>" is exactly 4096 bytes
	if n := len("/d/" + strings.Join(deep, "/") + "/" + leaf); n != store.MaxPath {
		t.Fatalf("deep path is %d bytes", n)
	}
	raw := []string{"a\xffb", "a\xfeb", "\xff", "caf\xe9", "\xef\xbf\xbd", "\xf4\x8f\xbe\x80", "plain"}
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range raw {
		if err := os.WriteFile(a.Path("d", n), []byte(fmt.Sprintf("%x\n", n)), 0o644); err != nil {
			t.Fatalf("creating %q: %v", n, err)
		}
	}
	dfd, err := crOpenDir(a.Path("d"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range deep {
		if err := unix.Mkdirat(dfd, c, 0o755); err != nil {
			t.Fatalf("mkdirat: %v", err)
		}
		nfd, err := unix.Openat(dfd, c, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(dfd)
		if err != nil {
			t.Fatal(err)
		}
		dfd = nfd
	}
	lfd, err := unix.Openat(dfd, leaf, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	unix.Close(dfd)
	if err != nil {
		t.Fatalf("creating the 4096-byte path: %v", err)
	}
	if _, err := unix.Write(lfd, []byte("deep\n")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Close(lfd); err != nil {
		t.Fatal(err)
	}

	check := func(m *mounttest.Mount, dir string) []string {
		var probs []string
		es, err := os.ReadDir(m.Path(dir))
		if err != nil {
			return []string{fmt.Sprintf("listing %s: %v", dir, err)}
		}
		got := map[string]bool{}
		for _, e := range es {
			got[e.Name()] = true
		}
		for _, n := range append(append([]string{}, raw...), deep[0]) {
			if !got[n] {
				probs = append(probs, fmt.Sprintf("%s: %q not listed", dir, n))
			}
		}
		if len(es) != len(raw)+1 {
			probs = append(probs, fmt.Sprintf("%s lists %d entries, want %d", dir, len(es), len(raw)+1))
		}
		for _, n := range raw {
			if b, err := os.ReadFile(m.Path(dir, n)); err != nil || string(b) != fmt.Sprintf("%x\n", n) {
				probs = append(probs, fmt.Sprintf("%s/%q: %q %v", dir, n, b, err))
			}
		}
		if s, err := crReadAt(m.Path(dir), deep, leaf); err != nil || s != "deep\n" {
			probs = append(probs, fmt.Sprintf("the deep file below %s: %q %v", dir, s, err))
		}
		return probs
	}
	// Listings of another mount's changes lag the refresh interval (README
	// "Consistency model"; TestReviewRemoteCpAfterRename is about that):
	// here allow the documented bound.
	eventually := func(m *mounttest.Mount, dir string) []string {
		var probs []string
		for start := time.Now(); time.Since(start) < crStale; time.Sleep(100 * time.Millisecond) {
			if probs = check(m, dir); len(probs) == 0 {
				break
			}
		}
		return probs
	}
	if probs := eventually(b, "d"); len(probs) > 0 {
		t.Fatalf("before the rename:\n  %s", crCap(probs, 10))
	}
	if err := os.Rename(b.Path("d"), b.Path("e")); err != nil {
		t.Fatalf("renaming d to e: %v", err)
	}
	for _, m := range []*mounttest.Mount{a, b} {
		if probs := eventually(m, "e"); len(probs) > 0 {
			t.Errorf("after renaming d to e, through %s:\n  %s", m.Dir, crCap(probs, 10))
		}
	}
	// One byte longer: the deep path would be 4097 bytes.
	err = os.Rename(a.Path("e"), a.Path("ee"))
	t.Logf("REPORT %s: renaming e to ee (deep path would be 4097 bytes): %s", t.Name(), crErrno(err))
	final := "e"
	if err == nil {
		final = "ee"
	} else if !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("renaming e to ee: %v, want ENAMETOOLONG (or success with everything reachable)", err)
	}
	for _, m := range []*mounttest.Mount{a, b} {
		if probs := eventually(m, final); len(probs) > 0 {
			t.Errorf("after renaming e to ee (%v), through %s:\n  %s", err, m.Dir, crCap(probs, 10))
		}
	}
	probs, orphans, _ := crIndex(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index: %s\n  %s", crCap(probs, 10), crCap(orphans, 10))
	}
	checkInvariants(t, f, nil)
}

// TestReviewTakerKilledMidRollForward (LOCKING-REVIEW [1,2]): the owner of
// a large directory rename dies right after its commit; the mount that
// takes the record over dies too, halfway through rolling it forward (some
// documents finished, most not). A third mount must take the record over
// from the second (epoch 3) and finish the rename: every file at the new
// path exactly once, nothing left at the old one.
func TestReviewTakerKilledMidRollForward(t *testing.T) {
	f := mounttest.NewFS(t)
	names := crNames(5000)
	crPopulate(t, f, "/src", names)
	b := crMount(t, f, []string{"ESFS_CRASH_POINT=resolve-after-first-page"})
	a := crMount(t, f, []string{"ESFS_CRASH_POINT=rename-after-commit"})
	mv := crGo(func() crResult {
		err := os.Rename(a.Path("src"), a.Path("dst"))
		return crResult{err: err, end: time.Now()}
	})
	if _, ok := a.WaitExit(2 * time.Minute); !ok {
		t.Fatal("mount A did not die after its commit")
	}
	a.Kill()
	r := crWaitResult(t, "A's rename", mv, time.Minute)
	t.Logf("A's rename(2) when A died: %v", r.err)
	// B, the only survivor, takes over and dies after the first page of
	// its roll-forward.
	if _, ok := b.WaitExit(crBound + time.Minute); !ok {
		t.Fatalf("mount B did not die during its roll-forward:\n%s", b.Log())
	}
	died := time.Now()
	b.Kill()
	if !strings.Contains(b.Log(), "took over an operation of a dead mount") || !strings.Contains(b.Log(), "crash point resolve-after-first-page reached") {
		t.Fatalf("B died without taking over and starting the roll-forward:\n%s", b.Log())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	recs, err := f.Store.SearchOps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].State != store.OpCommitted || recs[0].Epoch != 2 {
		t.Fatalf("after B died the record should be COMMITTED at epoch 2: %+v", recs)
	}
	probs, _, _ := crIndex(t, f, false)
	t.Logf("B left %d problems (documents half rolled forward), e.g. %s", len(probs), crCap(probs, 2))
	if len(probs) == 0 {
		t.Fatal("B finished everything before dying: the test provoked nothing")
	}
	c := crMount(t, f, nil)
	want := newCrTree().add("dst", names)
	took, ok := crWaitClean(t, f, c, want, died, crBound+30*time.Second+time.Duration(len(names))*crPerDoc)
	t.Logf("REPORT %s: C finished the rename %s after B died", t.Name(), took.Round(10*time.Millisecond))
	if !ok {
		t.FailNow()
	}
	if rec, err := f.Store.GetOp(ctx, recs[0].ID); err != nil || rec.State != store.OpDone || rec.Epoch != 3 {
		t.Errorf("after C's recovery the record is %+v (%v); want DONE at epoch 3", rec, err)
	}
	crFinalCheck(t, f, c, want)
}
