package test

// Read delegations (mount flag --delegations): a mount answers lookups and
// listings of a directory it holds a delegation on from memory, for as long
// as it holds it, and another mount's change of the directory recalls it
// first, so that the change is seen at once, whatever the cache timeouts.

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// delegMount mounts with delegations, long daemon and kernel caches (what
// the test sees at once, no TTL explains) and metrics.
//
// The tests count the requests of work a delegation answers from memory,
// and allow a few: a mount gives every delegation back when its lease was
// not renewed in time (then it must assume it was declared dead), which a
// loaded machine can cause, and the next request asks again.
// spareReads is how many reads the counting tests allow (see delegMount).
const spareReads = 3

func delegMount(t *testing.T, f *mounttest.FS, extra ...string) (*mounttest.Mount, string) {
	addr := mounttest.FreeAddr(t)
	m := f.Mount(t, append([]string{"--delegations", "--cache-ttl=1h", "--negative-timeout=1h", "--entry-timeout=1h", "--attr-timeout=1h",
		"--metrics-addr", addr}, extra...)...)
	return m, "http://" + addr + "/metrics"
}

// waitDelegated waits until the mount behind metrics holds at least n read
// delegations, running touch (a listing or lookup that asks for them).
func waitDelegated(t *testing.T, metrics string, n float64, touch func()) {
	t.Helper()
	mounttest.WaitFor(t, fmt.Sprintf("%v read delegations", n), 20*time.Second, func() bool {
		touch()
		return mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_delegations_held", "mode", "read") >= n
	})
}

func esRequests(t *testing.T, metrics, endpoint string) float64 {
	return mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_es_request_duration_seconds", "endpoint", endpoint)
}

// requestCounts are the requests a mount made to the cluster for calls
// (origin "call"), by endpoint and index: not the mount's own background
// work (its heartbeat, sweeper, recall polls, lock mender, write-back
// timer: origin "upkeep"), which runs whenever it will.
func requestCounts(t *testing.T, metrics string) map[string]float64 {
	return requestCountsOf(t, metrics, "call")
}

