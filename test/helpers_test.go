package test

// Helpers several test files of this package use: mounts with a short
// lease and no caches (crMount), commands run with a deadline, waits, file
// creators that record every outcome, and the small lk* tools of the
// rename races and the storm.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sys/unix"
)

// esDo sends one request to the cluster and fails the test unless it
// answers 2xx.
func esDo(t *testing.T, base, method, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode/100 != 2 {
		t.Fatalf("%s %s: %s\n%s", method, path, res.Status, b)
	}
	return b
}

// esfsCmd runs an esfs command on f (through url, if not empty) and
// returns its output and exit status.
func esfsCmd(t *testing.T, f *mounttest.FS, url string, args ...string) (string, int) {
	t.Helper()
	if url == "" {
		url = f.URL
	}
	out, code, took := runCLI(t, 3*time.Minute, append([]string{args[0], "--es-url", url, "--index", f.Index}, args[1:]...)...)
	t.Logf("esfs %s: %s", strings.Join(args, " "), took.Round(time.Millisecond))
	return out, code
}

// quickExit spares each command run by the test the race detector's
// second of sleep at exit (the binary is built with -race).
func quickExit(t *testing.T) { t.Setenv("GORACE", "atexit_sleep_ms=0") }

const (
	// crLease is the --lease of every mount here.
	crLease = 2 * time.Second
	// crDeclare: the latest moment after a mount's death at which a correct
	// survivor declares it dead. The dead mount fell silent up to one
	// heartbeat (lease/3) before it died, the survivor's sweeper first sees
	// its last counter up to one sweeper period (lease/3) after that, must
	// see it unchanged for lease + grace (lease/2), and checks again only at
	// its next tick (another lease/3).
	crDeclare = crLease + crLease/2 + 3*(crLease/3)
	// crBound: a survivor must have finished recovering a dead mount's work
	// this long after the death: crDeclare, then one sweeper round that
	// recovers, which on a loaded 2-core machine (load 10 and more, -race)
	// has been seen to need more than a second more than on an idle one;
	// two leases leave room for that. A survivor that waits for a lock's
	// timeout (30s) or for someone to trip over the leftovers still fails
	// the bound.
	crBound = crDeclare + 2*crLease
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

// runCLI runs the esfs binary with a deadline and returns its output and
// exit status.
func runCLI(t *testing.T, limit time.Duration, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, mounttest.Binary(t), args...)
	cmd.Env = append(os.Environ(), "ELASTICSEARCH_URL=")
	cmd.WaitDelay = time.Second // a stray child holding our pipes must not hang the test
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("esfs %q hung for %s", args, limit)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code, took
}

// fenceRead reads a file through a fresh open.
func fenceRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// lateTimeout is the --es-timeout of a mount whose request the fault
// proxy holds: every other request of that mount must finish within it
// too, and under load (load 10 and more on 2 cores) a refresh has taken
// more than a second; 4s leaves room for that.
//
// lateDelay: how long the fault proxy holds the chosen request. Past the
// mount's deadline, so the sender has given up when the request lands, and
// far enough past it that what the test does after the failure (the
// mount's rollback, newer writes of the same bytes) comes first even on a
// loaded machine.
const (
	lateTimeout = 4 * time.Second
	lateDelay   = lateTimeout + 8*time.Second
)

func lateWaitFired(t *testing.T, fault *mounttest.Fault) {
	t.Helper()
	select {
	case <-fault.Fired():
	case <-time.After(time.Minute):
		t.Fatal("the fault never fired: the request it waits for was not sent")
	}
	if fault.Status != 200 {
		t.Fatalf("the delayed request did not land: the cluster answered %d", fault.Status)
	}
}

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

// waitFor polls cond until it holds or limit passes, and returns how long
// it took.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not seen within %s", what, limit)
		}
		time.Sleep(25 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("%s: seen after %s", what, took.Round(time.Millisecond))
	return took
}

