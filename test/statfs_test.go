package test

// statfs(2) of a mount: the cluster's disk space and the filesystem's inodes.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// TestStatfsReportsClusterDiskAndInodes: df on a mount shows the disk of
// the cluster's data nodes (GET /_nodes/stats/fs, asked here separately)
// and counts one used inode per inode document (GET <inodes>/_count).
func TestStatfsReportsClusterDiskAndInodes(t *testing.T) {
	f := mounttest.NewFS(t)
	// Without write delegations every create is in Elasticsearch when it
	// returns, so after a refresh the count is exact.
	m := f.Mount(t, "--write-delegations=false")
	const files = 3
	for i := range files {
		if err := os.WriteFile(m.Path(fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.Store.Refresh(ctx, store.SearchedAll); err != nil {
		t.Fatal(err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(m.Dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", m.Dir, err)
	}
	const bs = 4096
	if st.Bsize != bs || st.Frsize != bs {
		t.Errorf("block size %d, fragment size %d; want %d", st.Bsize, st.Frsize, bs)
	}
	if used, want := st.Files-st.Ffree, uint64(1+files+1); used != want {
		t.Errorf("%d inodes used (files %d, free %d); want %d: the root, %d files and a directory", used, st.Files, st.Ffree, want, files)
	}
	total := clusterDiskTotal(t)
	if got := st.Blocks * bs; got > total || total-got >= bs*16 {
		t.Errorf("statfs says %d bytes of disk; the cluster's data nodes have %d", got, total)
	}
	if st.Bfree == 0 || st.Bfree > st.Blocks || st.Bavail != st.Bfree {
		t.Errorf("free blocks %d, available %d, of %d", st.Bfree, st.Bavail, st.Blocks)
	}
}

// clusterDiskTotal is the summed disk size of the cluster's nodes, as the
// node stats say.
func clusterDiskTotal(t *testing.T) uint64 {
	t.Helper()
	url := strings.TrimRight(strings.Split(testenv.URL(t), ",")[0], "/") + "/_nodes/stats/fs?filter_path=nodes.*.fs.total.total_in_bytes"
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct {
		Nodes map[string]struct {
			FS struct {
				Total struct {
					Total uint64 `json:"total_in_bytes"`
				} `json:"total"`
			} `json:"fs"`
		} `json:"nodes"`
	}
	if res.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, res.Status)
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	var total uint64
	for _, n := range body.Nodes {
		total += n.FS.Total.Total
	}
	if total == 0 {
		t.Fatalf("GET %s: no node reports its disk", url)
	}
	return total
}
