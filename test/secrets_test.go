package test

// The cluster's secrets kept out of everything another user, or another
// program, can read: command lines, environments, the daemon's HTTP
// endpoints, its log, esfs status, the session documents, the mount's
// attribute and the mount table.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// TestSecureCredentialsKeptOut: a password given in the URL (esfs mount
// --daemon --es-url, the mount helper's -o url=, mount(8) with -o url= and
// with an fstab line) or an API key in the environment is, once mounted,
// in no esfs process's command line or environment, in none of the
// daemon's HTTP endpoints (with and without --pprof; never pprof's
// cmdline, no profiles without --pprof), in its log (at debug level), in
// esfs status's output, the session documents, the mount's esfs.mount
// attribute or the mount table. A command that would run with a password
// in its own command line (a foreground mount, an admin command) refuses
// in one line that says where to put it; in ELASTICSEARCH_URL it works.
func TestSecureCredentialsKeptOut(t *testing.T) {
	sc := secureEnv(t)
	bin := mounttest.Binary(t)
	exe, err := filepath.EvalSymlinks(bin)
	if err == nil {
		exe, err = filepath.Abs(exe)
	}
	if err != nil {
		t.Fatal(err)
	}
	index := testenv.Prefix(t)
	admin, err := store.New(store.Config{URLs: []string{sc.URL}, Username: sc.User, Password: sc.Password,
		CACertFile: sc.CACert, Prefix: index, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := admin.Admin().DeleteFilesystem(ctx); err != nil {
			t.Errorf("deleting test filesystem: %v", err)
		}
		admin.Close()
	})
	withCA := "ESFS_ES_CA_CERT=" + sc.CACert
	password := []string{"ESFS_ES_USERNAME=" + sc.User, "ESFS_ES_PASSWORD=" + sc.Password, withCA}
	if r := mounttest.Run(t, secureCmd(bin, esfsEnv(password...), "mkfs", "--es-url", sc.URL, "--index", index)); r.Err != nil {
		t.Fatalf("esfs mkfs: %v\n%s", r.Err, r.Out)
	}
	apiKey, apiKeySecret := createAPIKey(t, sc)
	u, err := url.Parse(sc.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(sc.User, sc.Password)
	credURL := u.String()
	secrets := []string{sc.Password, apiKey, apiKeySecret}
	if esc := url.QueryEscape(sc.Password); esc != sc.Password {
		secrets = append(secrets, esc) // as a URL spells it
	}
	// Credentials in the URL only: nothing in the environment to fall
	// back on, so a mount that works got them from the URL.
	bare := esfsEnv(withCA)

	mounts := []struct {
		name  string
		pprof bool
		// mount mounts dir, logging to logFile and serving metrics on
		// addr, and returns what it printed and its status.
		mount func(t *testing.T, dir, logFile, addr string) (string, int)
	}{
		{name: "esfs mount --daemon --es-url with a password", mount: func(t *testing.T, dir, logFile, addr string) (string, int) {
			r := mounttest.Run(t, secureCmd(bin, bare, "mount", "--daemon", "--log-file", logFile, "--log-level", "debug",
				"--metrics-addr", addr, "--index", index, "--es-url", credURL, dir))
			noSecret(t, "what esfs mount --daemon printed", []byte(r.Out), secrets)
			return "", r.Code // it says where it logs: not nothing, as the helper
		}},
		{name: "esfs mount --daemon with an API key in the environment and profiles on", pprof: true, mount: func(t *testing.T, dir, logFile, addr string) (string, int) {
			// ESFS_PPROF rather than --pprof: an esfs without the flag
			// serves profiles anyway, and this case then fails on what
			// it exposes, not on an unknown flag.
			env := esfsEnv(withCA, "ESFS_ES_API_KEY="+apiKey, "ESFS_PPROF=true")
			r := mounttest.Run(t, secureCmd(bin, env, "mount", "--daemon", "--log-file", logFile, "--log-level", "debug",
				"--metrics-addr", addr, "--index", index, "--es-url", sc.URL, dir))
			noSecret(t, "what esfs mount --daemon printed", []byte(r.Out), secrets)
			return "", r.Code
		}},
		{name: "mount helper -o url= with a password", mount: func(t *testing.T, dir, logFile, addr string) (string, int) {
			r := mounttest.Run(t, mounttest.Cmd{Bin: bin, Argv0: "mount.fuse.esfs", Env: bare, OnlyEnv: true, Limit: time.Minute, MayHang: true,
				Args: []string{index, dir, "-o", "url=" + credURL + ",log_file=" + logFile + ",log_level=debug,metrics_addr=" + addr}})
			return r.Out, r.Code
		}},
		{name: "mount(8) -t fuse.esfs -o url= with a password", mount: func(t *testing.T, dir, logFile, addr string) (string, int) {
			installMountHelper(t, bin)
			return systemMount(t, bare, "-t", "fuse.esfs", index, dir, "-o",
				"url="+credURL+",es_ca_cert="+sc.CACert+",log_file="+logFile+",log_level=debug,metrics_addr="+addr)
		}},
		{name: "mount(8) with an fstab line holding a URL with a password", mount: func(t *testing.T, dir, logFile, addr string) (string, int) {
			installMountHelper(t, bin)
			fstab := filepath.Join(t.TempDir(), "fstab")
			line := fmt.Sprintf("esfs:%s %s fuse.esfs url=%s,es_ca_cert=%s,log_file=%s,metrics_addr=%s,_netdev 0 0\n",
				index, dir, credURL, sc.CACert, logFile, addr)
			if err := os.WriteFile(fstab, []byte(line), 0o600); err != nil {
				t.Fatal(err)
			}
			return systemMount(t, esfsEnv(), "--fstab", fstab, dir)
		}},
	}
	for _, m := range mounts {
		t.Run(m.name, func(t *testing.T) {
			dir := t.TempDir()
			logFile := filepath.Join(t.TempDir(), "esfs.log")
			addr := mounttest.FreeAddr(t)
			out, code := m.mount(t, dir, logFile, addr)
			noSecret(t, "what the mount printed", []byte(out), secrets)
			pid, conn, _ := helperMounted(t, m.name, hidden([]byte(out), secrets), code, dir)

			esfsProcessesKeptOut(t, exe, pid, secrets)
			endpointsKeptOut(t, addr, m.pprof, secrets)
			log, err := os.ReadFile(logFile)
			if err != nil || !strings.Contains(string(log), "mounted") {
				t.Errorf("the daemon's log %s: %v, %d bytes without a mounted line", logFile, err, len(log))
			}
			noSecret(t, "the daemon's log", log, secrets)
			about := make([]byte, 64<<10)
			n, err := syscall.Getxattr(dir, "esfs.mount", about)
			if err != nil {
				t.Fatalf("getxattr esfs.mount: %v", err)
			}
			noSecret(t, "the esfs.mount attribute", about[:n], secrets)
			for _, f := range []string{"/proc/self/mountinfo", "/run/mount/utab"} {
				if b, err := os.ReadFile(f); err == nil {
					noSecret(t, f, b, secrets)
				}
			}
			r := mounttest.Run(t, secureCmd(bin, esfsEnv(password...), "status", "--es-url", sc.URL, "--index", index))
			if r.Code != 0 || !strings.Contains(r.Out, dir) {
				t.Errorf("esfs status: status %d, output without %s:\n%s", r.Code, dir, hidden([]byte(r.Out), secrets))
			}
			noSecret(t, "esfs status's output", []byte(r.Out), secrets)
			sessionsKeptOut(t, sc, index, secrets)

			if r := mounttest.Run(t, mounttest.Cmd{Bin: bin, Args: []string{"umount", dir}, Limit: time.Minute}); r.Code != 0 {
				t.Fatalf("esfs umount: status %d: %s", r.Code, r.Out)
			}
			mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
		})
	}

	// A process that runs with the password in its own command line
	// cannot take it out: refused, in one line naming where to put it.
	for _, c := range []struct {
		name string
		args []string
	}{
		{"esfs mount in the foreground", []string{"mount", "--index", index, "--es-url", credURL}},
		{"esfs mount -o url= in the foreground", []string{"mount", "--index", index, "-o", "url=" + credURL}},
		{"esfs status", []string{"status", "--index", index, "--es-url", credURL}},
		{"esfs mkfs, the URL second of two", []string{"mkfs", "--index", index, "--es-url", "https://127.0.0.1:1," + credURL}},
	} {
		t.Run("refused: "+c.name, func(t *testing.T) {
			dir := t.TempDir()
			args := c.args
			if args[0] == "mount" {
				args = append(args, dir)
			}
			// An esfs that takes it mounts and runs until killed.
			cmd := secureCmd(bin, bare, args...)
			cmd.Limit = 15 * time.Second
			r := mounttest.Run(t, cmd)
			if mounttest.IsMounted(dir) {
				_ = syscall.Unmount(dir, syscall.MNT_DETACH)
				t.Errorf("mounted with the password in its command line")
			}
			noSecret(t, "the refusal", []byte(r.Out), secrets)
			line := strings.TrimSuffix(r.Out, "\n")
			if r.Code != 2 || strings.Contains(line, "\n") || !strings.Contains(line, "holds a password") || !strings.Contains(line, "ESFS_ES_PASSWORD") {
				t.Errorf("status %d, want 2 and one line saying the URL holds a password and where to put it:\n%s", r.Code, hidden([]byte(r.Out), secrets))
			}
		})
	}
	t.Run("the URL with a password in ELASTICSEARCH_URL", func(t *testing.T) {
		r := mounttest.Run(t, secureCmd(bin, esfsEnv(withCA, "ELASTICSEARCH_URL="+credURL), "status", "--index", index))
		if r.Code != 0 || !strings.Contains(r.Out, "no operations in flight") {
			t.Errorf("esfs status: status %d:\n%s", r.Code, hidden([]byte(r.Out), secrets))
		}
		noSecret(t, "esfs status's output", []byte(r.Out), secrets)
	})
}

// noSecret fails the test if data holds one of secrets, saying where
// (never the secret).
func noSecret(t *testing.T, what string, data []byte, secrets []string) {
	t.Helper()
	for i, s := range secrets {
		if s != "" && bytes.Contains(data, []byte(s)) {
			t.Errorf("%s holds secret #%d (%d bytes; not shown)", what, i, len(data))
		}
	}
}

// hidden is data for a message, each of secrets in it replaced by ***.
func hidden(data []byte, secrets []string) string {
	for _, s := range secrets {
		if s != "" {
			data = bytes.ReplaceAll(data, []byte(s), []byte("***"))
		}
	}
	return string(data)
}

// esfsProcessesKeptOut checks the command line and the environment of
// every process running exe, the daemon pid among them.
func esfsProcessesKeptOut(t *testing.T, exe string, pid int, secrets []string) {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, p := range procs {
		if target, err := os.Readlink(p + "/exe"); err != nil || target != exe {
			continue
		}
		n, _ := strconv.Atoi(filepath.Base(p))
		seen = seen || n == pid
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				continue // ended meanwhile
			}
			comm, _ := os.ReadFile(p + "/comm")
			noSecret(t, fmt.Sprintf("%s/%s (%s, %s)", p, f, strings.TrimSpace(string(comm)), hidden(bytes.ReplaceAll(b, []byte{0}, []byte(" ")), secrets)), b, secrets)
		}
	}
	if !seen {
		t.Errorf("the daemon, pid %d, is not among the processes of %s", pid, exe)
	}
}

