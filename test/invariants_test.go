package test

// The checks tests end with: the index itself (checkInvariants, crIndex,
// both on mounttest.CheckIndex) and the tree a mount shows compared with a model of the acknowledged
// operations (crTree for the crash and rename tests, lkWant for the races
// and the storm).

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

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

// crIndex checks the index itself (not through a mount; see
// mounttest.CheckIndex). problems are invariant violations; orphans are
// path documents whose parent document is missing (kept apart so that a
// test can tolerate and report them). With full it also checks that every
// path's inode exists and reports, in notes, inode documents no path names
// and data chunks of missing inodes (leaks, which only cost space).
func crIndex(t *testing.T, f *mounttest.FS, full bool) (problems, orphans, notes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A live mount keeps the shared locks of its last creates a moment (a
	// lease, given back 0.3 s after its last use): wait for them.
	var rep mounttest.IndexReport
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rep, err = mounttest.CheckIndex(ctx, f, mounttest.IndexCheck{Inodes: full, Data: full})
		if err != nil {
			return []string{err.Error()}, nil, nil
		}
		if rep.Locks == 0 || time.Now().After(deadline) {
			break
		}
	}
	if n := len(rep.LeakedInodes); n > 0 {
		notes = append(notes, fmt.Sprintf("%d inode documents named by no path (leaked)", n))
	}
	if rep.StrayChunks > 0 {
		notes = append(notes, fmt.Sprintf("%d data chunks of inodes no path names (leaked)", rep.StrayChunks))
	}
	return rep.Problems, rep.Orphans, notes
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

// checkInvariants, which every multi-mount, rename and crash test ends
// with, judges the index with mounttest.CheckIndex (every inode read; an
// orphan or a leaked inode is a problem here) and, optionally, the regular
// files and their contents, as a fresh uncached mount shows them, against
// the test's model of acknowledged operations, and the directories too;
// then it checks that esfs fsck agrees.
//
// Intents, locks and records of a mount that died are cleaned up by a live
// mount's sweeper only after the dead session's lease plus grace, so the
// checker mounts a fresh filesystem view (whose sweeper does that work) and
// polls until those are gone, with a deadline, before judging.

// invariantLimit bounds the wait for leftovers of dead mounts to be swept.
const invariantLimit = 90 * time.Second

// lkNoCache turns off every cache of a mount, so that what another mount
// did is visible at once.
var lkNoCache = []string{"--attr-timeout=0", "--entry-timeout=0", "--negative-timeout=0", "--cache-ttl=0"}

// lkWant is what a test expects the tree to hold at the end. Paths are
// absolute, as in the index ("/a/b").
type lkWant struct {
	// files: every regular file and its content, exactly (nil: unchecked).
	files map[string]string
	// dirs: every directory besides "/", exactly (nil: unchecked).
	dirs map[string]bool
	// maybe: files whose last operation had an unknown outcome, by
	// content: the paths where that content may be ("" = it may be absent).
	maybe map[string][]string
	// unknown: the test could not tell what the tree must hold (it
	// reported why); only the structural invariants are checked.
	unknown bool
}

// giveUp marks the expected tree as unknowable from here on.
func (w *lkWant) giveUp() { *w = lkWant{unknown: true} }

// checkInvariants checks the invariants above on f's index, after waiting
// for quiescence, and, when want != nil, that the regular files with their
// contents are exactly want (path -> content). Call it once the test's own
// mounts are unmounted or killed.
func checkInvariants(t *testing.T, f *mounttest.FS, want map[string]string) {
	t.Helper()
	checkInvariantsWant(t, f, lkWant{files: want})
}

// checkInvariantsWant is checkInvariants with directories and uncertain
// files.
func checkInvariantsWant(t *testing.T, f *mounttest.FS, want lkWant) {
	t.Helper()
	start := time.Now()
	// A live mount whose sweeper recovers what dead mounts left, and
	// through which the tree is read (no cache: nothing it shows is older
	// than the index).
	m := f.Mount(t, append([]string{"--lease", "2s"}, lkNoCache...)...)
	ctx, cancel := context.WithTimeout(context.Background(), invariantLimit+time.Minute)
	defer cancel()

	var rep mounttest.IndexReport
	var err error
	deadline := time.Now().Add(invariantLimit)
	for {
		rep, err = mounttest.CheckIndex(ctx, f, mounttest.IndexCheck{Inodes: true})
		if err != nil {
			t.Fatalf("reading the index for the invariant check: %v", err)
		}
		if rep.Settled() || time.Now().After(deadline) {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("invariants: %d paths, %d inodes, index settled after %s", rep.Paths, rep.Inodes, time.Since(start).Round(time.Millisecond))
	// Here orphans and leaked inodes are problems like the others.
	problems := append([]string(nil), rep.Problems...)
	for _, o := range rep.Orphans {
		problems = append(problems, "orphan path "+o)
	}
	problems = append(problems, rep.LeakedInodes...)
	for i, p := range problems {
		if i == 60 {
			t.Errorf("invariant: ... and %d more problems", len(problems)-i)
			break
		}
		t.Errorf("invariant: %s", p)
	}

	if want.unknown {
		t.Log("the expected tree is unknown (see above): only the structural invariants are checked")
	} else if want.files != nil || want.dirs != nil || want.maybe != nil {
		files, dirs, err := lkWalk(m.Dir)
		if err != nil {
			t.Errorf("walking the tree through a fresh mount: %v", err)
		}
		lkCompare(t, want, files, dirs)
		// The index must agree with the mount: once no intent is left,
		// the visible files are the file documents.
		if rep.Intents == 0 {
			for p := range rep.Files {
				if _, ok := files[p]; !ok {
					t.Errorf("invariant: the index holds file %q but the mount does not show it", p)
				}
			}
			for p := range files {
				if !rep.Files[p] {
					t.Errorf("invariant: the mount shows file %q but the index holds no such document", p)
				}
			}
		}
	}
	m.Unmount(t)
	lkFsckAgrees(t, f, len(problems) == 0)
}

// lkFsckAgrees runs `esfs fsck` and checks that it agrees with the
// checker: exit 0 exactly when the checker found the index clean.
func lkFsckAgrees(t *testing.T, f *mounttest.FS, clean bool) {
	t.Helper()
	out, err := f.Run("fsck")
	switch {
	case clean && err != nil && onlyLeftoverData(out):
		// The checker does not judge data chunks: a mount killed between
		// its chunks and its inode update leaves data no inode covers,
		// which fsck reports and --repair removes.
		t.Logf("REPORT %s: fsck finds leftover data of a dead mount:\n%s", t.Name(), out)
		if out, err := f.Run("fsck", "--repair"); err == nil || !strings.Contains(out, "all repaired") {
			t.Errorf("esfs fsck --repair of leftover data (%v):\n%s", err, out)
		}
		if out, err := f.Run("fsck"); err != nil {
			t.Errorf("esfs fsck after --repair still reports problems (%v):\n%s", err, out)
		}
	case clean && err != nil:
		t.Errorf("esfs fsck reports problems (%v) where the invariant checker finds none:\n%s", err, out)
	case !clean && err == nil:
		t.Errorf("esfs fsck exits 0 where the invariant checker finds problems (above):\n%s", out)
	default:
		t.Logf("esfs fsck agrees with the invariant checker (clean=%v)", clean)
	}
}

// onlyLeftoverData reports whether every problem in fsck's output is
// leftover data of a dead mount.
func onlyLeftoverData(out string) bool {
	found := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "leftover data:") && strings.Contains(l, "dead or ended mount"):
			found = true
		case strings.Contains(l, ": ") && !strings.HasPrefix(l, "in flight"):
			return false // another kind of problem
		}
	}
	return found
}

