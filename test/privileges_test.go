package test

// The roles of docs/privileges.md are enough, and the read-only one is not
// more than it says: API keys limited to exactly those roles, on the
// secured cluster.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// docRoles reads the role definitions of docs/privileges.md (its blocks
// fenced as "```json <name>"), with <prefix> replaced by prefix.
func docRoles(t *testing.T, prefix string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(mounttest.RepoRoot(), "docs", "privileges.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	roles := map[string]string{}
	var name string
	var body strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case name == "" && strings.HasPrefix(l, "```json "):
			name = strings.TrimSpace(strings.TrimPrefix(l, "```json "))
			body.Reset()
		case name != "" && l == "```":
			role := strings.ReplaceAll(body.String(), "<prefix>", prefix)
			var check map[string]any
			if err := json.Unmarshal([]byte(role), &check); err != nil {
				t.Fatalf("docs/privileges.md: role %s is not JSON: %v", name, err)
			}
			roles[name] = role
			name = ""
		case name != "":
			body.WriteString(l + "\n")
		}
	}
	for _, want := range []string{"esfs-mount", "esfs-reader", "esfs-mkfs", "esfs-destroy", "esfs-config"} {
		if roles[want] == "" {
			t.Fatalf("docs/privileges.md has no role %s", want)
		}
	}
	return roles
}

// roleKey makes an API key limited to role (POST /_security/api_key with
// role_descriptors), as the superuser, invalidated when the test ends; it
// returns the encoded key.
func roleKey(t *testing.T, sc secureCluster, name, role string) string {
	t.Helper()
	body := fmt.Sprintf(`{"name":%q,"expiration":"1h","role_descriptors":{%q:%s}}`, "esfs-test-"+name, name, role)
	var key struct {
		ID      string `json:"id"`
		Encoded string `json:"encoded"`
	}
	if err := json.Unmarshal(superuserCall(t, sc, "POST", "/_security/api_key", body), &key); err != nil || key.Encoded == "" {
		t.Fatalf("creating an API key for %s: %v", name, err)
	}
	t.Cleanup(func() { superuserCall(t, sc, "DELETE", "/_security/api_key", fmt.Sprintf(`{"ids":[%q]}`, key.ID)) })
	return key.Encoded
}

func superuserCall(t *testing.T, sc secureCluster, method, path, body string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, sc.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(sc.User, sc.Password)
	req.Header.Set("Content-Type", "application/json")
	res, err := secureClient(t, sc).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != 200 {
		t.Fatalf("%s %s: %s: %s", method, path, res.Status, b)
	}
	return b
}