// pprofLink is a profile named in pprof's index, as text (ours) or as
// pprof's own HTML.
var pprofLink = regexp.MustCompile(`/debug/pprof/([a-z_]+)|href='([a-z_]+)\?`)

// endpointsKeptOut reads every endpoint the metrics address serves: the
// index, /metrics, and with profiles every profile its index lists (CPU
// and trace for a second); pprof's cmdline is never served, nor profiles
// without --pprof.
func endpointsKeptOut(t *testing.T, addr string, profiles bool, secrets []string) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	var get func(path string) int // recursive: the index's profiles
	get = func(path string) int {
		t.Helper()
		res, err := client.Get("http://" + addr + path)
		if err != nil {
			t.Errorf("GET %s: %v", path, err)
			return 0
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		noSecret(t, "GET "+path, b, secrets)
		if path == "/debug/pprof/" && res.StatusCode == 200 {
			names := map[string]bool{}
			for _, m := range pprofLink.FindAllStringSubmatch(string(b), -1) {
				names[m[1]+m[2]] = true
			}
			var sorted []string
			for n := range names {
				sorted = append(sorted, n)
			}
			sort.Strings(sorted)
			for _, n := range sorted {
				switch n {
				case "profile", "trace":
					get("/debug/pprof/" + n + "?seconds=1")
				case "symbol", "cmdline":
					get("/debug/pprof/" + n)
				default:
					get("/debug/pprof/" + n + "?debug=1")
					get("/debug/pprof/" + n + "?debug=2")
				}
			}
			if len(sorted) < 5 {
				t.Errorf("/debug/pprof/ lists %q: want the profiles", sorted)
			}
		}
		return res.StatusCode
	}
	if code := get("/"); code != 200 {
		t.Errorf("GET /: %d", code)
	}
	if code := get("/metrics"); code != 200 {
		t.Errorf("GET /metrics: %d", code)
	}
	code := get("/debug/pprof/")
	switch {
	case profiles && code != 200:
		t.Errorf("GET /debug/pprof/ with --pprof: %d, want 200", code)
	case !profiles && code != 404:
		t.Errorf("GET /debug/pprof/ without --pprof: %d, want 404 (profiles only with --pprof)", code)
	}
	if code := get("/debug/pprof/cmdline"); code != 404 {
		t.Errorf("GET /debug/pprof/cmdline: %d, want 404 (never served)", code)
	}
}

