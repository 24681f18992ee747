package test

// Failures: the cluster unreachable, slow, resetting or swallowing
// requests (a proxy between a mount and the cluster), a node of a 3-node
// cluster killed, requests that land after their sender gave up, and
// damaged documents. Operations fail with EIO within their timeout, never
// hang, and the mount comes back by itself; nothing acknowledged is lost.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// putRaw writes a document into one of the filesystem's indices behind the
// mount's back, as damage or a buggy client would.
func putRaw(t *testing.T, url, index, id string, doc any) {
	t.Helper()
	body, _ := json.Marshal(doc)
	req, _ := http.NewRequest("PUT", fmt.Sprintf("%s/%s/_doc/%s?refresh=true", url, index, id), bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		t.Fatalf("raw put %s/%s: %s", index, id, res.Status)
	}
}

// TestCorruptDocumentIsEIOForItsPathOnly: a damaged document is an EIO for that path only,
// with a log line; the rest of the tree and the mount keep working.
func TestCorruptDocumentIsEIOForItsPathOnly(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	if err := os.WriteFile(m.Path("good"), []byte("fine"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A path document that disagrees with itself (wrong parent).
	putRaw(t, f.URL, f.Index, store.DocID("/badpath"), map[string]any{"path": "/badpath", "parent": "/elsewhere", "name": "badpath", "ino": 12345, "type": "file"})
	// A valid path whose inode document is nonsense.
	putRaw(t, f.URL, f.Index+"-inodes", "777777", map[string]any{"ino": 777777, "type": "banana", "mode": 420})
	putRaw(t, f.URL, f.Index, store.DocID("/badinode"), map[string]any{"path": "/badinode", "parent": "/", "name": "badinode", "ino": 777777, "type": "file"})
	// A path whose inode is missing.
	putRaw(t, f.URL, f.Index, store.DocID("/noinode"), map[string]any{"path": "/noinode", "parent": "/", "name": "noinode", "ino": 888888, "type": "file"})

	for _, name := range []string{"badpath", "badinode", "noinode"} {
		_, err := os.Stat(m.Path(name))
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("stat %s: %v, want EIO", name, err)
		}
	}
	if b, err := os.ReadFile(m.Path("good")); err != nil || string(b) != "fine" {
		t.Fatalf("good file: %q %v", b, err)
	}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatalf("listing with corrupt entries: %v", err)
	}
	found := false
	for _, e := range entries {
		found = found || e.Name() == "good"
	}
	if !found {
		t.Fatal("listing lost the good file")
	}
	if err := os.WriteFile(m.Path("after"), []byte("still up"), 0o644); err != nil {
		t.Fatalf("mount broken after corrupt documents: %v", err)
	}
	if log := m.Log(); !strings.Contains(log, "corrupt") {
		t.Fatalf("no log line about the corrupt documents:\n%s", log)
	}
}