// TestSecurePrivileges: with API keys limited to exactly the roles of
// docs/privileges.md, mkfs makes the filesystem; the mount key mounts it
// and works (create, rename, read, df, rmdir), imports and repairs; the
// read-only key runs status, locks, search, export and fsck, and is
// refused, in one line, for mount, mkfs, import and fsck --repair; a
// search with it beside a mount that writes in memory says it could not
// ask that mount to flush. esfs config and esfs destroy work with the
// config and destroy keys.
func TestSecurePrivileges(t *testing.T) {
	sc := secureEnv(t)
	bin := mounttest.Binary(t)
	index := testenv.Prefix(t)
	roles := docRoles(t, index)
	admin, err := store.New(store.Config{URLs: []string{sc.URL}, Username: sc.User, Password: sc.Password,
		CACertFile: sc.CACert, Prefix: index, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	destroyKey := roleKey(t, sc, "esfs-destroy", roles["esfs-destroy"])
	deleted := false
	t.Cleanup(func() {
		if !deleted {
			_ = admin.Admin().DeleteFilesystem(context.Background())
		}
		admin.Close()
	})
	fsys := &mounttest.FS{URL: sc.URL, Index: index, Bin: bin, Store: admin}
	keyEnv := func(key string) []string {
		return []string{"ESFS_ES_API_KEY=" + key, "ESFS_ES_CA_CERT=" + sc.CACert}
	}
	run := func(key string, args ...string) mounttest.Result {
		t.Helper()
		c := secureCmd(bin, esfsEnv(keyEnv(key)...), append([]string{args[0], "--es-url", sc.URL, "--index", index}, args[1:]...)...)
		c.Split = true
		return mounttest.Run(t, c)
	}
	mustRun := func(key string, args ...string) string {
		t.Helper()
		r := run(key, args...)
		if r.Err != nil {
			t.Fatalf("esfs %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
		}
		return r.Stdout
	}

	mkfsKey := roleKey(t, sc, "esfs-mkfs", roles["esfs-mkfs"])
	mountKey := roleKey(t, sc, "esfs-mount", roles["esfs-mount"])
	readerKey := roleKey(t, sc, "esfs-reader", roles["esfs-reader"])
	secrets := []string{sc.Password, mkfsKey, mountKey, readerKey, destroyKey}

	mustRun(mkfsKey, "mkfs")
	m := fsys.MountAt(t, t.TempDir(), overrides(keyEnv(mountKey)...), "--write-delegations=false", "--lease", "2s")
	mounttest.Sh(t, m.Dir, `mkdir -p d/gone && printf 'okapi\n' > d/f.txt && mv d/f.txt d/g.txt && cat d/g.txt >/dev/null && rmdir d/gone && df . >/dev/null`)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "imported.txt"), []byte("zebu\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	mustRun(mountKey, "import", src, "/imported")
	if out := mustRun(mountKey, "fsck", "--repair", "--no-wait"); !strings.Contains(out, "clean") {
		t.Errorf("fsck --repair with the mount key:\n%s", out)
	}

	t.Run("read-only key runs the admin commands", func(t *testing.T) {
		if out := mustRun(readerKey, "status"); !strings.Contains(out, m.Dir) {
			t.Errorf("status:\n%s", out)
		}
		mustRun(readerKey, "locks")
		if out := mustRun(readerKey, "search", "okapi"); out != "/d/g.txt\n" {
			t.Errorf("search: %q", out)
		}
		// -2k: GNU find rounds 6 bytes up to one 1k unit, which -1k excludes.
		if out := mustRun(readerKey, "find", "/d", "-size", "-2k", "-name", "g.*"); out != "/d/g.txt\n" {
			t.Errorf("find: %q", out)
		}
		dst := filepath.Join(t.TempDir(), "out")
		mustRun(readerKey, "export", "/", dst)
		if b, err := os.ReadFile(filepath.Join(dst, "imported", "imported.txt")); err != nil || string(b) != "zebu\n" {
			t.Errorf("export: %q, %v", b, err)
		}
		for _, args := range [][]string{{"fsck", "--no-wait"}, {"fsck"}} {
			if out := mustRun(readerKey, args...); !strings.Contains(out, "clean") {
				t.Errorf("%s:\n%s", strings.Join(args, " "), out)
			}
		}
	})

	t.Run("read-only key is refused what writes", func(t *testing.T) {
		for _, args := range [][]string{{"mkfs"}, {"import", src, "/again"}, {"fsck", "--repair", "--no-wait"}} {
			r := run(readerKey, args...)
			checkFailure(t, r.Stdout+r.Stderr, r.Err, `(?i)denied the request.*lacks privileges.*unauthorized`, secrets)
		}
		dir := t.TempDir()
		r := run(readerKey, "mount", dir)
		if mounttest.IsMounted(dir) {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			t.Fatalf("mounted with the read-only key:\n%s%s", r.Stdout, r.Stderr)
		}
		checkFailure(t, r.Stdout+r.Stderr, r.Err, `(?i)denied the request.*lacks privileges.*session.*unauthorized`, secrets)
	})

	t.Run("read-only key beside a mount writing in memory", func(t *testing.T) {
		w := fsys.MountAt(t, t.TempDir(), overrides(keyEnv(mountKey)...), "--write-delegations", "--flush-interval=1h")
		mounttest.Sh(t, w.Dir, `mkdir mem && printf 'gnu\n' > mem/n.txt`)
		r := run(readerKey, "search", "gnu")
		if r.Code != 1 || r.Stdout != "" {
			t.Errorf("search with the read-only key of a file not flushed: status %d, %q (the mount cannot have been asked to flush)", r.Code, r.Stdout)
		}
		if lines := strings.Split(strings.TrimSpace(r.Stderr), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "not asked to flush") {
			t.Errorf("search with the read-only key beside a mount writing in memory: want one line on stderr saying the mount was not asked to flush, got %q", r.Stderr)
		}
		// The mount key may ask: the file is found.
		if out := mustRun(mountKey, "search", "gnu"); out != "/mem/n.txt\n" {
			t.Errorf("search with the mount key: %q", out)
		}
		w.Unmount(t)
	})
	m.Unmount(t)

	// The config key changes a setting; the destroy key deletes the
	// filesystem: the commands themselves, as a user runs them.
	configKey := roleKey(t, sc, "esfs-config", roles["esfs-config"])
	if out := mustRun(configKey, "config", "--refresh-interval", "2s"); !strings.Contains(out, "2s") {
		t.Errorf("esfs config --refresh-interval 2s with the config key printed %q", out)
	}
	if r := run(readerKey, "destroy", "--yes"); r.Code == 0 || strings.Count(strings.TrimSpace(r.Stderr), "\n") != 0 {
		t.Errorf("esfs destroy with the read-only key: status %d, want a refusal in one line: %q", r.Code, r.Stderr)
	}
	mustRun(destroyKey, "destroy", "--yes")
	deleted = true
	if err := admin.Open(context.Background()); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("opening the filesystem after esfs destroy with the destroy key: %v (want: does not exist)", err)
	}
}
