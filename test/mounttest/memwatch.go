package mounttest

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// MemWatch guards the machine from a mount whose memory follows a size a
// request names: it polls the process's resident memory and kills it past
// a limit, long before it could exhaust the machine (a limit on address
// space cannot do it: a -race binary reserves terabytes of it).
type MemWatch struct {
	mu     sync.Mutex // protects the following
	peak   int64
	killed bool
	stop   chan struct{}
	done   chan struct{}
}

// WatchMemory starts watching m's resident memory every 10 ms until the
// test ends, and kills m with SIGKILL once it passes limit bytes.
func (m *Mount) WatchMemory(t testing.TB, limit int64) *MemWatch {
	w := &MemWatch{stop: make(chan struct{}), done: make(chan struct{})}
	pid := m.Pid()
	go func() {
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			rss, err := residentBytes(pid)
			if err != nil {
				return // the process is gone
			}
			w.mu.Lock()
			w.peak = max(w.peak, rss)
			if rss > limit && !w.killed {
				w.killed = true
				_ = m.cmd.Process.Kill()
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(w.stop); <-w.done })
	return w
}

// Peak is the largest resident memory seen; killed says whether the
// watch killed the process for passing its limit.
func (w *MemWatch) Peak() (peak int64, killed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peak, w.killed
}

func residentBytes(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for process %d", pid)
}
