package mounttest

// Running commands in tests: the esfs binary (Run, RunOn, StartHeld) and
// any program in the background (Exec, Background, WaitResult).

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Cmd is one run of the esfs binary by Run.
type Cmd struct {
	// Args are the arguments after the program's name.
	Args []string
	// Env is added to the test process's environment or, with OnlyEnv,
	// is the whole environment.
	Env     []string
	OnlyEnv bool
	// Bin is the binary to run; Binary(t) if empty.
	Bin string
	// Argv0, if set, runs the binary through a symlink of that name, as
	// mount(8) runs mount.fuse.esfs.
	Argv0 string
	// Limit is how long the command may run (3 minutes if zero). It is
	// then killed and the test fails at once, unless MayHang: then Run
	// returns, with Err saying the command was killed, for a caller that
	// has cleanup to do before it judges.
	Limit   time.Duration
	MayHang bool
	// Slow, if set, fails the test (and lets it go on) when the command
	// ran longer: for failures that must be reported quickly.
	Slow time.Duration
	// Split keeps standard output and standard error apart (Stdout and
	// Stderr of the Result); otherwise both go to Out as one stream, in
	// the order the command wrote them.
	Split bool
}

// Result is the outcome of a command run by Run or Exec.
type Result struct {
	// Out is standard output and standard error together (empty with
	// Cmd.Split, which fills Stdout and Stderr instead).
	Out            string
	Stdout, Stderr string
	// Code is the exit status (-1 if the command was killed).
	Code int
	// Err is nil for status 0; an *exec.ExitError for another status.
	Err  error
	Took time.Duration
	End  time.Time
}

// Run runs the esfs binary as c says. Every test runs the binary through
// it (or RunOn), except mounts (FS.Mount) and the commands held by the
// fault proxy (StartHeld).
func Run(t testing.TB, c Cmd) Result {
	t.Helper()
	limit := c.Limit
	if limit == 0 {
		limit = 3 * time.Minute
	}
	bin := c.Bin
	if bin == "" {
		bin = Binary(t)
	}
	if c.Argv0 != "" {
		link := filepath.Join(t.TempDir(), c.Argv0)
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
		bin = link
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, c.Args...)
	cmd.Env = c.Env
	if !c.OnlyEnv {
		cmd.Env = append(os.Environ(), c.Env...)
	}
	cmd.WaitDelay = time.Second // a stray child holding our pipes must not hang the test
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out // one pipe: the order of the lines is kept
	if c.Split {
		cmd.Stderr = &stderr
	}
	start := time.Now()
	err := cmd.Run()
	r := Result{Code: -1, Err: err, Took: time.Since(start), End: time.Now()}
	if c.Split {
		r.Stdout, r.Stderr = out.String(), stderr.String()
	} else {
		r.Out = out.String()
	}
	name := ""
	if len(c.Args) > 0 {
		name = c.Args[0]
	}
	t.Logf("esfs %s: %s", name, r.Took.Round(time.Millisecond))
	if ctx.Err() != nil && !c.MayHang {
		t.Fatalf("esfs %q hung for %s", c.Args, limit)
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		r.Code = 0
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
	case !c.MayHang:
		t.Fatal(err)
	}
	if c.Slow > 0 && r.Took > c.Slow {
		t.Errorf("esfs %s took %s", name, r.Took.Round(time.Millisecond))
	}
	return r
}

// RunOn runs esfs command args[0] on f, through the cluster at url if
// not empty (a fault proxy, say), with args[1:], ELASTICSEARCH_URL cleared
// and a 3-minute limit; it returns the combined output and exit status.
func RunOn(t testing.TB, f *FS, url string, args ...string) (string, int) {
	t.Helper()
	if url == "" {
		url = f.URL
	}
	r := Run(t, Cmd{
		Args:  append([]string{args[0], "--es-url", url, "--index", f.Index}, args[1:]...),
		Env:   []string{"ELASTICSEARCH_URL="},
		Limit: 3 * time.Minute,
	})
	return r.Out, r.Code
}

// Exec runs any program in dir, killing it after limit. It does not touch
// the test, so that it may run in the background (Background).
func Exec(limit time.Duration, dir, name string, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	r := Result{Out: string(out), Err: err, Took: time.Since(start), End: time.Now()}
	var ee *exec.ExitError
	if err == nil {
		r.Code = 0
	} else if errors.As(err, &ee) {
		r.Code = ee.ExitCode()
	} else {
		r.Code = -1
	}
	return r
}

// Background runs fn in the background; the channel delivers its result.
func Background(fn func() Result) <-chan Result {
	ch := make(chan Result, 1)
	go func() { ch <- fn() }()
	return ch
}

// WaitResult waits up to limit for a background command (what names it
// in the failure).
func WaitResult(t testing.TB, what string, ch <-chan Result, limit time.Duration) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("%s did not finish within %s", what, limit)
	}
	return Result{}
}

// QuickExit spares each command run by the test the race detector's
// second of sleep at exit (the binary is built with -race).
func QuickExit(t testing.TB) { t.Setenv("GORACE", "atexit_sleep_ms=0") }

// Held is an esfs admin command whose first request that hold
// matches the fault proxy keeps until finish: a test changes the
// filesystem while the command is known to be in the middle of its work.
type Held struct {
	t       testing.TB
	cmd     *exec.Cmd
	out     bytes.Buffer
	exited  chan error
	release func()
}

// StartHeld runs `esfs args[0] --es-url PROXY --index f.Index args[1:]...`
// and returns once the request is held (what names that step in failures).
func StartHeld(t testing.TB, f *FS, what string, hold func(r *http.Request, body []byte) bool, args ...string) *Held {
	t.Helper()
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	proxy := NewFaultProxy(t, f.URL)
	proxy.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if hold(r, body) {
			once.Do(func() { close(held); <-release })
		}
		return false
	})
	h := &Held{t: t, exited: make(chan error, 1)}
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

// Finish releases the held request and waits for the command: its output
// and its error (nil for status 0).
func (h *Held) Finish() (string, error) {
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