// requestCountsOf is requestCounts of the requests of origin (call,
// after or upkeep: see store.Metrics).
func requestCountsOf(t *testing.T, metrics, origin string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range mounttest.Scrape(t, metrics)["esfs_es_request_duration_seconds"].GetMetric() {
		var key []string
		call := false
		for _, l := range m.GetLabel() {
			if l.GetName() == "origin" {
				call = l.GetValue() == origin
				continue
			}
			key = append(key, l.GetName()+"="+l.GetValue())
		}
		if call {
			out[strings.Join(key, ",")] += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out
}

// logRequests logs the requests a mount made since counts.
func logRequests(t *testing.T, metrics string, counts map[string]float64) {
	for k, v := range requestCounts(t, metrics) {
		if v != counts[k] {
			t.Logf("%s: %v requests", k, v-counts[k])
		}
	}
}

// nameReads counts a mount's requests for calls that read names for
// lookups and listings: reads and refreshes of the path index, and
// searches through a point in time (listings), which name no index. Not
// the inode index (attributes are not delegated), the lock index (a
// holder of delegations polls it for recalls), nor the background
// sweep's searches (origin "upkeep").
func nameReads(t *testing.T, metrics string) float64 {
	fams := mounttest.Scrape(t, metrics)
	n := 0.0
	for _, q := range [][]string{{"endpoint", "_doc", "index", "path"}, {"endpoint", "_mget", "index", "path"},
		{"endpoint", "_refresh", "index", "path"}, {"endpoint", "_search", "index", ""}} {
		q = append(q, "origin", "call")
		if v := mounttest.Sample(fams, "esfs_es_request_duration_seconds", q...); v > 0 {
			n += v
		}
	}
	return n
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// TestDelegationsSeeOtherMountsAtOnce: mount B holds a read delegation on a
// directory and caches its names and listing for an hour; every change mount
// A makes there (create, remove, rename in and out, mkdir, rmdir) is seen by
// B as soon as A's call returns, round after round, and B's repeated
// listings and lookups of an unchanged directory cost no request.
func TestDelegationsSeeOtherMountsAtOnce(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	b, bm := delegMount(t, f)
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(a.Path("other"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Both the root (where "d" is looked up) and d itself.
	waitDelegated(t, bm, 2, func() { names(t, b.Path("d")) })

	// Unchanged: listings and lookups, positive and negative, from memory.
	names(t, b.Path("d"))
	_, _ = os.Lstat(b.Path("d", "nothing"))
	before, counts := nameReads(t, bm), requestCounts(t, bm)
	for i := 0; i < 20; i++ {
		if got := names(t, b.Path("d")); len(got) != 0 {
			t.Fatalf("listing of an empty directory: %q", got)
		}
		if _, err := os.Lstat(b.Path("d", "nothing")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("lookup of a missing name: %v", err)
		}
	}
	if after := nameReads(t, bm); after-before > spareReads {
		t.Errorf("20 listings and lookups of a delegated directory made %v reads of the cluster, want 0", after-before)
		logRequests(t, bm, counts)
	}

	want := map[string]bool{}
	check := func(round int, what string) {
		t.Helper()
		got := names(t, b.Path("d"))
		var exp []string
		for n := range want {
			exp = append(exp, n)
		}
		slices.Sort(exp)
		if !slices.Equal(got, exp) {
			t.Fatalf("round %d, after %s: B lists %q, A made %q", round, what, got, exp)
		}
		for n := range want {
			if _, err := os.Lstat(b.Path("d", n)); err != nil {
				t.Fatalf("round %d, after %s: B cannot stat %s: %v", round, what, n, err)
			}
		}
	}
	for round := 0; round < 8; round++ {
		x := fmt.Sprintf("x%d", round)
		// B knows x is missing (its kernel for an hour) and has listed d.
		if _, err := os.Lstat(b.Path("d", x)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("round %d: %s exists before it was made: %v", round, x, err)
		}
		check(round, "nothing")
		if err := os.WriteFile(a.Path("d", x), []byte(x), 0o644); err != nil {
			t.Fatal(err)
		}
		want[x] = true
		if b, err := os.ReadFile(b.Path("d", x)); err != nil || string(b) != x {
			t.Fatalf("round %d: B reads %q, %v right after A made %s", round, b, err, x)
		}
		check(round, "create")
		y := x + "-moved"
		if err := os.Rename(a.Path("d", x), a.Path("d", y)); err != nil {
			t.Fatal(err)
		}
		delete(want, x)
		want[y] = true
		if _, err := os.Lstat(b.Path("d", x)); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("round %d: B still sees %s after A renamed it: %v", round, x, err)
		}
		check(round, "rename within")
		if err := os.Rename(a.Path("d", y), a.Path("other", y)); err != nil {
			t.Fatal(err)
		}
		delete(want, y)
		check(round, "rename out")
		if err := os.Rename(a.Path("other", y), a.Path("d", y)); err != nil {
			t.Fatal(err)
		}
		want[y] = true
		check(round, "rename in")
		sub := fmt.Sprintf("sub%d", round)
		if err := os.Mkdir(a.Path("d", sub), 0o755); err != nil {
			t.Fatal(err)
		}
		want[sub] = true
		check(round, "mkdir")
		if round%2 == 0 {
			if err := os.Remove(a.Path("d", sub)); err != nil {
				t.Fatal(err)
			}
			delete(want, sub)
			check(round, "rmdir")
			if err := os.Remove(a.Path("d", y)); err != nil {
				t.Fatal(err)
			}
			delete(want, y)
			if _, err := os.Lstat(b.Path("d", y)); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("round %d: B still sees %s after A removed it: %v", round, y, err)
			}
			check(round, "unlink")
		}
		// B takes its delegation back before the next round (a recalled
		// directory is granted again once the changes stop).
		waitDelegated(t, bm, 2, func() { names(t, b.Path("d")) })
	}
	fams := mounttest.Scrape(t, bm)
	t.Logf("B: %v recall answers, %v grants refused, %v cooling",
		mounttest.Sample(fams, "esfs_recall_answer_seconds"),
		mounttest.Sample(fams, "esfs_delegation_grants_total", "result", "refused"),
		mounttest.Sample(fams, "esfs_delegation_grants_total", "result", "cooling"))
	mounttest.FsckClean(t, f)
}

// TestDelegationsCopyThenDiffOnOtherMount: a tree copied in on mount A is
// identical on mount B as soon as cp returns, though B had listed and
// looked up the destination's parent before (its caches last an hour).
func TestDelegationsCopyThenDiffOnOtherMount(t *testing.T) {
	f := mounttest.NewFS(t)
	a, am := delegMount(t, f)
	b, bm := delegMount(t, f)
	src := t.TempDir()
	for i := 0; i < 6; i++ {
		dir := filepath.Join(src, fmt.Sprintf("dir%d", i), "inner")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 5; j++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d.txt", j)), []byte(strings.Repeat(fmt.Sprintf("%d.%d\n", i, j), 100)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.Mkdir(a.Path("top"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitDelegated(t, bm, 1, func() { names(t, b.Path("top")) })
	_, _ = os.Lstat(b.Path("top", "copy"))
	mkdirs := esRequests(t, am, "_bulk")
	out, err := exec.Command("cp", "-a", src, a.Path("top", "copy")).CombinedOutput()
	if err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	if out, err := exec.Command("diff", "-r", src, b.Path("top", "copy")).CombinedOutput(); err != nil {
		t.Fatalf("diff -r on the other mount right after cp returned: %v\n%s", err, out)
	}
	t.Logf("cp -a of 6 directories of 5 files: %v bulks on A", esRequests(t, am, "_bulk")-mkdirs)
	mounttest.FsckClean(t, f)
}

// TestDelegationsBornDirectoryNeedsNoLookups: a directory made on a mount is
// delegated to it from birth and known empty, so the lookups that creating
// files in it makes (the kernel asks for each name first) read nothing.
// Read delegations only: with write delegations the mount's birth grant
// is a write delegation (TestWriteDelegationsCallsNeedNoRoundTrip).
func TestDelegationsBornDirectoryNeedsNoLookups(t *testing.T) {
	f := mounttest.NewFS(t)
	a, am := delegMount(t, f, "--write-delegations=false")
	if err := os.Mkdir(a.Path("new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if mounttest.Sample(mounttest.Scrape(t, am), "esfs_delegations_held", "mode", "read") < 1 {
		t.Fatal("a directory made here is not delegated here")
	}
	out, err := f.Run("locks")
	if err != nil || !strings.Contains(out, `"/new" (directory)`) || !strings.Contains(out, "read delegation") {
		t.Fatalf("esfs locks does not list the delegation: %v\n%s", err, out)
	}
	t.Logf("esfs locks:\n%s", out)
	heldLine := regexp.MustCompile(`delegations held [1-9][0-9]* \(read [1-9]`)
	mounttest.WaitFor(t, "esfs status to show the delegations", 20*time.Second, func() bool {
		out, err = f.Run("status")
		return err == nil && heldLine.MatchString(out)
	})
	// The root too, where "new" is looked up on the way (asked for in the
	// background by the first lookup there).
	waitDelegated(t, am, 2, func() { _, _ = os.Lstat(a.Path("new", "f0")) })
	before, counts := nameReads(t, am), requestCounts(t, am)
	for i := 0; i < 30; i++ {
		if _, err := os.Lstat(a.Path("new", fmt.Sprintf("f%d", i))); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("f%d: %v", i, err)
		}
	}
	if got := nameReads(t, am) - before; got > spareReads {
		t.Errorf("30 lookups of missing names in a directory made here read %v documents, want 0", got)
		logRequests(t, am, counts)
	}
	// And a listing of it after creates comes from memory too.
	for i := 0; i < 3; i++ {
		if err := os.WriteFile(a.Path("new", fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	searches := nameReads(t, am)
	counts = requestCounts(t, am)
	if got := names(t, a.Path("new")); !slices.Equal(got, []string{"f0", "f1", "f2"}) {
		t.Fatalf("listing: %q", got)
	}
	if got := nameReads(t, am) - searches; got > spareReads {
		t.Errorf("listing a directory made here searched %v times, want 0", got)
		logRequests(t, am, counts)
	}
}

// TestDelegationsSeeAttributeChangesAtOnce: a delegated directory's file
// is stated from memory (mount C, whose kernel and daemon caches are off:
// only the delegation can answer), and each change of its attributes on
// mount A (a write, chmod, truncate, utimes, an xattr) is seen at once by C
// and by mount B, whose kernel and daemon would keep them an hour.
func TestDelegationsSeeAttributeChangesAtOnce(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	b, bm := delegMount(t, f)
	caddr := mounttest.FreeAddr(t)
	c := f.Mount(t, "--delegations", "--cache-ttl=0", "--negative-timeout=0", "--entry-timeout=0", "--attr-timeout=0",
		"--metrics-addr", caddr)
	cm := "http://" + caddr + "/metrics"
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.Path("d", "f"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	stat := func(m *mounttest.Mount) os.FileInfo {
		t.Helper()
		fi, err := os.Lstat(m.Path("d", "f"))
		if err != nil {
			t.Fatal(err)
		}
		return fi
	}
	held := func() {
		mounttest.WaitFor(t, "delegations on / and d held by B and C", 20*time.Second, func() bool {
			stat(b)
			stat(c)
			return mounttest.Sample(mounttest.Scrape(t, bm), "esfs_delegations_held", "mode", "read") >= 2 &&
				mounttest.Sample(mounttest.Scrape(t, cm), "esfs_delegations_held", "mode", "read") >= 2
		})
	}
	held()
	stat(c)
	before := inodeReads(t, cm)
	for i := 0; i < 20; i++ {
		if fi := stat(c); fi.Size() != 1 {
			t.Fatalf("size %d, want 1", fi.Size())
		}
	}
	if got := inodeReads(t, cm) - before; got > spareReads {
		t.Errorf("20 stats of a delegated directory's file, no cache but the delegation, read %v inodes, want 0", got)
	}

	steps := []struct {
		what   string
		change func() error
		check  func(os.FileInfo) bool
	}{
		{"write", func() error { return os.WriteFile(a.Path("d", "f"), []byte("22"), 0o644) }, func(fi os.FileInfo) bool { return fi.Size() == 2 }},
		{"chmod", func() error { return os.Chmod(a.Path("d", "f"), 0o600) }, func(fi os.FileInfo) bool { return fi.Mode().Perm() == 0o600 }},
		{"truncate", func() error { return os.Truncate(a.Path("d", "f"), 0) }, func(fi os.FileInfo) bool { return fi.Size() == 0 }},
		{"utimes", func() error {
			return os.Chtimes(a.Path("d", "f"), time.Unix(1e9, 0), time.Unix(1e9, 0))
		}, func(fi os.FileInfo) bool { return fi.ModTime().Equal(time.Unix(1e9, 0)) }},
	}
	for round := 0; round < 3; round++ {
		for _, s := range steps {
			held()
			if err := s.change(); err != nil {
				t.Fatal(err)
			}
			for _, m := range []*mounttest.Mount{b, c} {
				if fi := stat(m); !s.check(fi) {
					time.Sleep(time.Second)
					later := stat(m)
					t.Fatalf("round %d: %s sees size %d, mode %v, mtime %v right after A's %s (a second later: %d, %v, %v)", round, m.Path(), fi.Size(), fi.Mode(), fi.ModTime(), s.what, later.Size(), later.Mode(), later.ModTime())
				}
			}
			// Put it back, so that the next round changes it again.
			if err := os.WriteFile(a.Path("d", "f"), []byte("1"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(a.Path("d", "f"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	held()
	for _, m := range []*mounttest.Mount{b, c} {
		if out, err := exec.Command("getfattr", "-n", "user.k", m.Path("d", "f")).CombinedOutput(); err == nil {
			t.Fatalf("user.k is there before it was set: %s", out)
		}
	}
	if out, err := exec.Command("setfattr", "-n", "user.k", "-v", "v1", a.Path("d", "f")).CombinedOutput(); err != nil {
		t.Fatalf("setfattr: %v %s", err, out)
	}
	for _, m := range []*mounttest.Mount{b, c} {
		if out, err := exec.Command("getfattr", "--only-values", "-n", "user.k", m.Path("d", "f")).Output(); err != nil || string(out) != "v1" {
			t.Fatalf("%s reads user.k = %q, %v right after A set it", m.Path(), out, err)
		}
	}
	t.Logf("recalls answered: B %v, C %v", mounttest.Sample(mounttest.Scrape(t, bm), "esfs_recall_answer_seconds"),
		mounttest.Sample(mounttest.Scrape(t, cm), "esfs_recall_answer_seconds"))
}

// inodeReads counts a mount's requests to the inode index for calls.
func inodeReads(t *testing.T, metrics string) float64 {
	return max(0, mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_es_request_duration_seconds", "index", "inode", "origin", "call"))
}

// TestDelegationsKeepDirectoryAttributesAcrossOwnChanges: a directory this
// mount changes under its delegation (mkdir, create, rmdir and unlink in
// it) keeps its own attributes: the stat the kernel makes of it after each
// change reads nothing, and shows what is stored, as another mount reading
// the index in real time shows (times to the nanosecond, link count). A
// directory this mount moves shows the new ctime the move gave it. Read
// delegations only: the index is the reference here, and write
// delegations keep it behind on purpose until a flush.
func TestDelegationsKeepDirectoryAttributesAcrossOwnChanges(t *testing.T) {
	f := mounttest.NewFS(t)
	a, am := delegMount(t, f, "--write-delegations=false")
	// The index as it is: no cache, no delegation.
	c := f.Mount(t, "--delegations=false", "--cache-ttl=0", "--negative-timeout=0", "--entry-timeout=0", "--attr-timeout=0")
	same := func(what string, p ...string) {
		t.Helper()
		var sa, sc unix.Stat_t
		if err := unix.Lstat(a.Path(p...), &sa); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lstat(c.Path(p...), &sc); err != nil {
			t.Fatal(err)
		}
		if sa.Nlink != sc.Nlink || sa.Mtim != sc.Mtim || sa.Ctim != sc.Ctim || sa.Mode != sc.Mode {
			t.Errorf("%s: %v is nlink %d, mtime %v, ctime %v, mode %o here; the index holds nlink %d, mtime %v, ctime %v, mode %o",
				what, p, sa.Nlink, sa.Mtim, sa.Ctim, sa.Mode, sc.Nlink, sc.Mtim, sc.Ctim, sc.Mode)
		}
	}
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil { // delegated from birth
		t.Fatal(err)
	}
	same("made", "d")
	before, counts := inodeReads(t, am), requestCounts(t, am)
	const n = 20
	for i := 0; i < n; i++ {
		if err := os.Mkdir(a.Path("d", fmt.Sprintf("s%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(a.Path("d", fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(a.Path("d")); err != nil {
		t.Fatal(err)
	}
	if got := inodeReads(t, am) - before; got > spareReads {
		t.Errorf("%d mkdirs and creates in a delegated directory and its stat read the inode index %v times, want 0", n, got)
		logRequests(t, am, counts)
	}
	same(fmt.Sprintf("after %d mkdirs and creates", n), "d")
	if err := os.Remove(a.Path("d", "s0")); err != nil {
		t.Fatal(err)
	}
	same("after an rmdir", "d")
	if err := os.Remove(a.Path("d", "f0")); err != nil {
		t.Fatal(err)
	}
	same("after an unlink", "d")
	if err := os.Chmod(a.Path("d"), 0o700); err != nil {
		t.Fatal(err)
	}
	same("after a chmod", "d")
	if err := os.Mkdir(a.Path("d", "s0"), 0o755); err != nil {
		t.Fatal(err)
	}
	same("after a chmod and a mkdir", "d")

	// A directory made here, moved here: the move sets its ctime.
	if err := os.MkdirAll(a.Path("p", "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	same("made", "p", "x")
	time.Sleep(10 * time.Millisecond) // a ctime the move changes visibly
	if err := os.Rename(a.Path("p", "x"), a.Path("d", "x")); err != nil {
		t.Fatal(err)
	}
	same("moved", "d", "x")
	same("after a directory moved in", "d")
	same("after a directory moved out", "p")

	// Moved by another mount: the move changes its ctime, which this
	// mount holds under its delegation on the directory, so that
	// delegation is recalled first, not only those of the two parents.
	if err := os.Mkdir(a.Path("p", "y"), 0o755); err != nil { // delegated from birth
		t.Fatal(err)
	}
	same("made", "p", "y")
	// Through an open descriptor: fstat asks for the inode's attributes
	// without a lookup, which a recall of the parents alone would redo.
	dh, err := os.Open(a.Path("p", "y"))
	if err != nil {
		t.Fatal(err)
	}
	defer dh.Close()
	var premove unix.Stat_t
	if err := unix.Fstat(int(dh.Fd()), &premove); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if err := os.Rename(c.Path("p", "y"), c.Path("d", "y")); err != nil {
		t.Fatal(err)
	}
	var held, stored unix.Stat_t
	if err := unix.Fstat(int(dh.Fd()), &held); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lstat(c.Path("d", "y"), &stored); err != nil {
		t.Fatal(err)
	}
	if held.Ctim != stored.Ctim || held.Ctim == premove.Ctim {
		t.Errorf("a directory another mount moved: ctime %v through an open descriptor here (%v before the move); the index holds %v", held.Ctim, premove.Ctim, stored.Ctim)
	}
	same("moved by another mount", "d", "y")
}

// TestKernelKeepsDelegatedAnswers: with the default flags the kernel keeps
// what a delegation told it (a name, its attributes, a missing name) until
// the delegation is recalled, not for the 1 s timeouts of a mount without
// delegations: stats of a delegated directory spread over several seconds
// reach the daemon no more. Another mount's change is still seen at once,
// since the recall invalidates them first.
func TestKernelKeepsDelegatedAnswers(t *testing.T) {
	f := mounttest.NewFS(t)
	addr := mounttest.FreeAddr(t)
	a := f.Mount(t, "--metrics-addr", addr)
	b := f.Mount(t)
	metrics := "http://" + addr + "/metrics"
	// Made by B: A gets read delegations only.
	if err := os.Mkdir(b.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path("d", "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	look := func() {
		t.Helper()
		if fi, err := os.Stat(a.Path("d", "f")); err != nil || fi.Size() != 3 {
			t.Fatalf("stat d/f on A: %v, %v", fi, err)
		}
		if _, err := os.Stat(a.Path("d")); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(a.Path("d", "missing")); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("lstat d/missing on A: %v, want ENOENT", err)
		}
	}
	kernelCalls := func() float64 {
		fams := mounttest.Scrape(t, metrics)
		return mounttest.Sample(fams, "esfs_fuse_request_duration_seconds", "op", "LOOKUP") +
			mounttest.Sample(fams, "esfs_fuse_request_duration_seconds", "op", "GETATTR")
	}
	mounttest.WaitFor(t, "A's kernel answering d from its cache", 30*time.Second, func() bool {
		look()
		before := kernelCalls()
		look()
		return kernelCalls() == before
	})
	before := kernelCalls()
	const rounds = 4
	for range rounds {
		time.Sleep(1200 * time.Millisecond) // past the timeouts without delegations
		look()
	}
	// Without delegations each round costs 4 requests (the lookups of d, f
	// and missing, and d's attributes).
	if got := kernelCalls() - before; got > spareReads {
		t.Errorf("%v lookups and getattrs reached A over %d rounds spread over %v: the kernel did not keep what its delegations told it",
			got, rounds, rounds*1200*time.Millisecond)
	}

	if err := os.WriteFile(b.Path("d", "f"), []byte("three"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.Path("d", "missing"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(a.Path("d", "f")); err != nil || fi.Size() != 5 {
		t.Errorf("stat d/f on A right after B rewrote it: %v, %v, want size 5", fi, err)
	}
	if _, err := os.Lstat(a.Path("d", "missing")); err != nil {
		t.Errorf("lstat d/missing on A right after B made it: %v", err)
	}
}

// TestStatWhileWritingShowsTheWrite: a stat between a write and the close
// shows the write's mtime, and the stat after the close what the close
// stored: the kernel keeps what it is told under a delegation until a
// recall, and the close's flush tells it nothing, so an mtime from before
// the write would stay (make would see an old target).
func TestStatWhileWritingShowsTheWrite(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	b := f.Mount(t)
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := a.Path("d", "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		start := time.Now().Add(-time.Second) // the clocks are one machine's
		fh, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Write([]byte("more")); err != nil {
			t.Fatal(err)
		}
		during, err := fh.Stat()
		if err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		after, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if during.ModTime().Before(start) || after.ModTime().Before(start) {
			t.Errorf("round %d: mtime %v while writing, %v after the close, want after %v", round, during.ModTime(), after.ModTime(), start)
		}
		onB, err := os.Stat(b.Path("d", "f"))
		if err != nil {
			t.Fatal(err)
		}
		if !onB.ModTime().Equal(after.ModTime()) || onB.Size() != after.Size() {
			t.Errorf("round %d: A says %v %d bytes after the close, B %v %d bytes", round, after.ModTime(), after.Size(), onB.ModTime(), onB.Size())
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
}
