package mounttest

import (
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ShLimit bounds a script run by Sh: far past what any of the suite's
// takes (a minute or two on a loaded machine), so that reaching it means
// a hang. Before failing, Sh has the test's mounts print their goroutines
// into their logs (SIGQUIT), which the failure then shows: a hang that
// waited for go test's own timeout left nothing to read (an rsync's
// utimensat waited 14 minutes in CI-like conditions, once).
const ShLimit = 10 * time.Minute

var (
	liveMu sync.Mutex
	live   = map[testing.TB][]*Mount{}
)

// track records m as a mount of t until the test ends.
func track(t testing.TB, m *Mount) {
	liveMu.Lock()
	defer liveMu.Unlock()
	if _, ok := live[t]; !ok {
		t.Cleanup(func() {
			liveMu.Lock()
			defer liveMu.Unlock()
			delete(live, t)
		})
	}
	live[t] = append(live[t], m)
}

// runWatched runs cmd, and, if it is still running after limit, has every
// live mount of t dump its goroutines, kills cmd and returns hung.
func runWatched(t testing.TB, cmd *exec.Cmd, limit time.Duration) (out []byte, err error, hung bool) {
	var buf strings.Builder
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return nil, err, false
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		return []byte(buf.String()), err, false
	case <-time.After(limit):
	}
	dumpMounts(t)
	_ = cmd.Process.Kill()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
	}
	return []byte(buf.String()), err, true
}

// dumpMounts has t's live mounts print their goroutines and logs them
// whole (the Go runtime's SIGQUIT dump, which ends the process).
func dumpMounts(t testing.TB) {
	liveMu.Lock()
	ms := append([]*Mount{}, live[t]...)
	liveMu.Unlock()
	for _, m := range ms {
		if m.Exited() {
			continue
		}
		m.asked.Store(true) // ended on purpose, for the dump
		_ = m.cmd.Process.Signal(syscall.SIGQUIT)
		m.waitDone(30 * time.Second)
		t.Logf("goroutines of the esfs mount at %s (pid %d), dumped on a hang:\n%s", m.Dir, m.Pid(), esfsGoroutines(m.Log()))
	}
}

// esfsGoroutines keeps, of a goroutine dump, the goroutines that run esfs
// or go-fuse code (the rest, HTTP connections and timers, is noise).
func esfsGoroutines(log string) string {
	i := strings.Index(log, "SIGQUIT")
	if i < 0 {
		return tail(log, 60)
	}
	var keep []string
	for _, g := range strings.Split(log[i:], "\n\n") {
		if strings.Contains(g, "esfs/") || strings.Contains(g, "go-fuse") {
			keep = append(keep, g)
		}
	}
	return strings.Join(keep, "\n\n")
}
