package test

// Hostile and damaged documents, as the mount meets them: every mount's
// credentials may write any document into the filesystem's indices, and
// a bad write or damage may leave anything there. A document that breaks
// the model answers EIO for the paths it touches, logged with its id,
// and never makes a mount loop, grow without bound, crash or hang; the
// rest of the tree keeps working.

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// hostileLimit bounds each command run against a mount holding a hostile
// document: far past what it takes on a loaded machine, so that reaching
// it means the mount hangs or loops.
const hostileLimit = 90 * time.Second

// hostileMemory is what a mount's resident memory may reach before the
// test kills it: several times a race-built daemon's, far below what a
// loop that allocates takes within the commands' limit.
const hostileMemory = 1 << 30

// runBounded runs a program against a mount, killed after hostileLimit;
// it fails the test if it had to be killed.
func runBounded(t *testing.T, dir, name string, args ...string) mounttest.Result {
	t.Helper()
	r := mounttest.WaitResult(t, name+" "+strings.Join(args, " "),
		mounttest.Background(func() mounttest.Result { return mounttest.Exec(hostileLimit, dir, name, args...) }),
		hostileLimit+time.Minute)
	if r.Took >= hostileLimit {
		t.Fatalf("%s %s did not end within %s (killed): %s", name, args, hostileLimit, r.Out)
	}
	return r
}

// wantEIO checks that a command failed, saying "Input/output error".
func wantEIO(t *testing.T, r mounttest.Result, what string) {
	t.Helper()
	if r.Code == 0 || !strings.Contains(r.Out, "Input/output error") {
		t.Errorf("%s: exit %d, %q; want an Input/output error", what, r.Code, r.Out)
	}
}

// wantOK checks that a command succeeded and printed each of want.
func wantOK(t *testing.T, r mounttest.Result, what string, want ...string) {
	t.Helper()
	if r.Code != 0 {
		t.Errorf("%s: exit %d: %s", what, r.Code, r.Out)
		return
	}
	for _, w := range want {
		if !strings.Contains(r.Out, w) {
			t.Errorf("%s: %q lacks %q", what, r.Out, w)
		}
	}
}

// checkMemory fails the test if a mount's memory passed hostileMemory.
func checkMemory(t *testing.T, w *mounttest.MemWatch, m *mounttest.Mount) {
	t.Helper()
	if peak, killed := w.Peak(); killed {
		t.Fatalf("mount at %s passed %d MiB of memory (killed)", m.Dir, peak>>20)
	} else {
		t.Logf("mount at %s: peak resident memory %d MiB", m.Dir, peak>>20)
	}
}

// wantLoggedOnce checks that one line of m's log names the document id.
func wantLoggedOnce(t *testing.T, m *mounttest.Mount, id string) {
	t.Helper()
	n := 0
	for _, l := range strings.Split(m.Log(), "\n") {
		if strings.Contains(l, id) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d lines of the log of the mount at %s name the document %s, want one:\n%s", n, m.Dir, id, m.Log())
	}
}

// TestHostileRootAlias: a path document naming the root's inode as a
// directory of the root (a directory alias, which a bad write may leave)
// answers EIO for that name, to ls, stat and a lookup below it, within
// the commands' limit, on this mount and on one mounted after; the rest
// of the tree lists and reads, memory stays small, and the log names the
// document once.
func TestHostileRootAlias(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m0 := f.Mount(t)
	runBounded(t, m0.Dir, "sh", "-c", "mkdir -p a/b && echo fine > a/b/file && echo top > top")
	m0.Unmount(t)

	id := store.DocID("/loop")
	putRaw(t, f.URL, f.Index, id, map[string]any{"path": "/loop", "parent": "/", "name": "loop", "ino": 1, "type": "dir"})

	check := func(m *mounttest.Mount, mw *mounttest.MemWatch) {
		t.Helper()
		r := runBounded(t, m.Dir, "ls", "-la", ".")
		if !strings.Contains(r.Out, "a") || !strings.Contains(r.Out, "top") {
			t.Errorf("ls -la of the root: exit %d, %q; want a and top listed", r.Code, r.Out)
		}
		wantEIO(t, runBounded(t, m.Dir, "stat", "loop"), "stat loop")
		wantEIO(t, runBounded(t, m.Dir, "ls", "loop"), "ls loop")
		wantEIO(t, runBounded(t, m.Dir, "stat", "loop/a"), "stat loop/a")
		wantEIO(t, runBounded(t, m.Dir, "ls", "loop/loop/a"), "ls loop/loop/a")
		wantOK(t, runBounded(t, m.Dir, "cat", "a/b/file", "top"), "cat", "fine", "top")
		wantOK(t, runBounded(t, m.Dir, "find", "."), "find", "./a/b/file", "./top")
		wantOK(t, runBounded(t, m.Dir, "sh", "-c", "echo more > a/more && cat a/more"), "write", "more")
		checkMemory(t, mw, m)
	}
	m := f.Mount(t)
	mw := m.WatchMemory(t, hostileMemory)
	check(m, mw)
	m2 := f.Mount(t)
	check(m2, m2.WatchMemory(t, hostileMemory))
	check(m, mw) // again: answered the same, and not logged again

	for _, mm := range []*mounttest.Mount{m, m2} {
		wantLoggedOnce(t, mm, id)
	}
}

// TestHostileDirAlias: a path document naming, as a directory's entry,
// the inode of a directory above it (a second name of a directory inside
// itself) answers EIO for that name, to stat, ls and a lookup below it;
// the rest of the directory and the tree list and read, memory stays
// small, and the log names the document once.
func TestHostileDirAlias(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m0 := f.Mount(t)
	runBounded(t, m0.Dir, "sh", "-c", "mkdir -p a/b/c && echo fine > a/b/c/file")
	fi, err := os.Stat(m0.Path("a"))
	if err != nil {
		t.Fatal(err)
	}
	ino := fi.Sys().(*syscall.Stat_t).Ino
	m0.Unmount(t)

	id := store.DocID("/a/b/up")
	putRaw(t, f.URL, f.Index, id, map[string]any{"path": "/a/b/up", "parent": "/a/b", "name": "up", "ino": ino, "type": "dir"})

	check := func(m *mounttest.Mount, mw *mounttest.MemWatch) {
		t.Helper()
		r := runBounded(t, m.Dir, "ls", "-la", "a/b")
		if !strings.Contains(r.Out, "c") {
			t.Errorf("ls -la a/b: exit %d, %q; want c listed", r.Code, r.Out)
		}
		wantEIO(t, runBounded(t, m.Dir, "stat", "a/b/up"), "stat a/b/up")
		wantEIO(t, runBounded(t, m.Dir, "ls", "a/b/up"), "ls a/b/up")
		wantEIO(t, runBounded(t, m.Dir, "stat", "a/b/up/b/c/file"), "stat a/b/up/b/c/file")
		wantOK(t, runBounded(t, m.Dir, "cat", "a/b/c/file"), "cat", "fine")
		wantOK(t, runBounded(t, m.Dir, "sh", "-c", "echo more > a/b/more && cat a/b/more && ls a"), "write", "more", "b")
		checkMemory(t, mw, m)
	}
	m := f.Mount(t)
	mw := m.WatchMemory(t, hostileMemory)
	check(m, mw)
	m2 := f.Mount(t)
	check(m2, m2.WatchMemory(t, hostileMemory))
	check(m, mw)

	for _, mm := range []*mounttest.Mount{m, m2} {
		wantLoggedOnce(t, mm, id)
	}
}
