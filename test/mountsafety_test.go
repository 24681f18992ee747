package test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// runEnv runs the esfs binary (under the name argv0 if not empty, as
// mount(8) runs a helper) with env added, bounded in time, and returns
// its combined output and exit status.
func runEnv(t *testing.T, argv0 string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bin := mounttest.Binary(t)
	if argv0 != "" {
		link := filepath.Join(t.TempDir(), argv0)
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
		bin = link
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("esfs %q hung", args)
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// oneFailure checks that a command failed with one line saying want.
func oneFailure(t *testing.T, what, out string, code int, want string) {
	t.Helper()
	if code == 0 || strings.Count(strings.TrimRight(out, "\n"), "\n") != 0 || !strings.Contains(out, want) {
		t.Errorf("%s: status %d, output %q; want a failure in one line saying %q", what, code, out, want)
	}
}

// daemonMounted checks a --daemon mount's report and returns the daemon's
// pid, its FUSE connection, and where it says its log goes.
func daemonMounted(t *testing.T, out string, code int, dir string) (pid, conn int, logAt string) {
	t.Helper()
	if code != 0 || !mounttest.IsMounted(dir) {
		t.Fatalf("daemon mount: status %d, mounted %v:\n%s", code, mounttest.IsMounted(dir), out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	pid, conn = daemonOf(t, out, dir)
	m := regexp.MustCompile(`its log: (.*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("the mounted line does not say where the log goes: %q", out)
	}
	return pid, conn, strings.TrimSpace(m[1])
}

// umountDaemon unmounts a --daemon mount with esfs umount and waits for its
// daemon to end.
func umountDaemon(t *testing.T, f *mounttest.FS, dir string, pid, conn int) {
	t.Helper()
	if out, code := runEnv(t, "", nil, "umount", dir); code != 0 {
		t.Fatalf("esfs umount: status %d: %s", code, out)
	}
	mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
}

// TestMountNonEmpty: mounting over a directory that holds files is refused
// in one line, unless --nonempty (or -o nonempty through the mount
// helper) says to hide them; they are back after the unmount.
func TestMountNonEmpty(t *testing.T) {
	f := mounttest.NewFS(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "underneath"), []byte("local"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) }) // if it did mount
	logFile := filepath.Join(t.TempDir(), "esfs.log")
	out, code := runEnv(t, "", nil, "mount", "--daemon", "--log-file", logFile, "--es-url", f.URL, "--index", f.Index, dir)
	oneFailure(t, "esfs mount over a non-empty directory", out, code, "is not empty")
	out, code = runEnv(t, "mount.fuse.esfs", nil, f.Index, dir, "-o", "es_url="+f.URL+",log_file="+logFile)
	oneFailure(t, "the mount helper over a non-empty directory", out, code, "is not empty")
	if mounttest.IsMounted(dir) {
		t.Fatal("mounted over a non-empty directory")
	}

	m := f.MountAt(t, dir, nil, "--nonempty")
	if _, err := os.Stat(m.Path("underneath")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory's own file through the mount: %v, want it hidden", err)
	}
	m.Unmount(t)

	logDir := t.TempDir()
	out, code = runEnv(t, "mount.fuse.esfs", []string{"ESFS_LOG_DIR=" + logDir, "ESFS_SYSLOG_SOCKET=/nonexistent"},
		f.Index, dir, "-o", "nonempty,es_url="+f.URL)
	pid, conn, _ := daemonMounted(t, out, code, dir)
	umountDaemon(t, f, dir, pid, conn)
	if b, err := os.ReadFile(filepath.Join(dir, "underneath")); err != nil || string(b) != "local" {
		t.Errorf("the directory's own file after the unmount: %q, %v", b, err)
	}
}

// TestUmountOnlyEsfs: esfs umount refuses, naming what is there, a mount
// point of another filesystem and a directory that is no mount point.
func TestUmountOnlyEsfs(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mount("esfs-test-tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	for _, lazy := range [][]string{nil, {"--lazy"}} {
		out, code := runEnv(t, "", nil, append(append([]string{"umount"}, lazy...), dir)...)
		oneFailure(t, "esfs umount "+strings.Join(lazy, " ")+" of a tmpfs", out, code, dir+" is a tmpfs mount (source esfs-test-tmpfs), not esfs")
		if !mounttest.IsMounted(dir) {
			t.Fatal("esfs umount unmounted a tmpfs")
		}
	}
	plain := t.TempDir()
	out, code := runEnv(t, "", nil, "umount", plain)
	oneFailure(t, "esfs umount of a plain directory", out, code, "is not mounted: it is not a mount point")
}

// TestDaemonLogs: a --daemon mount without --log-file logs to syslog when
// there is a syslog socket (each record one message, with the severity
// of its level), else to a file named after the index and mount point
// under the log directory; the line printed once mounted says which.
func TestDaemonLogs(t *testing.T) {
	f := mounttest.NewFS(t)

	t.Run("syslog", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "log")
		ln, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		msgs := make(chan string, 1000)
		go func() {
			buf := make([]byte, 64<<10)
			for {
				n, _, err := ln.ReadFrom(buf)
				if err != nil {
					close(msgs)
					return
				}
				msgs <- string(buf[:n])
			}
		}()
		dir := t.TempDir()
		logDir := t.TempDir()
		env := []string{"ESFS_SYSLOG_SOCKET=" + sock, "ESFS_LOG_DIR=" + logDir}
		out, code := runEnv(t, "", env, "mount", "--daemon", "--es-url", f.URL, "--index", f.Index, dir)
		pid, conn, logAt := daemonMounted(t, out, code, dir)
		if logAt != "syslog ("+sock+")" {
			t.Errorf("the mounted line says the log goes to %q, want syslog (%s)", logAt, sock)
		}
		umountDaemon(t, f, dir, pid, conn)
		// daemon facility (3<<3) + info (6) = 30, as syslog(3) formats it.
		want := map[string]*regexp.Regexp{
			"mounted":   regexp.MustCompile(`^<30>[A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d:\d\d esfs\[` + strconv.Itoa(pid) + `\]: level=INFO msg=mounted `),
			"unmounted": regexp.MustCompile(`^<30>.* esfs\[` + strconv.Itoa(pid) + `\]: level=INFO msg=unmounted `),
		}
		deadline := time.After(30 * time.Second)
		var got []string
		for len(want) > 0 {
			select {
			case m := <-msgs:
				got = append(got, m)
				for k, re := range want {
					if re.MatchString(m) {
						delete(want, k)
					}
				}
			case <-deadline:
				t.Fatalf("no syslog message for %v among %q", want, got)
			}
		}
		if files, _ := os.ReadDir(logDir); len(files) > 0 {
			t.Errorf("logged to %s too, with syslog there", logDir)
		}
	})

	t.Run("file", func(t *testing.T) {
		dir := t.TempDir()
		logDir := filepath.Join(t.TempDir(), "esfs") // made by the daemon
		env := []string{"ESFS_SYSLOG_SOCKET=/nonexistent/log", "ESFS_LOG_DIR=" + logDir}
		out, code := runEnv(t, "", env, "mount", "--daemon", "--es-url", f.URL, "--index", f.Index, dir)
		pid, conn, logAt := daemonMounted(t, out, code, dir)
		// systemd-escape --path: "/" is "-", other bytes (here '-') \xNN.
		want := filepath.Join(logDir, f.Index+"@"+strings.ReplaceAll(strings.ReplaceAll(strings.TrimPrefix(dir, "/"), "-", `\x2d`), "/", "-")+".log")
		if logAt != want {
			t.Errorf("the mounted line says the log goes to %q, want %q", logAt, want)
		}
		umountDaemon(t, f, dir, pid, conn)
		b, err := os.ReadFile(want)
		if err != nil || !strings.Contains(string(b), "msg=mounted") || !strings.Contains(string(b), "msg=unmounted") {
			t.Errorf("log file %s: %v\n%s", want, err, b)
		}
	})

	t.Run("helper", func(t *testing.T) {
		dir := t.TempDir()
		logDir := t.TempDir()
		env := []string{"ESFS_SYSLOG_SOCKET=/nonexistent/log", "ESFS_LOG_DIR=" + logDir}
		out, code := runEnv(t, "mount.fuse.esfs", env, f.Index, dir, "-o", "es_url="+f.URL)
		pid, conn, logAt := daemonMounted(t, out, code, dir)
		if filepath.Dir(logAt) != logDir {
			t.Errorf("the helper's daemon logs to %q, want a file in %s", logAt, logDir)
		}
		umountDaemon(t, f, dir, pid, conn)
		if b, err := os.ReadFile(logAt); err != nil || !strings.Contains(string(b), "msg=unmounted") {
			t.Errorf("log file %s: %v\n%s", logAt, err, b)
		}
	})
}
