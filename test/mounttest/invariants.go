package mounttest

// The check every multi-mount, rename and crash test ends with:
// CheckInvariants judges the index with CheckIndex (every inode read; an
// orphan or a leaked inode is a problem here) and, optionally, the regular
// files and their contents, as a fresh uncached mount shows them, against
// the test's model of acknowledged operations (Want), and the directories
// too; then it checks that esfs fsck agrees.
//
// Intents, locks and records of a mount that died are cleaned up by a live
// mount's sweeper only after the dead session's lease plus grace, so the
// checker mounts a fresh filesystem view (whose sweeper does that work) and
// polls until those are gone, with a deadline, before judging.

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

	"github.com/esfs/esfs/store"
)

// invariantLimit bounds the wait for leftovers of dead mounts to be swept.
const invariantLimit = 90 * time.Second

// NoCache turns off every cache of a mount, so that what another mount
// did is visible at once.
var NoCache = []string{"--attr-timeout=0", "--entry-timeout=0", "--negative-timeout=0", "--cache-ttl=0"}

// Want is what a test expects the tree to hold at the end. Paths are
// absolute, as in the index ("/a/b").
type Want struct {
	// Files: every regular file and its content, exactly (nil: unchecked).
	Files map[string]string
	// Dirs: every directory besides "/", exactly (nil: unchecked).
	Dirs map[string]bool
	// Maybe: files whose last operation had an unknown outcome, by
	// content: the paths where that content may be ("" = it may be absent).
	Maybe map[string][]string
	// Unknown: the test could not tell what the tree must hold (it
	// reported why); only the structural invariants are checked.
	Unknown bool
}

// GiveUp marks the expected tree as unknowable from here on.
func (w *Want) GiveUp() { *w = Want{Unknown: true} }

// Add records that round directory root must end up holding tree.
func (w *Want) Add(root string, tree map[string]string) {
	if w.Unknown {
		return
	}
	if w.Files == nil {
		w.Files, w.Dirs = map[string]string{}, map[string]bool{}
	}
	w.Dirs[root] = true
	for p, c := range tree {
		if strings.HasSuffix(p, "/") {
			w.Dirs[root+strings.TrimSuffix(p, "/")] = true
		} else {
			w.Files[root+p] = c
		}
	}
}

// CheckInvariants checks the invariants above on f's index, after waiting
// for quiescence, and, when want != nil, that the regular files with their
// contents are exactly want (path -> content). Call it once the test's own
// mounts are unmounted or killed.
func CheckInvariants(t testing.TB, f *FS, want map[string]string) {
	t.Helper()
	CheckInvariantsWant(t, f, Want{Files: want})
}

// CheckInvariantsWant is CheckInvariants with directories and uncertain
// files.
func CheckInvariantsWant(t testing.TB, f *FS, want Want) {
	t.Helper()
	start := time.Now()
	// A live mount whose sweeper recovers what dead mounts left, and
	// through which the tree is read (no cache: nothing it shows is older
	// than the index).
	m := f.mountAt(t, t.TempDir(), nil, append([]string{"--lease", "2s"}, NoCache...)...)
	ctx, cancel := context.WithTimeout(context.Background(), invariantLimit+time.Minute)
	defer cancel()

	var rep IndexReport
	var err error
	deadline := time.Now().Add(invariantLimit)
	for {
		rep, err = CheckIndex(ctx, f, IndexCheck{Inodes: true})
		if errors.Is(err, store.ErrUnavailable) && time.Now().Before(deadline) {
			// A cluster busy with the other tests beside (a refresh
			// that took over 30 s was seen): what is checked is the
			// index, not how fast the cluster answers.
			t.Logf("reading the index for the invariant check: %v; again", err)
			time.Sleep(time.Second)
			continue
		}
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

	if want.Unknown {
		t.Log("the expected tree is unknown (see above): only the structural invariants are checked")
	} else if want.Files != nil || want.Dirs != nil || want.Maybe != nil {
		files, dirs, err := Walk(m.Dir)
		if err != nil {
			t.Errorf("walking the tree through a fresh mount: %v", err)
		}
		compareTree(t, want, files, dirs)
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
	fsckAgrees(t, f, len(problems) == 0)
}

// fsckAgrees runs `esfs fsck` and checks that it agrees with the
// checker: exit 0 exactly when the checker found the index clean.
func fsckAgrees(t testing.TB, f *FS, clean bool) {
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
// leftover data of a dead mount, or a file it kept open without links.
func onlyLeftoverData(out string) bool {
	found := false
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(l, "leftover data:") && strings.Contains(l, "dead or ended mount"),
			strings.HasPrefix(l, "leftover unlinked file:") && strings.Contains(l, "dead mount"):
			found = true
		case strings.Contains(l, ": ") && !strings.HasPrefix(l, "in flight"):
			return false // another kind of problem
		}
	}
	return found
}

// Walk reads the tree below root through a mount: regular files with
// their contents, and directories, by absolute path inside the mount.
func Walk(root string) (files map[string]string, dirs map[string]bool, err error) {
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

// compareTree checks the walked tree against want and reports every
// difference; it returns whether there was none.
func compareTree(t testing.TB, want Want, files map[string]string, dirs map[string]bool) bool {
	t.Helper()
	ok := true
	fail := func(format string, a ...any) {
		ok = false
		t.Errorf("tree: "+format, a...)
	}
	if want.Files != nil {
		seen := map[string]bool{}
		for _, p := range SortedKeys(files) {
			got := files[p]
			if exp, in := want.Files[p]; in {
				if got != exp {
					fail("%s holds %q, want %q", p, Abbrev(got), Abbrev(exp))
				}
				continue
			}
			if paths, maybe := want.Maybe[got]; maybe {
				if !contains(paths, p) {
					fail("%s holds %q (an operation with unknown outcome), but it may only be at %q", p, Abbrev(got), paths)
				}
				seen[got] = true
				continue
			}
			fail("%s (%q) exists but no acknowledged operation made it (an unacknowledged or failed operation had an effect, or a file is duplicated)", p, Abbrev(got))
		}
		for _, p := range SortedKeys(want.Files) {
			if _, in := files[p]; !in {
				fail("%s (%q) is missing: an acknowledged file was lost", p, Abbrev(want.Files[p]))
			}
		}
		for content, paths := range want.Maybe {
			if !seen[content] && !contains(paths, "") {
				fail("%q (an operation with unknown outcome) is nowhere, but it should be at one of %q", Abbrev(content), paths)
			}
		}
	}
	if want.Dirs != nil {
		for _, p := range SortedKeys(dirs) {
			if !want.Dirs[p] {
				fail("directory %s exists but no acknowledged operation made it", p)
			}
		}
		for _, p := range SortedKeys(want.Dirs) {
			if !dirs[p] {
				fail("directory %s is missing", p)
			}
		}
	}
	return ok
}

// SortedKeys returns the keys of m in order.
func SortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Abbrev cuts s to 60 bytes for a message.
func Abbrev(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
