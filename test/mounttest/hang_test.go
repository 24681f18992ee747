package mounttest

import (
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestHangDumpsMounts: a script still running at its limit is killed and
// reported as a hang, after the test's mounts printed their goroutines
// (which name esfs code) into the test's log.
func TestHangDumpsMounts(t *testing.T) {
	f := NewFS(t)
	m := f.Mount(t)
	cmd := exec.Command("bash", "-c", "sleep 60")
	start := time.Now()
	_, _, hung := runWatched(t, cmd, 2*time.Second)
	if !hung || time.Since(start) > 45*time.Second {
		t.Fatalf("a script sleeping past its limit: hung %v after %s", hung, time.Since(start))
	}
	if !m.Exited() {
		t.Fatal("the mount was not asked for its goroutines")
	}
	if g := esfsGoroutines(m.Log()); !strings.Contains(g, "esfs/fs") && !strings.Contains(g, "go-fuse") {
		t.Errorf("the dump kept no goroutine of esfs or go-fuse:\n%s", tail(m.Log(), 40))
	}
}
