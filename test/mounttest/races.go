package mounttest

// Tools of the race and storm tests: workers that create files and record
// every outcome (Creator), a tally of outcomes by errno (Tally), and the
// single system calls they race with.

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Creator creates files name-000, name-001, ... in dir through a mount
// until stopped, recording each attempt.
type Creator struct {
	// Mkdir: make directories instead of files (a create with no open,
	// write, flush or release around it).
	Mkdir bool
	mu    sync.Mutex
	ops   []CreateAttempt
	stop  atomic.Bool
	wg    sync.WaitGroup
}

// CreateAttempt is one create of a Creator and its outcome.
type CreateAttempt struct {
	Path       string // as the creator named it, relative to the mount
	Name       string
	Step       string // "create", "write" or "close": where it failed
	Err        error
	Start, End time.Time
	Created    time.Time // when the create (open with O_CREAT) returned
}

// Run starts workers creators; dirOf(k) is the directory (relative to the
// mount m) worker k creates in, read before each create.
func (c *Creator) Run(m *Mount, workers int, prefix string, dirOf func(k int) string) {
	for w := 0; w < workers; w++ {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			for i := 0; !c.stop.Load(); i++ {
				name := fmt.Sprintf("%s%d-%04d", prefix, w, i)
				rel := dirOf(w) + "/" + name
				op := CreateAttempt{Path: rel, Name: name, Step: "create", Start: time.Now()}
				if c.Mkdir {
					err := os.Mkdir(m.Path(rel), 0o755)
					op.Created, op.End, op.Err = time.Now(), time.Now(), err
					if err == nil {
						op.Step = "close"
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
				op.Created = time.Now()
				if err == nil {
					op.Step = "write"
					if _, err = fh.Write([]byte(Content(name))); err != nil {
						fh.Close()
					} else {
						op.Step = "close"
						err = fh.Close()
					}
				}
				op.Err, op.End = err, time.Now()
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

// Finish stops the workers, waits for them (failing the test after 2
// minutes) and returns every attempt.
func (c *Creator) Finish(t testing.TB) []CreateAttempt {
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
	return append([]CreateAttempt(nil), c.ops...)
}

// Errno names the errno of err: "ok", "ENOENT", ...
func Errno(err error) string {
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

// CleanFailure: a failure a racing operation may legitimately meet and
// that must have had no effect: its source vanished (ENOENT, or ESTALE for
// a directory inode renamed away by another mount) or the locks were not
// granted in time (EAGAIN); plus the errnos the caller names.
func CleanFailure(err error, extra ...string) bool {
	switch n := Errno(err); n {
	case "ENOENT", "ESTALE", "EAGAIN":
		return true
	default:
		return contains(extra, n)
	}
}

// Tally counts outcomes by kind of operation and errno.
type Tally struct {
	mu   sync.Mutex
	n    map[string]map[string]int
	slow map[string]time.Duration // the longest operation of each kind
}

// Took records how long one operation of kind took.
func (c *Tally) Took(kind string, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slow == nil {
		c.slow = map[string]time.Duration{}
	}
	c.slow[kind] = max(c.slow[kind], d)
}

// Add counts one operation of kind that ended with err.
func (c *Tally) Add(kind string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]map[string]int{}
	}
	if c.n[kind] == nil {
		c.n[kind] = map[string]int{}
	}
	c.n[kind][Errno(err)]++
}

// Total is the number of operations counted, and of those that succeeded.
func (c *Tally) Total() (all, ok int) {
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

// String lists the counts, one line per kind, with the slowest of each.
func (c *Tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for _, kind := range SortedKeys(c.n) {
		var parts []string
		for _, e := range SortedKeys(c.n[kind]) {
			parts = append(parts, fmt.Sprintf("%s=%d", e, c.n[kind][e]))
		}
		if d, ok := c.slow[kind]; ok {
			parts = append(parts, fmt.Sprintf("(slowest %s)", d.Round(time.Millisecond)))
		}
		lines = append(lines, fmt.Sprintf("  %-18s %s", kind, strings.Join(parts, " ")))
	}
	return strings.Join(lines, "\n")
}

// MakeTree builds a tree below root: keys ending in "/" are directories,
// the others files with their content. Parents sort before children.
func MakeTree(t testing.TB, root string, spec map[string]string) {
	t.Helper()
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range SortedKeys(spec) {
		if strings.HasSuffix(p, "/") {
			if err := os.Mkdir(root+strings.TrimSuffix(p, "/"), 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(root+p, []byte(spec[p]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Rename is rename(2) itself. os.Rename refuses to replace a directory
// (EEXIST) before asking the kernel, which POSIX allows when it is empty.
func Rename(from, to string) error {
	if err := unix.Rename(from, to); err != nil {
		return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
	}
	return nil
}

// CreateFile creates path exclusively with content. opened says whether
// the file came into existence (then a later error leaves its content
// unknown).
func CreateFile(path, content string) (opened bool, err error) {
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

// EnvInt reads a positive integer from the environment, or def.
func EnvInt(t testing.TB, name string, def int) int {
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

// Rounds is how many times each race is repeated (ESFS_RACE_ROUNDS).
func Rounds(t testing.TB, def int) int { return EnvInt(t, "ESFS_RACE_ROUNDS", def) }
