package test

import (
	"encoding/json"
	"errors"
	"fmt"
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

	"github.com/esfs/esfs/test/mounttest"
)

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

// TestClusterNodeLoss: three mounts run the rename storm against a 3-node
// cluster (every shard with a replica) and one node is killed a third of
// the way in. Operations in flight on that node may fail with EIO (their
// outcome is unknown, and the storm's model treats them so); once the
// cluster has reorganised, every operation works again; at the end the
// tree is exactly what the acknowledged operations made: nothing lost,
// nothing duplicated, and every invariant holds.
func TestClusterNodeLoss(t *testing.T) {
	c := startThreeNodes(t)
	f := mounttest.NewFSOn(t, strings.Join(c.urls, ","))
	secs := lkEnvInt(t, "ESFS_CLUSTER_STORM_SECONDS", 60)
	var killedAt atomic.Int64       // unix nanoseconds; 0 before the kill
	const settle = 20 * time.Second // failover (replica promotion) and the mounts' pools noticing
	lkStormOn(t, f, lkStormCfg{
		strategy: "tree",
		secs:     secs,
		extra:    []string{"--es-timeout", "5s"},
		tolerate: func(err error) bool {
			at := killedAt.Load()
			if at == 0 || time.Since(time.Unix(0, at)) > settle {
				return false
			}
			return errors.Is(err, syscall.EIO) || errors.Is(err, syscall.ETIMEDOUT)
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
