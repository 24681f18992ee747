package test

// A delegation's lock entry stands for as long as its session lives: other
// mounts never judge it a finished operation's leftover. So a mount that
// gives a delegation back must get the entry out of the lock document
// whatever the cluster answers meanwhile, or every other mount's change
// of the directory waits out --lock-timeout and fails with EAGAIN, for as
// long as the mount lives.

import (
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// TestDelegationReleaseRefused: mount A holds a read delegation on d; B's
// create in d recalls it, and A gives it back while the cluster refuses
// A's writes to the lock index (503), for longer than the release's own
// retries (campaign seed 2, class stuck-lock: an rmdir waited out the
// lock timeout on a read delegation of a live mount that no longer held
// it). The removal is owed and tried again until it lands: B's create
// succeeds once the cluster takes A's writes again, and A can change d.
func TestDelegationReleaseRefused(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a, am := delegMount(t, f, "--es-url", fp.URL)
	b, _ := delegMount(t, f, "--lock-timeout", "20s")
	if err := os.Mkdir(b.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitDelegated(t, am, 2, func() { names(t, a.Path("d")) }) // the root and d
	var refusing atomic.Bool
	var refused atomic.Int64
	lockWrite := mounttest.BulkTo("-locks")
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if refusing.Load() && lockWrite(r.Method, r.URL.Path, body) {
			refused.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	refusing.Store(true)
	const refusedFor = 4 * time.Second
	time.AfterFunc(refusedFor, func() { refusing.Store(false) })
	start := time.Now()
	if err := os.WriteFile(b.Path("d", "new"), []byte("new\n"), 0o644); err != nil {
		t.Fatalf("B's create in d while A's give-back was refused: %v after %s", err, time.Since(start).Round(time.Millisecond))
	}
	took := time.Since(start)
	t.Logf("B's create took %s; %d of A's lock writes refused", took.Round(time.Millisecond), refused.Load())
	if refused.Load() == 0 {
		t.Fatal("none of A's lock writes was refused: the test tested nothing")
	}
	if took < refusedFor/2 {
		t.Errorf("B's create took %s: A's give-back cannot have been refused for long", took)
	}
	if got := names(t, a.Path("d")); len(got) != 1 || got[0] != "new" {
		t.Errorf("A lists d as %q", got)
	}
	if err := os.WriteFile(a.Path("d", "mine"), nil, 0o644); err != nil {
		t.Errorf("A's create in d afterwards: %v", err)
	}
	mounttest.FsckClean(t, f)
}