// lkWalk reads the tree below root through a mount: regular files with
// their contents, and directories, by absolute path inside the mount.
func lkWalk(root string) (files map[string]string, dirs map[string]bool, err error) {
	files, dirs = map[string]string{}, map[string]bool{}
	var errs []string
	werr := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			errs = append(errs, err.Error())
			return nil
		}
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		switch {
		case d.IsDir():
			if rel != "/" {
				dirs[rel] = true
			}
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				errs = append(errs, err.Error())
				return nil
			}
			files[rel] = string(b)
		default:
			errs = append(errs, fmt.Sprintf("%s: unexpected type %v", rel, d.Type()))
		}
		return nil
	})
	if werr != nil {
		errs = append(errs, werr.Error())
	}
	if len(errs) > 0 {
		return files, dirs, errors.New(strings.Join(errs, "; "))
	}
	return files, dirs, nil
}

// lkCompare checks the walked tree against want and reports every
// difference; it returns whether there was none.
func lkCompare(t *testing.T, want lkWant, files map[string]string, dirs map[string]bool) bool {
	t.Helper()
	ok := true
	fail := func(format string, a ...any) {
		ok = false
		t.Errorf("tree: "+format, a...)
	}
	if want.files != nil {
		seen := map[string]bool{}
		for _, p := range lkSorted(files) {
			got := files[p]
			if exp, in := want.files[p]; in {
				if got != exp {
					fail("%s holds %q, want %q", p, lkShort(got), lkShort(exp))
				}
				continue
			}
			if paths, maybe := want.maybe[got]; maybe {
				if !lkContains(paths, p) {
					fail("%s holds %q (an operation with unknown outcome), but it may only be at %q", p, lkShort(got), paths)
				}
				seen[got] = true
				continue
			}
			fail("%s (%q) exists but no acknowledged operation made it (an unacknowledged or failed operation had an effect, or a file is duplicated)", p, lkShort(got))
		}
		for _, p := range lkSorted(want.files) {
			if _, in := files[p]; !in {
				fail("%s (%q) is missing: an acknowledged file was lost", p, lkShort(want.files[p]))
			}
		}
		for content, paths := range want.maybe {
			if !seen[content] && !lkContains(paths, "") {
				fail("%q (an operation with unknown outcome) is nowhere, but it should be at one of %q", lkShort(content), paths)
			}
		}
	}
	if want.dirs != nil {
		for _, p := range lkSorted(dirs) {
			if !want.dirs[p] {
				fail("directory %s exists but no acknowledged operation made it", p)
			}
		}
		for _, p := range lkSorted(want.dirs) {
			if !dirs[p] {
				fail("directory %s is missing", p)
			}
		}
	}
	return ok
}

func lkSorted[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func lkContains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func lkShort(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
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
