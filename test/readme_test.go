package test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// TestReadmeQuickStart runs the README's quick start as it stands, from
// nothing to a mounted filesystem and back to nothing: the block a new
// user copies must work. Only what names the user's cluster and machine
// changes: the export lines (the test cluster comes from the
// environment), the index name and the mount point (fresh ones), and
// `esfs` (a shell function running the binary under test).
func TestReadmeQuickStart(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join(mounttest.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := quickStartBlock(t, string(readme))
	const readmeIndex, readmeDir = "myfs", "/mnt/myfs"
	if !strings.Contains(block, "--index "+readmeIndex) || !strings.Contains(block, readmeDir) {
		t.Fatalf("the quick start no longer uses --index %s and %s; update this test with it:\n%s", readmeIndex, readmeDir, block)
	}
	index := testenv.Prefix(t)
	dir := filepath.Join(t.TempDir(), "mnt")
	var lines []string
	for _, l := range strings.Split(block, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "export ") {
			continue
		}
		l = strings.ReplaceAll(l, readmeDir, dir)
		l = strings.ReplaceAll(l, "--index "+readmeIndex, "--index "+index)
		lines = append(lines, l)
	}
	script := "set -euo pipefail\nesfs() { \"$ESFS_BIN\" \"$@\"; }\n" + strings.Join(lines, "\n") + "\n"

	url := testenv.URL(t)
	st, err := store.New(store.Config{URLs: strings.Split(url, ","), Prefix: index, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if mounttest.IsMounted(dir) {
			_ = exec.Command("umount", "-l", dir).Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = st.Admin().DeleteFilesystem(ctx) // only if the script failed before destroy
		st.Close()
	})

	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "ESFS_BIN="+mounttest.Binary(t), "ELASTICSEARCH_URL="+url,
		// The daemon logs to a file of the test's, not to syslog.
		"ESFS_LOG_DIR="+t.TempDir(), "ESFS_SYSLOG_SOCKET="+filepath.Join(t.TempDir(), "none"))
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the quick start did not finish in 3 minutes:\n%s", out)
	}
	t.Logf("the quick start, as run:\n%s\noutput:\n%s", script, out)
	if err != nil {
		t.Fatalf("the quick start failed: %v", err)
	}
	// What the user was shown on the way.
	if !regexp.MustCompile(`(?m)^-rw.* hello\.txt$`).Match(out) {
		t.Errorf("ls -l of the mount did not show hello.txt")
	}
	if !strings.Contains(string(out), dir) {
		t.Errorf("esfs status did not show the mount at %s", dir)
	}
	// And back to nothing: no mount, no index.
	if mounttest.IsMounted(dir) {
		t.Errorf("%s is still mounted after the quick start", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.Open(ctx); err == nil {
		t.Errorf("filesystem %s still opens after esfs destroy", index)
	} else if !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("opening the destroyed filesystem: %v (want: does not exist)", err)
	}
}

// quickStartBlock is the first ```sh block under the README's
// "## Quick start".
func quickStartBlock(t *testing.T, readme string) string {
	_, after, ok := strings.Cut(readme, "\n## Quick start\n")
	if !ok {
		t.Fatal(`README.md has no "## Quick start" section`)
	}
	if next := strings.Index(after, "\n## "); next >= 0 {
		after = after[:next]
	}
	_, block, ok := strings.Cut(after, "```sh\n")
	if !ok {
		t.Fatal("the quick start has no ```sh block")
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatal("the quick start's block is not closed")
	}
	return block
}