// sessionsKeptOut reads the session documents of the filesystem as they
// are stored.
func sessionsKeptOut(t *testing.T, sc secureCluster, index string, secrets []string) {
	t.Helper()
	b := superuserCall(t, sc, "GET", "/"+index+"-sessions/_search?size=1000", "")
	var res struct {
		Hits struct {
			Hits []json.RawMessage `json:"hits"`
		} `json:"hits"`
	}
	if err := json.Unmarshal(b, &res); err != nil || len(res.Hits.Hits) == 0 {
		t.Errorf("no session document (%v): %.300s", err, hidden(b, secrets))
	}
	noSecret(t, "the session documents", b, secrets)
}

// installMountHelper makes /sbin/mount.fuse.esfs a symlink to bin for the
// test, which is skipped if one is there already (an installed esfs, or
// another test's).
func installMountHelper(t *testing.T, bin string) {
	t.Helper()
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("no mount(8)")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	const helper = "/sbin/mount.fuse.esfs"
	if target, err := os.Readlink(helper); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s already exists (-> %q): not replacing an installed helper", helper, target)
	}
	if err := os.Symlink(abs, helper); err != nil {
		t.Skipf("cannot install %s: %v", helper, err)
	}
	t.Cleanup(func() { _ = os.Remove(helper) })
}

// systemMount runs mount(8) with exactly env, and returns what it printed
// and its status.
func systemMount(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "mount", args...)
	cmd.Env = env
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("mount %s hung", args[len(args)-1]) // not the options: they hold the password
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatalf("mount: %v", err)
	return "", -1
}
