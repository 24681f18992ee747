package campaign

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/test/campaign/wire"
	"github.com/esfs/esfs/test/mounttest"
)

var (
	buildOnce sync.Once
	workerBin string
	buildErr  error
)

// workerBinary builds test/campaign/worker once per test process.
func workerBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "esfs-campaign-worker-")
		if err != nil {
			buildErr = err
			return
		}
		workerBin = filepath.Join(dir, "worker")
		cmd := exec.Command("go", "build", "-o", workerBin, "./test/campaign/worker")
		cmd.Dir = mounttest.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build worker: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return workerBin
}

// errWorkerGone: the worker died (or was killed) before answering.
var errWorkerGone = errors.New("worker gone")

// errTimeout: no answer within the limit (the call hangs).
var errTimeout = errors.New("no answer")

// worker is one worker process and the answers it owes.
type worker struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	mu   sync.Mutex // protects pending and the writes to in
	wait map[int64]chan *wire.Resp
	gone chan struct{}
	id   atomic.Int64
}

func startWorker(t testing.TB, root string) *worker {
	t.Helper()
	cmd := exec.Command(workerBinary(t), root)
	cmd.Dir = "/"
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, in: in, wait: map[int64]chan *wire.Resp{}, gone: make(chan struct{})}
	w.id.Store(1 << 40) // apart from the run's operation numbers
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			var r wire.Resp
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				continue
			}
			w.mu.Lock()
			ch := w.wait[r.ID]
			delete(w.wait, r.ID)
			w.mu.Unlock()
			if ch != nil {
				ch <- &r
			}
		}
		_ = cmd.Wait()
		close(w.gone)
	}()
	t.Cleanup(w.kill)
	return w
}

// do sends q and waits up to limit for its answer.
func (w *worker) do(q *wire.Req, limit time.Duration) (*wire.Resp, error) {
	if q.ID == 0 {
		q.ID = w.id.Add(1)
	}
	ch := make(chan *wire.Resp, 1)
	b, _ := json.Marshal(q)
	w.mu.Lock()
	w.wait[q.ID] = ch
	_, err := w.in.Write(append(b, '\n'))
	w.mu.Unlock()
	if err != nil {
		return nil, errWorkerGone
	}
	select {
	case r := <-ch:
		return r, nil
	case <-w.gone:
		return nil, errWorkerGone
	case <-time.After(limit):
		return nil, errTimeout
	}
}

// kill ends the worker (its descriptors close with it).
func (w *worker) kill() {
	_ = w.cmd.Process.Kill()
	select {
	case <-w.gone:
	case <-time.After(30 * time.Second):
	}
}
