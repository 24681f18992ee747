package test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// runCLI runs the esfs binary with a deadline and returns its output and
// exit status.
func runCLI(t *testing.T, limit time.Duration, args ...string) (string, int, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, mounttest.Binary(t), args...)
	cmd.Env = append(os.Environ(), "ELASTICSEARCH_URL=")
	cmd.WaitDelay = time.Second // a stray child holding our pipes must not hang the test
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if ctx.Err() != nil {
		t.Fatalf("esfs %q hung for %s", args, limit)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code, took
}

// TestCommandLineErrors: each mistake a user can make ends with one clear
// line and a non-zero exit, within seconds, never a hang or a stack trace.
func TestCommandLineErrors(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	emptyDir := t.TempDir()
	cases := []struct {
		name string
		args []string
		code int
		want string // must appear in the one line
	}{
		{"no cluster at the URL", []string{"mount", "--es-url", "http://127.0.0.1:1", "--index", f.Index, emptyDir}, 1, "cannot reach Elasticsearch"},
		{"index not made by mkfs", []string{"mount", "--es-url", f.URL, "--index", "esfs-never-made", emptyDir}, 1, "esfs mkfs"},
		{"mount point missing", []string{"mount", "--es-url", f.URL, "--index", f.Index, "/nonexistent/esfs"}, 1, "does not exist"},
		{"mount point not a directory", []string{"mount", "--es-url", f.URL, "--index", f.Index, notDir}, 1, "not a directory"},
		{"already mounted", []string{"mount", "--es-url", f.URL, "--index", f.Index, m.Dir}, 1, "already a mount point"},
		{"no mount point", []string{"mount", "--es-url", f.URL}, 2, "exactly one argument"},
		{"unknown flag", []string{"mount", "--no-such-flag", emptyDir}, 2, "flag provided but not defined"},
		{"bad index name", []string{"mkfs", "--es-url", f.URL, "--index", "Bad/Name"}, 1, "index name"},
		{"bad URL", []string{"mkfs", "--es-url", "localhost:9200"}, 1, "http(s)://host:port"},
		{"credentials in the URL stay secret", []string{"mount", "--es-url", "http://someone:hunter2@127.0.0.1:1", "--index", f.Index, emptyDir}, 1, "cannot reach Elasticsearch"},
		{"umount of a non-mount", []string{"umount", emptyDir}, 1, "not mounted"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"negative timeout", []string{"mount", "--attr-timeout=-1s", emptyDir}, 2, "must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, code, took := runCLI(t, 30*time.Second, c.args...)
			lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
			if code != c.code {
				t.Errorf("exit status %d, want %d; output:\n%s", code, c.code, out)
			}
			if len(lines) != 1 || !strings.Contains(out, c.want) {
				t.Errorf("want one line containing %q, got:\n%s", c.want, out)
			}
			if strings.Contains(out, "goroutine") || strings.Contains(out, "hunter2") {
				t.Errorf("stack trace or secret in the output:\n%s", out)
			}
			if took > 20*time.Second {
				t.Errorf("took %s", took)
			}
		})
	}
	if mounttest.IsMounted(emptyDir) {
		t.Fatal("a failed mount left a mount behind")
	}
}

// TestDaemonMode: --daemon returns once mounted with status 0, and with a
// clear error and non-zero status when it cannot mount.
func TestDaemonMode(t *testing.T) {
	f := mounttest.NewFS(t)
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "esfs.log") // not the system's log directory
	out, code, _ := runCLI(t, 60*time.Second, "mount", "--daemon", "--log-file", logFile, "--es-url", f.URL, "--index", f.Index, dir)
	if code != 0 || !mounttest.IsMounted(dir) {
		t.Fatalf("daemon mount: status %d, mounted %v:\n%s", code, mounttest.IsMounted(dir), out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	pid, conn := daemonOf(t, out, dir)
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("daemon"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code, _ = runCLI(t, 60*time.Second, "umount", dir)
	if code != 0 || mounttest.IsMounted(dir) {
		t.Fatalf("umount: status %d:\n%s", code, out)
	}
	mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
	out, code, _ = runCLI(t, 60*time.Second, "mount", "--daemon", "--es-url", f.URL, "--index", "esfs-never-made", dir)
	if code == 0 || !strings.Contains(out, "esfs mkfs") || mounttest.IsMounted(dir) {
		t.Fatalf("daemon mount of a missing filesystem: status %d:\n%s", code, out)
	}
}

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

// TestCorruptDocuments: a damaged document is an EIO for that path only,
// with a log line; the rest of the tree and the mount keep working.
func TestCorruptDocuments(t *testing.T) {
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

// TestElasticsearchOutage: with the cluster unreachable, operations fail
// with EIO within a bound instead of hanging, data fsynced before is
// intact, and the mount works again by itself when the cluster is back.
func TestElasticsearchOutage(t *testing.T) {
	f := mounttest.NewFS(t)
	proxy := mounttest.NewProxy(t, testenv.URL(t))
	const timeout = 2 * time.Second
	m := f.MountAt(t, t.TempDir(), nil, "--es-url", proxy.URL, "--es-timeout", timeout.String())

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

	proxy.SetUp(false)
	bound := 2*timeout + 3*time.Second // ctxOf's deadline plus scheduling
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

	proxy.SetUp(true)
	waitFor(t, "recovery", 30*time.Second, func() bool {
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
