package test

// The first walk of a tree this mount has never seen (written by esfs
// import or by another mount): a directory's first listing hands the
// kernel its entries with attributes it keeps (readdirplus, under a read
// delegation asked before the listing), and a walk's next directories are
// read ahead in the background: the walk costs requests per directory and
// per page, not per file, and stays exactly as current as a listing made
// in the foreground.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// firstWalkTree writes, under a new local directory, dirs directories of
// files files each (one in seven of 4,000 bytes, the others of 64), each
// directory with a subdirectory of 5 more; it returns the directory.
func firstWalkTree(t *testing.T, dirs, files int) string {
	t.Helper()
	src := t.TempDir()
	for d := range dirs {
		dir := filepath.Join(src, fmt.Sprintf("d%02d", d))
		if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := range files {
			size := 64
			if i%7 == 3 {
				size = 4000
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), make([]byte, size), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 5 {
			if err := os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("s%d", i)), []byte("sub"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return src
}

// importedFS is a filesystem holding the tree src as /t, written by esfs
// import (no mount has seen it).
func importedFS(t *testing.T, src string) *mounttest.FS {
	t.Helper()
	f := mounttest.NewFS(t)
	if out, err := f.Run("import", src, "/t"); err != nil {
		t.Fatalf("esfs import: %v\n%s", err, out)
	}
	return f
}

// walkLines is GNU find's listing of dir (args its tests): every path
// below it with its type, and a file's size, sorted.
func walkLines(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	out := mounttest.Sh(t, dir, "find . "+strings.Join(args, " ")+` \( \( -type d -printf '%P %y\n' \) -o -printf '%P %y %s\n' \)`)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	slices.Sort(lines)
	return lines
}

// TestFirstWalkCostsPerDirectory: GNU find over a tree written by esfs
// import, on a fresh mount, prints what find prints of the source, and
// asks the cluster a bounded number of requests per directory (about two
// per file before: a lookup's path and inode each); the stats of a second
// walk, and of every file by name, ask nothing more.
func TestFirstWalkCostsPerDirectory(t *testing.T) {
	mounttest.QuickExit(t)
	const dirs, files = 12, 120
	src := firstWalkTree(t, dirs, files)
	f := importedFS(t, src)
	m, metrics := delegMount(t, f)
	total := func() float64 { return callAndAfter(t, metrics) }
	before, counts := total(), requestCounts(t, metrics)
	got := walkLines(t, m.Path("t"), "-type", "f", "-size", "+3k")
	if want := walkLines(t, src, "-type", "f", "-size", "+3k"); !slices.Equal(got, want) {
		t.Fatalf("find -size +3k through a fresh mount:\n%s\nwant (from the source):\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	walked := total() - before
	logRequests(t, metrics, counts)
	// Each directory: its delegation, a refresh, a page of the scan, a
	// page of attributes, the path's check and its own attributes, and a
	// few kernel GETATTRs the walk makes of it before any delegation
	// covers it: about 13 when the walk lists it itself (a loaded
	// machine may reach a directory before its reading ahead does),
	// about 5 when it was read ahead; two a file (130 a directory here)
	// without either.
	nDirs := 2*dirs + 1
	if limit := float64(20 * nDirs); walked > limit {
		t.Errorf("the first walk of %d files in %d directories asked %v requests, want at most %v (20 a directory)",
			dirs*(files+5), nDirs, walked, limit)
	}
	t.Logf("first walk: %v requests for %d directories, %d files", walked, nDirs, dirs*(files+5))

	// All of it is kept now: the walk again, and a stat of every file.
	before, counts = total(), requestCounts(t, metrics)
	if got := walkLines(t, m.Path("t")); !slices.Equal(got, walkLines(t, src)) {
		t.Errorf("second walk differs from the source:\n%s", strings.Join(got, "\n"))
	}
	for d := range dirs {
		for i := range files {
			p := m.Path("t", fmt.Sprintf("d%02d", d), fmt.Sprintf("f%03d", i))
			if _, err := os.Lstat(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	if again := total() - before; again > 3 {
		logRequests(t, metrics, counts)
		t.Errorf("a second walk and %d stats asked %v requests, want none (a few of the mount's upkeep at most)", dirs*files, again)
	}
}

// TestWalkAheadSeesChangesMadeMeanwhile: while mount A reads a directory
// ahead of a walk and the answer of its scan is held, mount B changes the
// directory (creates, removes, rewrites); A's walk, reaching the directory
// (its listing waits for the reading ahead), shows B's changes, and still
// does once the held answer has landed.
func TestWalkAheadSeesChangesMadeMeanwhile(t *testing.T) {
	mounttest.QuickExit(t)
	src := firstWalkTree(t, 8, 6)
	f := importedFS(t, src)
	fp := mounttest.NewFaultProxy(t, f.URL)
	a := f.Mount(t, "--es-url", fp.URL)
	b := f.Mount(t)
	// The reading ahead's scan of d05 (the walk's own listings are of /t
	// and d00): its answer held while B changes d05.
	held := fp.Add(&mounttest.Fault{Late: 3 * time.Second, Match: func(method, path string, body []byte) bool {
		return strings.HasSuffix(path, "/_search") && strings.Contains(string(body), `"parent":"/t/d05"`)
	}})
	mounttest.Sh(t, a.Dir, `ls t >/dev/null && ls t/d00 >/dev/null`)
	select {
	case <-held.Arrived():
	case <-time.After(time.Minute):
		t.Fatal("d05 was not read ahead: its scan never came")
	}
	mounttest.Sh(t, b.Dir, `touch t/d05/new && rm t/d05/f001 && printf 'rewritten' > t/d05/f002 && mkdir t/d05/newdir`)
	check := func(when string) {
		t.Helper()
		want := []string{" d", "f000 f 64", "f002 f 9", "f003 f 4000", "f004 f 64", "f005 f 64", "new f 0", "newdir d", "sub d",
			"sub/s0 f 3", "sub/s1 f 3", "sub/s2 f 3", "sub/s3 f 3", "sub/s4 f 3"}
		if got := walkLines(t, a.Path("t", "d05")); !slices.Equal(got, want) {
			t.Errorf("A's walk of d05 %s:\n%s\nwant:\n%s", when, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		if _, err := os.Lstat(a.Path("t", "d05", "f001")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("lstat of f001, removed by B, on A %s: %v, want ENOENT", when, err)
		}
	}
	check("while the read ahead's answer is held")
	held.WaitFired(t)
	check("once the held answer has landed")
	// The other directories read ahead are whole too.
	if got, want := walkLines(t, a.Path("t")), walkLines(t, b.Path("t")); !slices.Equal(got, want) {
		t.Errorf("A's walk of the tree:\n%s\nB's:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLookupsByNameReadTheDirectory: a tool that stats the files of a
// directory by name, one after the other (git status after reading its
// index), on a fresh mount, has the directory read whole after a few
// lookups its delegation could not answer: the stats cost a bounded
// number of requests, not a lookup's two apiece.
func TestLookupsByNameReadTheDirectory(t *testing.T) {
	mounttest.QuickExit(t)
	const files = 500
	src := t.TempDir()
	for i := range files {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%03d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := mounttest.NewFS(t)
	if out, err := f.Run("import", src, "/d"); err != nil {
		t.Fatalf("esfs import: %v\n%s", err, out)
	}
	m, metrics := delegMount(t, f)
	total := func() float64 { return callAndAfter(t, metrics) }
	before, counts := total(), requestCounts(t, metrics)
	for i := range files {
		fi, err := os.Lstat(m.Path("d", fmt.Sprintf("f%03d", i)))
		if err != nil || fi.Size() != 1 {
			t.Fatalf("lstat f%03d: %v, %v", i, fi, err)
		}
	}
	if _, err := os.Lstat(m.Path("d", "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("lstat of a missing name: %v, want ENOENT", err)
	}
	asked := total() - before
	logRequests(t, metrics, counts)
	// Until the directory is read (a refresh, a page of the scan and one
	// of attributes after the grant), the lookups go to the cluster: a
	// few dozen at most, however the two race.
	if asked > 150 {
		t.Errorf("%d lstats by name asked %v requests, want at most 150", files, asked)
	}
}

// TestWalkAheadFaults: the requests of a reading ahead meet a lost answer
// (the grant of a directory's delegation landed, its answer reset), a
// refusal (the scan answered 503) and a hold past the mount's timeout (an
// attributes' mget): the walk still prints the whole tree, each directory
// listed by the walk itself where its reading ahead failed, and what
// mount B changes afterwards in those directories is seen at once.
// (Which call sees a fault is decided: none does; a reading ahead that
// fails leaves its directory to the walk, which waits for it at most
// twice --es-timeout.)
func TestWalkAheadFaults(t *testing.T) {
	mounttest.QuickExit(t)
	src := firstWalkTree(t, 8, 6)
	f := importedFS(t, src)
	fp := mounttest.NewFaultProxy(t, f.URL)
	a := f.Mount(t, "--es-url", fp.URL, "--es-timeout", "2s")
	b := f.Mount(t)
	faults := []*mounttest.Fault{
		fp.Add(&mounttest.Fault{Reset: true, Match: func(_, path string, body []byte) bool {
			return strings.HasSuffix(path, "/_bulk") && strings.Contains(string(body), `"path":"/t/d03"`)
		}}),
		fp.Add(&mounttest.Fault{Refuse: 503, Match: func(_, path string, body []byte) bool {
			return strings.HasSuffix(path, "/_search") && strings.Contains(string(body), `"parent":"/t/d05"`)
		}}),
		fp.Add(&mounttest.Fault{Delay: 5 * time.Second, Match: func(_, path string, body []byte) bool {
			return strings.HasSuffix(path, "/_search") && strings.Contains(string(body), `"parent":"/t/d06"`)
		}}),
	}
	// A walk's start: /t listed, then d00: the others are read ahead,
	// and meet the faults before the walk reaches them.
	mounttest.Sh(t, a.Dir, `ls t >/dev/null && ls t/d00 >/dev/null`)
	for _, fault := range faults {
		fault.WaitFired(t)
	}
	if got, want := walkLines(t, a.Path("t")), walkLines(t, src); !slices.Equal(got, want) {
		t.Errorf("A's walk after faults on its reading ahead:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	mounttest.Sh(t, b.Dir, `for d in d03 d05 d06; do touch t/$d/new && rm t/$d/f000; done`)
	for _, d := range []string{"d03", "d05", "d06"} {
		if _, err := os.Lstat(a.Path("t", d, "new")); err != nil {
			t.Errorf("%s/new, made by B, on A: %v", d, err)
		}
		if _, err := os.Lstat(a.Path("t", d, "f000")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s/f000, removed by B, on A: %v, want ENOENT", d, err)
		}
		names := mounttest.Sh(t, a.Dir, "ls t/"+d)
		if !strings.Contains(names, "new\n") || strings.Contains(names, "f000") {
			t.Errorf("ls %s on A after B's changes:\n%s", d, names)
		}
	}
}

// callAndAfter counts the requests a mount made for calls and for what
// they set off (reading ahead), not its upkeep.
func callAndAfter(t *testing.T, metrics string) float64 {
	n := 0.0
	for _, origin := range []string{"call", "after"} {
		for _, v := range requestCountsOf(t, metrics, origin) {
			n += v
		}
	}
	return n
}