// freeAddr returns a loopback address nobody listens on (now).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// scrape reads a Prometheus endpoint the way Prometheus does.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// sample is the value of the series of family name whose labels include
// want (a counter, gauge, or a histogram's count).
func sample(fams map[string]*dto.MetricFamily, name string, want ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	total, found := 0.0, false
next:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(want); i += 2 {
			ok := false
			for _, l := range m.GetLabel() {
				ok = ok || (l.GetName() == want[i] && l.GetValue() == want[i+1])
			}
			if !ok {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		}
	}
	if !found {
		return -1
	}
	return total
}

// storedChunks lists the chunk numbers the data index holds for ino.
func storedChunks(t *testing.T, f *mounttest.FS, ino uint64) []int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.RefreshData(ctx); err != nil {
		t.Fatal(err)
	}
	nums, err := f.Store.StoredChunks(ctx, ino, 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return nums
}

func inoOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// tlQ quotes s for bash.
func tlQ(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// tlStep runs fn and logs how long it took.
func tlStep(t *testing.T, what string, fn func()) {
	t.Helper()
	start := time.Now()
	fn()
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

// tlRandom returns deterministic bytes, so that failures reproduce.
func tlRandom(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

func tlWriteFile(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

// tlSameLines fails the test with the lines only one side has.
func tlSameLines(t *testing.T, what string, want, got []string) {
	t.Helper()
	wantSet := map[string]bool{}
	for _, l := range want {
		wantSet[l] = true
	}
	gotSet := map[string]bool{}
	for _, l := range got {
		gotSet[l] = true
	}
	var missing, extra []string
	for _, l := range want {
		if !gotSet[l] {
			missing = append(missing, l)
		}
	}
	for _, l := range got {
		if !wantSet[l] {
			extra = append(extra, l)
		}
	}
	if len(missing) == 0 && len(extra) == 0 && len(want) == len(got) {
		return
	}
	cut := func(s []string) []string {
		if len(s) > 25 {
			return append(s[:25:25], fmt.Sprintf("... and %d more", len(s)-25))
		}
		return s
	}
	t.Errorf("%s: %d lines expected, %d found; %d differ\nexpected, not found:\n  %s\nfound, not expected:\n  %s",
		what, len(want), len(got), len(missing)+len(extra),
		strings.Join(cut(missing), "\n  "), strings.Join(cut(extra), "\n  "))
}

// tlDiff fails the test when diff -r finds any difference (symlinks are
// compared as links, not followed).
func tlDiff(t *testing.T, a, b string) {
	t.Helper()
	mounttest.Sh(t, "/", "diff -r --no-dereference "+tlQ(a)+" "+tlQ(b))
}

func tlCountLines(s string) int {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0
	}
	return strings.Count(s, "\n") + 1
}

// tlFsck runs esfs fsck (check only) on the filesystem and fails the test
// unless it finds the filesystem clean.
func tlFsck(t *testing.T, f *mounttest.FS) {
	t.Helper()
	var out string
	var err error
	tlStep(t, "esfs fsck", func() { out, err = f.Run("fsck", "--no-wait") })
	if err != nil || !strings.HasSuffix(out, "clean\n") {
		t.Errorf("esfs fsck: %v\n%s", err, out)
		return
	}
	t.Logf("esfs fsck: %s", strings.SplitN(out, "\n", 2)[0])
}

// tlBuildTree writes files (relative path -> content) below root with a few
// parallel writers, making directories first.
func tlBuildTree(t *testing.T, root string, files map[string][]byte, workers int) {
	t.Helper()
	dirs := map[string]bool{}
	for p := range files {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // parents before children
	for _, d := range sorted {
		if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	paths := make(chan string)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range paths {
				if err := os.WriteFile(filepath.Join(root, p), files[p], 0o644); err != nil {
					errs <- err
					for range paths {
					}
					return
				}
			}
		}()
	}
	for p := range files {
		paths <- p
	}
	close(paths)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// tlCountPaths refreshes and counts the path documents at and below root.
func tlCountPaths(t *testing.T, f *mounttest.FS, root string) int {
	t.Helper()
	return len(tlScanPaths(t, f, root))
}

func tlScanPaths(t *testing.T, f *mounttest.FS, root string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	sc := f.Store.ScanTree(root, 1000)
	defer sc.Close()
	var paths []string
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range bad {
			t.Errorf("corrupt path document: %v", b)
		}
		if page == nil {
			return paths
		}
		for _, d := range page {
			paths = append(paths, d.Path)
		}
	}
}

// alive checks, at the end of a test, that its mount still serves.
func alive(t *testing.T, m *mounttest.Mount) {
	t.Helper()
	if m.Exited() {
		t.Fatalf("the mount at %s died:\n%s", m.Dir, m.Log())
	}
	if _, err := os.ReadDir(m.Dir); err != nil {
		t.Fatalf("the mount at %s no longer answers: %v", m.Dir, err)
	}
}

// dirLinksAgree checks, through the mount, that every directory's link
// count is 2 plus what find(1) lists as its subdirectories, and that ls
// agrees with stat.
func dirLinksAgree(t *testing.T, dir string) {
	t.Helper()
	out := mounttest.Sh(t, dir, `
find . -type d | while read -r d; do
	want=$(( 2 + $(find "$d" -mindepth 1 -maxdepth 1 -type d | wc -l) ))
	st=$(stat -c %h "$d")
	ls=$(ls -lad "$d" | awk '{print $2}')
	if [ "$st" != "$want" ] || [ "$ls" != "$want" ]; then echo "$d: stat $st, ls $ls, want $want"; fi
done`)
	if out != "" {
		t.Errorf("directory link counts in %s:\n%s", dir, out)
	}
}

// statLinks returns the link count of path, failing the test on error.
func statLinks(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return uint64(st.Nlink)
}

// heldCommand is an esfs admin command whose first request that hold
// matches the fault proxy keeps until finish: a test changes the
// filesystem while the command is known to be in the middle of its work.
type heldCommand struct {
	t       *testing.T
	cmd     *exec.Cmd
	out     bytes.Buffer
	exited  chan error
	release func()
}

// startHeld runs `esfs args[0] --es-url PROXY --index f.Index args[1:]...`
// and returns once the request is held (what names that step in failures).
func startHeld(t *testing.T, f *mounttest.FS, what string, hold func(r *http.Request, body []byte) bool, args ...string) *heldCommand {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	proxy := mounttest.NewFaultProxy(t, f.URL)
	proxy.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if hold(r, body) {
			once.Do(func() { close(held); <-release })
		}
		return false
	})
	h := &heldCommand{t: t, exited: make(chan error, 1)}
	var released sync.Once
	h.release = func() { released.Do(func() { close(release) }) }
	t.Cleanup(h.release) // nothing left held if the test fails early
	argv := append([]string{args[0], "--es-url", proxy.URL, "--index", f.Index}, args[1:]...)
	h.cmd = exec.Command(f.Bin, argv...)
	h.cmd.Stdout, h.cmd.Stderr = &h.out, &h.out
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { h.exited <- h.cmd.Wait() }()
	select {
	case <-held:
	case err := <-h.exited:
		t.Fatalf("esfs %s ended before %s: %v\n%s", args[0], what, err, h.out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("esfs %s did not reach %s within 60s", args[0], what)
	}
	return h
}

// finish releases the held request and waits for the command: its output
// and its error (nil for status 0).
func (h *heldCommand) finish() (string, error) {
	h.t.Helper()
	h.release()
	select {
	case err := <-h.exited:
		return h.out.String(), err
	case <-time.After(2 * time.Minute):
		_ = h.cmd.Process.Kill()
		h.t.Fatalf("esfs %s did not end:\n%s", h.cmd.Args[1], h.out.String())
		return "", nil
	}
}
