package test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestOutages puts toxiproxy between a mount and the cluster and makes the
// network slow, hostile and absent in turn. Each time operations either
// work or fail with EIO within the configured timeout (never hang), the
// mount comes back by itself when the network does, and every file that
// was fsync'ed before is intact afterwards, on this mount and on another.
func TestOutages(t *testing.T) {
	f := mounttest.NewFS(t)
	x := mounttest.NewToxi(t, f.URL)
	const timeout = time.Second
	const lease = 2 * time.Second
	m := f.MountAt(t, t.TempDir(), nil, "--es-url", x.URL, "--es-timeout", timeout.String(), "--lease", lease.String())
	// Another mount with a direct line, which stays healthy throughout and
	// judges the first one when it falls silent.
	other := f.Mount(t, "--lease", lease.String())

	synced := map[string][]byte{}
	writeSynced := func(name string, size int) {
		t.Helper()
		data := make([]byte, size)
		rand.New(rand.NewSource(int64(size))).Read(data)
		fh, err := os.Create(m.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		synced[name] = data
	}
	checkSynced := func(when string, on ...*mounttest.Mount) {
		t.Helper()
		if len(on) == 0 {
			on = []*mounttest.Mount{m, other}
		}
		for _, dir := range on {
			for name, want := range synced {
				got, err := os.ReadFile(dir.Path(name))
				if err != nil || !bytes.Equal(got, want) {
					t.Errorf("%s: %s on %s: %d bytes (%v), want the %d fsync'ed", when, name, dir.Dir, len(got), err, len(want))
				}
			}
		}
	}
	// failFast runs operations that need the cluster and checks each fails
	// with EIO within the bound.
	bound := 2*timeout + 3*time.Second // a request's timeout, twice, plus scheduling
	n := 0
	failFast := func(phase string) {
		t.Helper()
		n++
		for _, op := range []struct {
			name string
			do   func() error
		}{
			{"stat of an unknown name", func() error { _, err := os.Stat(m.Path(fmt.Sprintf("unknown%d", n))); return err }},
			{"create", func() error { return os.WriteFile(m.Path(fmt.Sprintf("new%d", n)), []byte("x"), 0o644) }},
			{"mkdir", func() error { return os.Mkdir(m.Path(fmt.Sprintf("dir%d", n)), 0o755) }},
			{"rename", func() error { return os.Rename(m.Path("small"), m.Path(fmt.Sprintf("small%d", n))) }},
			{"listing", func() error { _, err := os.ReadDir(m.Path()); return err }},
		} {
			start := time.Now()
			err := op.do()
			took := time.Since(start)
			if !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ETIMEDOUT) {
				t.Errorf("%s: %s: %v, want EIO", phase, op.name, err)
			}
			if took > bound {
				t.Errorf("%s: %s took %s, bound %s", phase, op.name, took, bound)
			}
			t.Logf("%s: %s: %v after %s", phase, op.name, err, took.Round(time.Millisecond))
		}
	}
	recovers := func(phase string) {
		t.Helper()
		waitFor(t, phase+": the mount works again", 30*time.Second, func() bool {
			return os.WriteFile(m.Path("probe"), []byte(phase), 0o644) == nil
		})
		if _, err := os.ReadDir(m.Path()); err != nil {
			t.Errorf("%s: listing after recovery: %v", phase, err)
		}
		checkSynced(phase)
	}

	writeSynced("big", 3<<20+777)
	writeSynced("small", 100)

	// A slow network, under the timeout: everything works, slowly.
	slow := x.Add(t, "latency", "downstream", `{"latency":150}`)
	start := time.Now()
	if err := os.Mkdir(m.Path("slow"), 0o755); err != nil {
		t.Errorf("mkdir over a 150 ms link: %v", err)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("mkdir over a 150 ms link took %s: the toxic is not in the way", took)
	}
	writeSynced("slow/written-slowly", 1<<20+5)
	x.Remove(t, slow)

	// Slower than the timeout: failures within the bound, then recovery.
	stuck := x.Add(t, "latency", "downstream", `{"latency":4000}`)
	failFast("latency over the timeout")
	x.Remove(t, stuck)
	recovers("latency over the timeout")

	// Every connection reset by the peer.
	reset := x.Add(t, "reset_peer", "upstream", `{"timeout":0}`)
	failFast("connections reset")
	x.Remove(t, reset)
	recovers("connections reset")

	// A blackhole: requests are swallowed, nothing comes back.
	hole := x.Add(t, "timeout", "upstream", `{"timeout":0}`)
	failFast("blackhole")
	x.Remove(t, hole)
	recovers("blackhole")

	// A full outage longer than the lease: the other mount declares this
	// one dead meanwhile; when the network returns, this mount notices it
	// was fenced and starts a new session by itself.
	writeSynced("before-outage", 64<<10)
	x.Down()
	failFast("full outage")
	time.Sleep(lease + lease/2 + time.Second) // silent past lease + grace
	out, err := f.Run("status", "--observe", "1s")
	t.Logf("esfs status during the outage (%v):\n%s", err, out)
	// The other mount works throughout, and sees what was fsync'ed.
	if err := os.WriteFile(other.Path("during-outage"), []byte("other"), 0o644); err != nil {
		t.Errorf("the healthy mount during the outage: %v", err)
	}
	checkSynced("during the outage (other mount)", other)
	x.Up(t)
	recovers("full outage")
	if got, err := os.ReadFile(m.Path("during-outage")); err != nil || string(got) != "other" {
		t.Errorf("after the outage, the other mount's file: %q, %v", got, err)
	}
	writeSynced("after-outage", 5000)
	checkSynced("the end")

	// Unmounting during an outage ends too (with what could not be saved
	// reported), it does not hang.
	x.Down()
	start = time.Now()
	m.Signal(syscall.SIGTERM)
	if _, ok := m.WaitExit(2 * time.Minute); !ok {
		t.Fatalf("the mount did not exit within 2 minutes of SIGTERM during an outage:\n%s", m.Log())
	}
	t.Logf("unmount during an outage took %s", time.Since(start).Round(time.Millisecond))
	x.Up(t)
}