// TestOutageFailsFastAndRecovers: with the cluster unreachable, operations fail
// with EIO within a bound instead of hanging, data fsynced before is
// intact, and the mount works again by itself when the cluster is back.
func TestOutageFailsFastAndRecovers(t *testing.T) {
	f := mounttest.NewFS(t)
	proxy := mounttest.NewToxi(t, testenv.URL(t))
	const timeout = 2 * time.Second
	// Write delegations pinned off, as in the test below: the operations
	// must need the cluster.
	m := f.MountAt(t, t.TempDir(), nil, "--es-url", proxy.URL, "--es-timeout", timeout.String(), "--write-delegations=false")

	fh, err := os.Create(m.Path("kept"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.Write(bytes.Repeat([]byte("k"), 3<<20)); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	fh.Close()

	proxy.Down()
	// ctxOf's deadline (twice the request timeout), and as much again for
	// scheduling on a loaded machine; a hang, or a wait for the lock
	// timeout (30s) or a default request timeout (15s), still fails it.
	bound := 4*timeout + 3*time.Second
	for _, op := range []struct {
		name string
		do   func() error
	}{
		{"stat of an unknown name", func() error { _, err := os.Stat(m.Path("unknown")); return err }},
		{"create", func() error { return os.WriteFile(m.Path("new"), []byte("x"), 0o644) }},
		{"mkdir", func() error { return os.Mkdir(m.Path("dir"), 0o755) }},
		{"listing", func() error { _, err := os.ReadDir(m.Path()); return err }},
	} {
		start := time.Now()
		err := op.do()
		took := time.Since(start)
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%s during the outage: %v, want EIO", op.name, err)
		}
		if took > bound {
			t.Errorf("%s took %s, bound %s", op.name, took, bound)
		}
		t.Logf("%s: %v after %s", op.name, err, took.Round(time.Millisecond))
	}

	proxy.Up(t)
	mounttest.WaitFor(t, "recovery", 30*time.Second, func() bool {
		return os.WriteFile(m.Path("after"), []byte("back"), 0o644) == nil
	})
	b, err := os.ReadFile(m.Path("kept"))
	if err != nil || !bytes.Equal(b, bytes.Repeat([]byte("k"), 3<<20)) {
		t.Fatalf("fsynced file after the outage: %d bytes, %v", len(b), err)
	}
	if _, err := os.ReadDir(m.Path()); err != nil {
		t.Fatal(err)
	}
}

// TestOutageNetworkFaultsFailFastAndRecover puts toxiproxy between a mount and the cluster and makes the
// network slow, hostile and absent in turn. Each time operations either
// work or fail with EIO within the configured timeout (never hang), the
// mount comes back by itself when the network does, and every file that
// was fsync'ed before is intact afterwards, on this mount and on another.
func TestOutageNetworkFaultsFailFastAndRecover(t *testing.T) {
	f := mounttest.NewFS(t)
	x := mounttest.NewToxi(t, f.URL)
	// Two seconds, not one: a 3 MB bulk on a loaded CI machine (two
	// shards of the suite, the race detector) once took more than one
	// before any toxic was in the way.
	const timeout = 2 * time.Second
	const lease = 2 * time.Second
	// Write delegations pinned off: the operations below must need the
	// cluster. A directory written in memory (the root, once this mount
	// has changed it alone) takes creates, mkdirs and renames without a
	// request while its lease lasts, which is right, and then fails none
	// of them.
	m := f.MountAt(t, t.TempDir(), nil, "--es-url", x.URL, "--es-timeout", timeout.String(), "--lease", lease.String(), "--write-delegations=false")
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
	// A request's timeout, twice, and as much again for scheduling on a
	// loaded machine; a hang, or a wait for the lock timeout (30s) or a
	// default request timeout (15s), still fails it.
	bound := 4*timeout + 3*time.Second
	n := 0
	failFast := func(phase string) {
		t.Helper()
		n++
		for _, op := range []struct {
			name string
			do   func() error
		}{
			// In a directory the other mount made and this one never
			// listed: a directory this mount holds a delegation on
			// answers for an unknown name from memory (ENOENT) while
			// its lease lasts, correctly, and is not what this checks.
			{"stat of an unknown name", func() error {
				_, err := os.Stat(m.Path(fmt.Sprintf("elsewhere%d/unknown", n)))
				return err
			}},
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
		// A write and a listing both work again. Not the listing at
		// the first write that works: a request sent through the old
		// network (a connection the latency toxic still delays, say)
		// may still fail one, within the timeout, as any call may
		// while the network changes (twice in CI: readdirent EIO).
		mounttest.WaitFor(t, phase+": the mount works again", 30*time.Second, func() bool {
			if err := os.WriteFile(m.Path("probe"), []byte(phase), 0o644); err != nil {
				return false
			}
			_, err := os.ReadDir(m.Path())
			if err != nil {
				t.Logf("%s: a listing after the first write that worked: %v", phase, err)
			}
			return err == nil
		})
		checkSynced(phase)
	}

	for i := 1; i <= 5; i++ {
		if err := os.Mkdir(other.Path(fmt.Sprintf("elsewhere%d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
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

// threeNodes is a 3-node cluster of its own for one test: started with
// test/es.sh on ports of its own (so that it runs beside the plain and the
// secure clusters) and stopped when the test ends. ESFS_TEST_SKIP_3NODE=1
// skips the tests that need it.
type threeNodes struct {
	urls []string
	home string
}

func startThreeNodes(t *testing.T) *threeNodes {
	t.Helper()
	if os.Getenv("ESFS_TEST_SKIP_3NODE") == "1" {
		t.Skip("ESFS_TEST_SKIP_3NODE=1")
	}
	home := os.Getenv("ESFS_TEST_3NODE_HOME")
	if home == "" {
		home = "/var/tmp/esfs-es-3node"
	}
	c := &threeNodes{home: home}
	const httpPort, transportPort = 9270, 9470
	env := []string{"ESFS_ES_HOME=" + home, "ESFS_ES_PORT=" + strconv.Itoa(httpPort),
		"ESFS_ES_TRANSPORT_PORT=" + strconv.Itoa(transportPort), "ESFS_ES_HEAP=512m"}
	script := filepath.Join(mounttest.RepoRoot(), "test", "es.sh")
	run := func(args ...string) (string, error) {
		cmd := exec.Command(script, args...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	start := time.Now()
	if out, err := run("start", "--nodes", "3"); err != nil {
		t.Fatalf("test/es.sh start --nodes 3: %v\n%s", err, out)
	}
	t.Logf("3-node cluster up in %s", time.Since(start).Round(time.Second))
	t.Cleanup(func() {
		if out, err := run("stop"); err != nil {
			t.Errorf("test/es.sh stop (3 nodes): %v\n%s", err, out)
		}
	})
	for i := 0; i < 3; i++ {
		c.urls = append(c.urls, fmt.Sprintf("http://127.0.0.1:%d", httpPort+i))
	}
	return c
}

// kill kills node i at once (SIGKILL: no goodbye to the cluster).
func (c *threeNodes) kill(t *testing.T, i int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.home, "run", fmt.Sprintf("esfs-%d", i), "es.pid"))
	if err != nil {
		t.Fatalf("pid of node %d: %v", i, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file of node %d: %q", i, b)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing node %d (pid %d): %v", i, pid, err)
	}
}

// health returns the cluster's status and node count, asking node i.
func (c *threeNodes) health(i int) (string, int, error) {
	res, err := http.Get(c.urls[i] + "/_cluster/health")
	if err != nil {
		return "", 0, err
	}
	defer res.Body.Close()
	var h struct {
		Status string `json:"status"`
		Nodes  int    `json:"number_of_nodes"`
	}
	err = json.NewDecoder(res.Body).Decode(&h)
	return h.Status, h.Nodes, err
}

// TestOutageNodeLossDuringRenameStorm: three mounts run the rename storm against a 3-node
// cluster (every shard with a replica) and one node is killed a third of
// the way in. Operations in flight on that node may fail with EIO (their
// outcome is unknown, and the storm's model treats them so); at the end
// the tree is exactly what the acknowledged operations made: nothing
// lost, nothing duplicated, and every invariant holds. EIO is tolerated
// before the kill and after the cluster settled too, and logged as such:
// three nodes share two cores with the rest of the suite, and in CI
// (2026-11-27) a refresh outlasted --es-timeout with no node lost yet.
// What an EIO left is the model's to settle either way.
func TestOutageNodeLossDuringRenameStorm(t *testing.T) {
	c := startThreeNodes(t)
	f := mounttest.NewFSOn(t, strings.Join(c.urls, ","))
	secs := mounttest.EnvInt(t, "ESFS_CLUSTER_STORM_SECONDS", 60)
	var killedAt atomic.Int64       // unix nanoseconds; 0 before the kill
	const settle = 20 * time.Second // failover (replica promotion) and the mounts' pools noticing
	lkStormOn(t, f, lkStormCfg{
		strategy: "tree",
		secs:     secs,
		extra:    []string{"--es-timeout", "5s"},
		tolerate: func(err error) bool {
			if !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ETIMEDOUT) {
				return false
			}
			if at := killedAt.Load(); at == 0 || time.Since(time.Unix(0, at)) > settle {
				t.Logf("an EIO with no node being lost (a request outlasted --es-timeout on a loaded machine): %v", err)
			}
			return true
		},
		during: func(s *lkStormRun, start time.Time) {
			time.Sleep(time.Duration(secs) * time.Second / 3)
			status, nodes, err := c.health(0)
			t.Logf("before the kill: cluster %s with %d nodes (%v); killing node 2", status, nodes, err)
			killedAt.Store(time.Now().UnixNano())
			c.kill(t, 2)
			deadline := time.Now().Add(settle)
			for time.Now().Before(deadline) {
				if status, nodes, err = c.health(0); err == nil && nodes == 2 && status != "red" {
					break
				}
				time.Sleep(250 * time.Millisecond)
			}
			t.Logf("%s after the kill: cluster %s with %d nodes (%v)", time.Since(time.Unix(0, killedAt.Load())).Round(time.Millisecond), status, nodes, err)
			if status == "red" || nodes != 2 {
				t.Errorf("the cluster did not recover from losing one node of three: %s, %d nodes", status, nodes)
			}
		},
	})
	if killedAt.Load() == 0 {
		t.Fatal("the node was never killed")
	}
}

// TestOutageCutOffRenameOwnerFencesItself: the owner of
// a large rename loses its connection to the cluster (the proxy closes every
// connection and refuses new ones) mid-stage, for longer than its lease. It must fence itself;
// the survivor declares it dead and undoes (or finishes) the rename; when
// the connection comes back, the owner starts a new session and nothing
// of its old operation is left.
func TestOutageCutOffRenameOwnerFencesItself(t *testing.T) {
	f := mounttest.NewFS(t)
	proxy := mounttest.NewToxi(t, testenv.URL(t))
	b := mounttest.MountUncached(t, f, nil)
	a := mounttest.MountUncached(t, f, nil, "--es-url", proxy.URL, "--es-timeout", "2s")
	names := mounttest.Names(2500)
	mounttest.Populate(t, f, "/src", names, mounttest.Content)
	sessA := mounttest.Session(t, f, a)
	mv := mounttest.Background(func() mounttest.Result { // rename(2), not mv: see TestCrashFrozenRenameOwnerIsFencedAfterTakeover
		s := time.Now()
		err := os.Rename(a.Path("src"), a.Path("dst"))
		return mounttest.Result{Err: err, Took: time.Since(s), End: time.Now()}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	var op store.OpRecord
	for op.ID == "" {
		recs, err := f.Store.SearchOps(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Owner == sessA.ID && r.Src == "/src" {
				op = r
			}
		}
		if time.Since(start) > time.Minute {
			t.Fatal("A's rename record did not appear within a minute")
		}
	}
	proxy.Down()
	cut := time.Now()
	t.Logf("cut A off %s after its rename started; its operation was %s when seen", cut.Sub(start).Round(time.Millisecond), op.State)
	r := mounttest.WaitResult(t, "A's rename while cut off", mv, time.Minute)
	t.Logf("REPORT %s: A's rename(2) while cut off: %v, %s after the cut", t.Name(), r.Err, r.End.Sub(cut).Round(time.Millisecond))

	// B must recover while A is still cut off.
	var probs []string
	var took time.Duration
	for {
		probs, _, _ = mounttest.IndexProblems(t, f, false)
		took = time.Since(cut)
		if len(probs) == 0 || took > mounttest.RecoveredWithin+30*time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(probs) > 0 {
		t.Fatalf("B did not recover A's rename while A was cut off:\n  %s", mounttest.JoinCapped(probs, 20))
	}
	if took > mounttest.RecoveredWithin {
		t.Errorf("recovery took %s after the cut, bound %s", took.Round(time.Millisecond), mounttest.RecoveredWithin)
	}
	rec, err := f.Store.GetOp(ctx, op.ID)
	t.Logf("REPORT %s: B cleaned up A's rename %s after the cut; record now %s aborted=%v owner=%s (%v)",
		t.Name(), took.Round(10*time.Millisecond), rec.State, rec.Aborted, rec.Owner, err)
	want := mounttest.NewTree().Add("src", names)
	if rec.State == store.OpDone && !rec.Aborted {
		want = mounttest.NewTree().Add("dst", names)
		if r.Err != nil {
			t.Logf("REPORT %s: the rename happened but A's rename(2) reported %v (an unknown outcome reported as an error)", t.Name(), r.Err)
		}
	} else if r.Err == nil {
		t.Errorf("A's rename(2) reported success but the rename was rolled back")
	}
	if probs := mounttest.VerifyEventually(b, want, "", false); len(probs) > 0 {
		t.Errorf("B's view after recovery:\n  %s", mounttest.JoinCapped(probs, 20))
	}
	if time.Since(cut) < 2*mounttest.Lease {
		time.Sleep(2*mounttest.Lease - time.Since(cut))
	}
	if !strings.Contains(a.Log(), "heartbeat failed") {
		t.Errorf("A's log does not show its heartbeat failing while cut off")
	}

	proxy.Up(t)
	restored := time.Now()
	mounttest.WaitLog(t, a, "started a new session", 30*time.Second)
	t.Logf("REPORT %s: A started a new session %s after the connection came back", t.Name(), time.Since(restored).Round(time.Millisecond))
	if err := os.WriteFile(a.Path("after-a"), []byte("A is back\n"), 0o644); err != nil {
		t.Errorf("a create in A after it came back: %v", err)
	}
	want.Files["after-a"] = "A is back\n"
	if _, ok := mounttest.WaitClean(t, f, b, want, time.Now(), 20*time.Second); ok {
		mounttest.FinalCheck(t, f, b, want)
	}
	if probs := mounttest.VerifyEventually(a, want, "", false); len(probs) > 0 {
		t.Errorf("A's view after it came back:\n  %s", mounttest.JoinCapped(probs, 20))
	}
}

// lateLocks reads the lock documents of paths in real time and returns
// those that exist.
func lateLocks(t *testing.T, f *mounttest.FS, paths ...string) []store.LockDoc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ids := make([]string, len(paths))
	for i, p := range paths {
		ids[i] = store.LockID(p)
	}
	docs, err := f.Store.GetLocks(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	var out []store.LockDoc
	for _, d := range docs {
		if d.Found {
			out = append(out, d)
		}
	}
	return out
}

// lateIntents returns the path documents carrying an intent.
func lateIntents(t *testing.T, f *mounttest.FS) []store.Dentry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx, store.SearchedPaths); err != nil {
		t.Fatal(err)
	}
	sc := f.Store.ScanIntents(store.DefaultPageSize)
	defer sc.Close()
	var out []store.Dentry
	for {
		page, _, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if page == nil {
			return out
		}
		out = append(out, page...)
	}
}

// TestLateLockBulkIsCollected: a mount's lock bulk is held
// by the network past the mount's request deadline and lands after the
// mount gave up. The operation fails cleanly; the entries the late bulk
// wrote belong to a live session and an operation it has finished, and
// are gone within lease + grace, so nothing is locked forever.
func TestLateLockBulkIsCollected(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	b := mounttest.MountUncached(t, f, nil)
	// Without delegations: their grants and recalls are lock bulks too,
	// made in the background, and the fault below must hold the mkdir's.
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String(), "--delegations=false")

	// In a directory: a create at the root takes no lock at all (the root
	// is never locked, and the name is decided by create-if-absent), one
	// below /p takes the shared lock of /p.
	if err := os.Mkdir(a.Path("p"), 0o755); err != nil {
		t.Fatal(err)
	}
	late := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("-locks"), Delay: mounttest.LateDelay, Reset: true})
	start := time.Now()
	err := os.Mkdir(a.Path("p", "d"), 0o755)
	took := time.Since(start)
	t.Logf("REPORT %s: mkdir whose lock bulk was held %s: %s after %s", t.Name(), mounttest.LateDelay, mounttest.Errno(err), took.Round(time.Millisecond))
	if err == nil {
		t.Fatalf("mkdir succeeded although its lock bulk never answered")
	}
	// By its deadline, not when the held request comes back (or is reset).
	if took >= mounttest.LateDelay {
		t.Errorf("mkdir took %s to fail; its request deadline is %s", took, mounttest.LateTimeout)
	}
	mounttest.WaitLanded(t, late)
	landed := time.Now()
	left := lateLocks(t, f, "/p/d", "/p")
	if len(left) == 0 {
		t.Fatal("the late lock bulk left no entry: the test provoked nothing")
	}
	t.Logf("the late bulk left %d lock documents, e.g. %+v", len(left), left[0])

	// Both mounts stay alive throughout: the entries must go because the
	// session says the operation is over, not because a mount died.
	for len(left) > 0 {
		if time.Since(landed) > mounttest.RecoveredWithin {
			t.Fatalf("lock entries of a finished operation still there %s after they landed: %+v", mounttest.RecoveredWithin, left)
		}
		time.Sleep(50 * time.Millisecond)
		left = lateLocks(t, f, "/p/d", "/p")
	}
	t.Logf("REPORT %s: the late entries were collected %s after they landed (lease %s, grace %s)", t.Name(),
		time.Since(landed).Round(time.Millisecond), mounttest.Lease, mounttest.Lease/2)
	if a.Exited() || b.Exited() {
		t.Fatal("a mount exited")
	}
	if err := os.Mkdir(a.Path("p", "d"), 0o755); err != nil {
		t.Fatalf("mkdir again once the entries were collected: %v", err)
	}
	if err := os.WriteFile(b.Path("p", "d", "from-b"), []byte("b\n"), 0o644); err != nil {
		t.Fatalf("create below the directory from the other mount: %v", err)
	}
	want := mounttest.NewTree().Add("p", nil).Add("p/d", nil)
	want.Files["p/d/from-b"] = "b\n"
	if _, ok := mounttest.WaitClean(t, f, a, want, time.Now(), mounttest.StaleWithin); ok {
		mounttest.FinalCheck(t, f, b, want)
	}
}

// TestLateStageBulkStaysInvisible: the network holds the
// third stage bulk of a mount (the one of its third rename) past the
// deadline, then resets the connection; the request lands after the mount
// rolled the rename back. Its late writes (a new path, a marked source)
// must stay invisible, be collected by a sweeper, and not stop the rename
// from being done again; after `mv b/x c; rm c` nothing reappears.
func TestLateStageBulkStaysInvisible(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	// Synchronous renames: one made in memory would never meet the held
	// bulk.
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String(), "--write-delegations=false")
	b := mounttest.MountUncached(t, f, nil)
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(a.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"f1", "f2", "x"} {
		if err := os.WriteFile(a.Path("a", n), []byte(mounttest.Content(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	late := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("", `"role":"dst"`), Nth: 3, Delay: mounttest.LateDelay, Reset: true})
	for _, n := range []string{"f1", "f2"} {
		if err := os.Rename(a.Path("a", n), a.Path("b", n)); err != nil {
			t.Fatalf("rename of %s: %v", n, err)
		}
	}
	// rename(2), not mv: GNU mv would retry a failed rename by itself.
	start := time.Now()
	err := os.Rename(a.Path("a", "x"), a.Path("b", "x"))
	t.Logf("REPORT %s: the rename whose stage bulk was held: %s after %s", t.Name(), mounttest.Errno(err), time.Since(start).Round(time.Millisecond))
	if err == nil {
		t.Fatal("the rename succeeded although its stage bulk never answered")
	}
	mounttest.WaitLanded(t, late)
	landed := time.Now()

	// The rename was rolled back: x is where it was, on both mounts, and
	// the late writes show nowhere.
	want := mounttest.NewTree().Add("a", []string{"x"}).Add("b", []string{"f1", "f2"})
	for _, m := range []*mounttest.Mount{a, b} {
		if probs := mounttest.VerifyEventually(m, want, "", true); len(probs) > 0 {
			t.Errorf("%s right after the late stage landed:\n  %s", m.Dir, mounttest.JoinCapped(probs, 10))
		}
	}
	// A sweeper collects what the late bulk wrote, while both mounts live.
	strays := lateIntents(t, f)
	t.Logf("the late stage left %d documents with an intent", len(strays))
	for len(strays) > 0 {
		if time.Since(landed) > mounttest.RecoveredWithin {
			t.Fatalf("stray documents of a finished rename still there %s after they landed: %+v", mounttest.RecoveredWithin, strays)
		}
		time.Sleep(100 * time.Millisecond)
		strays = lateIntents(t, f)
	}
	t.Logf("REPORT %s: strays collected %s after the late stage landed", t.Name(), time.Since(landed).Round(time.Millisecond))

	// Done again, then moved and removed: nothing reappears.
	if err := os.Rename(a.Path("a", "x"), a.Path("b", "x")); err != nil {
		t.Fatalf("the rename, done again: %v", err)
	}
	if err := os.Rename(a.Path("b", "x"), a.Path("c")); err != nil {
		t.Fatalf("mv b/x c: %v", err)
	}
	if err := os.Remove(a.Path("c")); err != nil {
		t.Fatalf("rm c: %v", err)
	}
	want = mounttest.NewTree().Add("a", nil).Add("b", []string{"f1", "f2"})
	for until := time.Now().Add(mounttest.RecoveredWithin); time.Now().Before(until); time.Sleep(500 * time.Millisecond) {
		for _, m := range []*mounttest.Mount{a, b} {
			for _, p := range []string{"a/x", "b/x", "c"} {
				if _, err := os.Lstat(m.Path(p)); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("%s reappeared on %s: %v", p, m.Dir, err)
				}
			}
		}
	}
	if _, ok := mounttest.WaitClean(t, f, b, want, time.Now(), mounttest.StaleWithin); ok {
		mounttest.FinalCheck(t, f, b, want)
	}
}
