package mounttest

// The model of an expected tree that the crash, rename and failure tests
// keep (Tree) and its verification: through a mount (VerifyMount), against
// the index itself (IndexProblems), and both until clean (WaitClean,
// FinalCheck).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// Content is the content the tests give the file at relative path name.
func Content(name string) string { return "content of " + name + "\n" }

// Names returns n relative file names, one in ten in a few
// subdirectories.
func Names(n int) []string {
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

// Tree is an expected visible tree, by path relative to the mount (no
// leading slash): files with their contents and directories. Parents are
// implied. The listing of every directory in it (the root included) must
// be exactly its children, so an entry that shows twice, or in two places,
// or that is missing, is caught.
type Tree struct {
	Files map[string]string
	Dirs  map[string]bool
}

// NewTree returns an empty tree (the root directory only).
func NewTree() Tree { return Tree{Files: map[string]string{}, Dirs: map[string]bool{}} }

// Add puts files prefix/name with Content(name) in the tree, and prefix
// itself as a directory.
func (w Tree) Add(prefix string, names []string) Tree {
	w.Dirs[prefix] = true
	for _, n := range names {
		w.Files[prefix+"/"+n] = Content(n)
	}
	return w
}

// Count is the number of files and directories in the tree.
func (w Tree) Count() int { return len(w.Files) + len(w.Dirs) }

// children maps every directory ("" is the root) to its entries.
func (w Tree) children() map[string]map[string]bool {
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
	for p := range w.Files {
		note(p)
	}
	for p := range w.Dirs {
		if out[p] == nil {
			out[p] = map[string]bool{}
		}
		note(p)
	}
	return out
}

// JoinCapped shortens a list for a message.
func JoinCapped(list []string, n int) string {
	if len(list) <= n {
		return strings.Join(list, "\n  ")
	}
	return strings.Join(list[:n], "\n  ") + fmt.Sprintf("\n  ... and %d more", len(list)-n)
}

// VerifyMount compares what mount m shows with w: every directory's
// listing, and with contents, every file's bytes. It returns the problems.
func VerifyMount(m *Mount, w Tree, contents bool) []string {
	return verifyUnder(m, w, "", contents)
}

// verifyUnder is VerifyMount for the directory under and below it only
// ("" is everything).
func verifyUnder(m *Mount, w Tree, under string, contents bool) []string {
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
			probs = append(probs, fmt.Sprintf("/%s: %d of %d entries missing from the listing: %s", dir, len(missing), len(want), JoinCapped(missing, 5)))
		}
		if len(extra) > 0 {
			probs = append(probs, fmt.Sprintf("/%s: %d unexpected entries listed: %s", dir, len(extra), JoinCapped(extra, 5)))
		}
	}
	if contents {
		// Reading a file through an uncached mount costs several round
		// trips: for big trees, read a fixed sample of 300 (the listings
		// above already cover every name).
		var paths []string
		for p := range w.Files {
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
			c := w.Files[p]
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

// VerifyEventually is verifyUnder retried for up to StaleWithin: for views of
// another mount's changes, which the README allows to lag (listings follow
// the index refresh interval).
func VerifyEventually(m *Mount, w Tree, under string, contents bool) []string {
	var probs []string
	for start := time.Now(); time.Since(start) < StaleWithin; time.Sleep(100 * time.Millisecond) {
		if probs = verifyUnder(m, w, under, contents); len(probs) == 0 {
			break
		}
	}
	return probs
}

// IndexProblems checks the index itself (not through a mount; see
// CheckIndex). problems are invariant violations; orphans are
// path documents whose parent document is missing (kept apart so that a
// test can tolerate and report them). With full it also checks that every
// path's inode exists and reports, in notes, inode documents no path names
// and data chunks of missing inodes (leaks, which only cost space).
func IndexProblems(t testing.TB, f *FS, full bool) (problems, orphans, notes []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// A live mount keeps the shared locks of its last creates a moment (a
	// lease, given back 0.3 s after its last use): wait for them.
	var rep IndexReport
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		rep, err = CheckIndex(ctx, f, IndexCheck{Inodes: full, Data: full})
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

// allProblems is every violation: the index's (orphans included) and what
// mount m shows compared with w (listings only unless contents).
func allProblems(t testing.TB, f *FS, m *Mount, w Tree, contents, full bool) []string {
	t.Helper()
	probs, orphans, _ := IndexProblems(t, f, full)
	for _, o := range orphans {
		probs = append(probs, "orphan path "+o)
	}
	if m != nil {
		probs = append(probs, VerifyMount(m, w, contents)...)
	}
	return probs
}

// WaitClean polls until the index is clean and mount m shows exactly w,
// and returns how long after since that was first seen. On timeout it
// reports the last problems and returns ok=false.
func WaitClean(t testing.TB, f *FS, m *Mount, w Tree, since time.Time, limit time.Duration) (time.Duration, bool) {
	t.Helper()
	for {
		probs := allProblems(t, f, m, w, false, false)
		if len(probs) == 0 {
			return time.Since(since), true
		}
		if time.Since(since) > limit {
			t.Errorf("not clean %s after the event; problems:\n  %s", limit, JoinCapped(probs, 25))
			return time.Since(since), false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FinalCheck is the thorough check once a scenario settled: index with
// inodes, and every file's content (a sample of big trees) through m; then
// CheckInvariants (invariants.go), with the exact set of files
// when the tree is small enough to read whole through a mount.
func FinalCheck(t testing.TB, f *FS, m *Mount, w Tree) {
	t.Helper()
	if probs := allProblems(t, f, m, w, true, true); len(probs) > 0 {
		t.Errorf("final check through %s:\n  %s", m.Dir, JoinCapped(probs, 25))
	}
	if _, _, notes := IndexProblems(t, f, true); len(notes) > 0 {
		t.Logf("REPORT %s: leaks: %s", t.Name(), strings.Join(notes, "; "))
	}
	var want map[string]string
	if len(w.Files) <= 500 {
		want = map[string]string{}
		for p, c := range w.Files {
			want["/"+p] = c
		}
	}
	CheckInvariants(t, f, want)
}
