package test

// Mounting and ending: the command line's errors, --daemon and where it
// logs, mount(8), fstab and the mount.fuse helper, refusing a non-empty
// mount point, esfs umount refusing what is not esfs, and SIGTERM (with
// open files, a busy mount, while mounting, twice).

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestSigtermWithOpenFiles: SIGTERM while a process has a file open with
// unflushed writes: the mount detaches at once, the open file keeps working
// until closed, then the daemon exits cleanly and nothing written is lost.
func TestSigtermWithOpenFiles(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	fh, err := os.Create(m.Path("open"))
	if err != nil {
		t.Fatal(err)
	}
	first := bytes.Repeat([]byte("a"), 1<<20+7)
	if _, err := fh.Write(first); err != nil {
		t.Fatal(err)
	}
	m.Signal(syscall.SIGTERM)
	waitDetached(t, m, 30*time.Second)
	if _, ok := m.WaitExit(500 * time.Millisecond); ok {
		t.Fatal("the daemon exited while a file was still open")
	}
	second := bytes.Repeat([]byte("b"), 4096)
	if _, err := fh.Write(second); err != nil {
		t.Fatalf("write after detach: %v", err)
	}
	if err := fh.Close(); err != nil {
		t.Fatalf("close after detach: %v", err)
	}
	err, ok := m.WaitExit(30 * time.Second)
	if !ok {
		t.Fatal("the daemon did not exit after the last file was closed")
	}
	if err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, m.Log())
	}
	m2 := f.Mount(t)
	got, err := os.ReadFile(m2.Path("open"))
	if err != nil || !bytes.Equal(got, append(first, second...)) {
		t.Fatalf("after remount: %d bytes, %v", len(got), err)
	}
}

// TestSigtermWhileMounting: a SIGTERM that arrives as soon as the mount
// appears (a service stopped right after it started, a quick test) ends
// the daemon cleanly and leaves nothing mounted. The daemon used to open
// a file below its own mount point while mounting (go-fuse's poll check)
// before it handled signals: the signal killed it while that open waited
// for the GETATTR of the mount's root, a request its dying threads would
// never answer, and the thread hung in the kernel for ever, unkillable,
// with the mount. The cluster's answer to that GETATTR is held here so
// that the signal always lands in that window.
func TestSigtermWhileMounting(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	asked := make(chan struct{})
	var once sync.Once
	fp.Add(&mounttest.Fault{Match: func(method, path string, _ []byte) bool {
		root := method == http.MethodGet && strings.HasSuffix(path, "-inodes/_doc/1")
		if root {
			once.Do(func() { close(asked) })
		}
		return root
	}, Delay: 5 * time.Second})
	m := f.MountAt(t, t.TempDir(), nil, append([]string{"--es-url", fp.URL}, mounttest.NoCache...)...)
	select {
	case <-asked:
		t.Log("the daemon asked for its root's attributes while mounting: signalling it now")
	case <-time.After(2 * time.Second):
	}
	m.Unmount(t)
}

// busyShell starts a shell whose working directory is dir and that waits
// for a line on its stdin: a process that keeps a mount busy.
func busyShell(t *testing.T, dir string) {
	t.Helper()
	sh := exec.Command("bash", "-c", "read _")
	sh.Dir = dir
	in, err := sh.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		_ = sh.Process.Kill()
		_ = sh.Wait()
	})
}

// waitDetached waits until m's mount point has left the namespace.
func waitDetached(t *testing.T, m *mounttest.Mount, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for mounttest.IsMounted(m.Dir) {
		if time.Now().After(deadline) {
			t.Fatalf("%s still mounted %s after SIGTERM", m.Dir, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSigtermBusyMountEnds: SIGTERM to a mount where a shell has its cwd
// and a file is open with unflushed writes, both in a directory another
// mount renamed away. The mount point is detached at once, the open file
// keeps working for the grace period, and then the daemon exits although
// both are still held; every byte written before it exited is kept.
func TestSigtermBusyMountEnds(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	const grace = 3 * time.Second
	b := f.MountAt(t, t.TempDir(), []string{"ESFS_SHUTDOWN_GRACE=" + grace.String()})
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Stat(b.Path("d")); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the other mount does not see d: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	busyShell(t, b.Path("d"))
	fh, err := os.Create(b.Path("d", "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var want []byte
	write := func(s string) {
		t.Helper()
		if _, err := fh.Write([]byte(s)); err != nil {
			t.Fatalf("write %q: %v", s, err)
		}
		want = append(want, s...)
	}
	write("before the rename\n")
	if err := os.Rename(a.Path("d"), a.Path("e")); err != nil {
		t.Fatal(err)
	}
	write("after the rename\n")

	start := time.Now()
	b.Signal(syscall.SIGTERM)
	waitDetached(t, b, 60*time.Second)
	write("during the grace period\n")
	const bound = 30 * time.Second // flush, session end: a few round trips
	err, ok := b.WaitExit(grace + bound)
	if !ok {
		t.Fatalf("the daemon did not exit within %s (grace) + %s of SIGTERM while a cwd and a file were held in its mount", grace, bound)
	}
	t.Logf("exited %s after SIGTERM", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("daemon exit: %v\n%s", err, b.Log())
	}
	got, err := os.ReadFile(a.Path("e", "f"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the file written through the detached mount, read on the other: %q, %v; want %q", got, err, want)
	}
}

// TestSigtermSecondSignalExitsAtOnce: during the grace period of a busy mount, a
// second SIGTERM or SIGINT ends the daemon at once; what was flushed is
// kept.
func TestSigtermSecondSignalExitsAtOnce(t *testing.T) {
	f := mounttest.NewFS(t)
	b := f.MountAt(t, t.TempDir(), []string{"ESFS_SHUTDOWN_GRACE=1h"})
	busyShell(t, b.Dir)
	fh, err := os.Create(b.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.Write([]byte("flushed\n")); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	b.Signal(syscall.SIGTERM)
	waitDetached(t, b, 60*time.Second)
	b.Signal(syscall.SIGINT)
	if _, ok := b.WaitExit(30 * time.Second); !ok {
		t.Fatal("the daemon did not exit within 30s of a second signal")
	}
	m := f.Mount(t)
	if got, err := os.ReadFile(m.Path("f")); err != nil || string(got) != "flushed\n" {
		t.Fatalf("after the second signal: %q, %v", got, err)
	}
}

// oneFailure checks that a command failed with one line saying want.
func oneFailure(t *testing.T, what, out string, code int, want string) {
	t.Helper()
	if code == 0 || strings.Count(strings.TrimRight(out, "\n"), "\n") != 0 || !strings.Contains(out, want) {
		t.Errorf("%s: status %d, output %q; want a failure in one line saying %q", what, code, out, want)
	}
}

// daemonMounted checks an `esfs mount --daemon` mount's report, the line
// saying the daemon's pid and where it logs, against what the mount says
// of itself (daemonOf), and returns those and the daemon's FUSE
// connection.
func daemonMounted(t *testing.T, out string, code int, dir string) (pid, conn int, logAt string) {
	t.Helper()
	if code != 0 || !mounttest.IsMounted(dir) {
		t.Fatalf("daemon mount: status %d, mounted %v:\n%s", code, mounttest.IsMounted(dir), out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	pid, conn, logAt = daemonOf(t, dir)
	if want := fmt.Sprintf("mounted %s (pid %d); its log: %s\n", dir, pid, logAt); out != want {
		t.Fatalf("esfs mount --daemon printed %q, want %q", out, want)
	}
	return pid, conn, logAt
}

// helperMounted checks a mount by the mount helper (run by mount(8) or
// as mount(8) runs it): mounted, with status 0 and nothing printed, as
// mount(8) and its helpers are on success. It returns the daemon's pid,
// FUSE connection and log, from what the mount says of itself.
func helperMounted(t *testing.T, what, out string, code int, dir string) (pid, conn int, logAt string) {
	t.Helper()
	if code != 0 || !mounttest.IsMounted(dir) {
		t.Fatalf("%s: status %d, mounted %v:\n%s", what, code, mounttest.IsMounted(dir), out)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	if out != "" {
		t.Errorf("%s printed %q on success, want nothing (as mount(8) and its helpers)", what, out)
	}
	return daemonOf(t, dir)
}

// umountDaemon unmounts a --daemon mount with esfs umount and waits for its
// daemon to end.
func umountDaemon(t *testing.T, f *mounttest.FS, dir string, pid, conn int) {
	t.Helper()
	if r := mounttest.Run(t, mounttest.Cmd{Args: []string{"umount", dir}, Limit: time.Minute}); r.Code != 0 || mounttest.IsMounted(dir) {
		t.Fatalf("esfs umount: status %d: %s", r.Code, r.Out)
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
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--daemon", "--log-file", logFile, "--es-url", f.URL, "--index", f.Index, dir}, Limit: time.Minute})
	oneFailure(t, "esfs mount over a non-empty directory", r.Out, r.Code, "is not empty")
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{f.Index, dir, "-o", "es_url=" + f.URL + ",log_file=" + logFile}, Argv0: "mount.fuse.esfs", Limit: time.Minute})
	oneFailure(t, "the mount helper over a non-empty directory", r.Out, r.Code, "is not empty")
	if mounttest.IsMounted(dir) {
		t.Fatal("mounted over a non-empty directory")
	}

	m := f.MountAt(t, dir, nil, "--nonempty")
	if _, err := os.Stat(m.Path("underneath")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the directory's own file through the mount: %v, want it hidden", err)
	}
	m.Unmount(t)

	logDir := t.TempDir()
	r = mounttest.Run(t, mounttest.Cmd{
		Args:  []string{f.Index, dir, "-o", "nonempty,es_url=" + f.URL},
		Env:   []string{"ESFS_LOG_DIR=" + logDir, "ESFS_SYSLOG_SOCKET=/nonexistent"},
		Argv0: "mount.fuse.esfs",
		Limit: time.Minute,
	})
	pid, conn, _ := helperMounted(t, "the helper with -o nonempty", r.Out, r.Code, dir)
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
		r := mounttest.Run(t, mounttest.Cmd{Args: append(append([]string{"umount"}, lazy...), dir), Limit: time.Minute})
		oneFailure(t, "esfs umount "+strings.Join(lazy, " ")+" of a tmpfs", r.Out, r.Code, dir+" is a tmpfs mount (source esfs-test-tmpfs), not esfs")
		if !mounttest.IsMounted(dir) {
			t.Fatal("esfs umount unmounted a tmpfs")
		}
	}
	plain := t.TempDir()
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"umount", plain}, Limit: time.Minute})
	oneFailure(t, "esfs umount of a plain directory", r.Out, r.Code, "is not mounted: it is not a mount point")
}

// TestMountDaemonLogs: a --daemon mount without --log-file logs to syslog when
// there is a syslog socket (each record one message, with the severity
// of its level), else to a file named after the index and mount point
// under the log directory; the line printed once mounted says which.
func TestMountDaemonLogs(t *testing.T) {
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
		r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--daemon", "--es-url", f.URL, "--index", f.Index, dir}, Env: env, Limit: time.Minute})
		pid, conn, logAt := daemonMounted(t, r.Out, r.Code, dir)
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
		r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--daemon", "--es-url", f.URL, "--index", f.Index, dir}, Env: env, Limit: time.Minute})
		pid, conn, logAt := daemonMounted(t, r.Out, r.Code, dir)
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
		r := mounttest.Run(t, mounttest.Cmd{Args: []string{f.Index, dir, "-o", "es_url=" + f.URL}, Env: env, Argv0: "mount.fuse.esfs", Limit: time.Minute})
		pid, conn, logAt := helperMounted(t, "the helper", r.Out, r.Code, dir)
		if filepath.Dir(logAt) != logDir {
			t.Errorf("the helper's daemon logs to %q, want a file in %s", logAt, logDir)
		}
		// The helper said nothing: esfs status says where the log is.
		status, code := mounttest.RunOn(t, f, "", "status")
		if want := "\n  log " + logAt + "\n"; code != 0 || !strings.Contains(status, want) {
			t.Errorf("esfs status (status %d) lacks %q:\n%s", code, want, status)
		}
		umountDaemon(t, f, dir, pid, conn)
		if b, err := os.ReadFile(logAt); err != nil || !strings.Contains(string(b), "msg=unmounted") {
			t.Errorf("log file %s: %v\n%s", logAt, err, b)
		}
	})
}

// sysMount runs mount(8) (or umount(8)) with env added, bounded in time.
func sysMount(t *testing.T, env []string, prog string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = time.Second
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("%s %q hung", prog, args)
	}
	return string(out), err
}

// mountEntry returns the fstype and source of the mount at dir.
func mountEntry(dir string) (fstype, source string) {
	_, fstype, source, _ = mounttest.MountEntry(dir)
	return fstype, source
}

// mountAbout is what a mount's root says of the daemon serving it, in
// its esfs.mount attribute.
type mountAbout struct {
	Pid   int
	Log   string
	Flags map[string]string
}

// aboutOf reads the esfs.mount attribute of the mount at dir.
func aboutOf(t *testing.T, dir string) mountAbout {
	t.Helper()
	buf := make([]byte, 64<<10)
	n, err := syscall.Getxattr(dir, "esfs.mount", buf)
	if err != nil {
		t.Fatalf("getxattr %s esfs.mount: %v", dir, err)
	}
	var a mountAbout
	if err := json.Unmarshal(buf[:n], &a); err != nil || a.Pid <= 0 || a.Flags == nil {
		t.Fatalf("esfs.mount of %s: %q (%v)", dir, buf[:n], err)
	}
	return a
}

// daemonOf returns the pid and the log of the daemon serving dir, as its
// root's esfs.mount attribute says them, and the FUSE connection of the
// mount, for ending the daemon within a bound.
func daemonOf(t *testing.T, dir string) (pid, conn int, logAt string) {
	t.Helper()
	a := aboutOf(t, dir)
	conn, _, _, _ = mounttest.MountEntry(dir)
	return a.Pid, conn, a.Log
}

// TestMountFstabAndHelper: `mount -t fuse.esfs`, an /etc/fstab line, and fuse3's
// mount.fuse3 convention all mount esfs in the background with options
// passed through; umount and SIGTERM end the daemon cleanly; bad options
// and a missing filesystem fail with one clear line.
func TestMountFstabAndHelper(t *testing.T) {
	if _, err := exec.LookPath("mount"); err != nil {
		t.Skip("no mount(8)")
	}
	f := mounttest.NewFS(t)
	bin, err := filepath.Abs(f.Bin)
	if err != nil {
		t.Fatal(err)
	}
	helper := "/sbin/mount.fuse.esfs"
	if target, err := os.Readlink(helper); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Skipf("%s already exists (-> %q): not replacing an installed helper", helper, target)
	}
	if err := os.Symlink(bin, helper); err != nil {
		t.Skipf("cannot install %s: %v", helper, err)
	}
	t.Cleanup(func() { _ = os.Remove(helper) })
	opts := "es_url=" + f.URL + ",_netdev,nofail,noatime,lease=2s,x-systemd.device-timeout=10"

	t.Run("mount -t", func(t *testing.T) {
		dir := t.TempDir()
		logFile := filepath.Join(t.TempDir(), "esfs.log")
		out, err := sysMount(t, nil, "mount", "-t", "fuse.esfs", f.Index, dir, "-o", opts+",log_file="+logFile)
		if err != nil || !mounttest.IsMounted(dir) {
			t.Fatalf("mount -t fuse.esfs: %v\n%s", err, out)
		}
		pid, conn, _ := helperMounted(t, "mount -t fuse.esfs", out, 0, dir)
		if typ, src := mountEntry(dir); typ != "fuse.esfs" || src != "esfs:"+f.Index {
			t.Errorf("mount table says %q %q, want fuse.esfs esfs:%s", typ, src, f.Index)
		}
		mounttest.Sh(t, dir, `echo through-mount > f && test "$(cat f)" = through-mount`)
		remountCycle(t, dir)
		if out, err := sysMount(t, nil, "umount", dir); err != nil || mounttest.IsMounted(dir) {
			t.Fatalf("umount: %v\n%s", err, out)
		}
		mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
		if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "unmounted") {
			t.Errorf("log_file %s lacks the daemon's log:\n%s", logFile, log)
		}
	})

	t.Run("fstab line, read-only, SIGTERM", func(t *testing.T) {
		dir := t.TempDir()
		fstab := filepath.Join(t.TempDir(), "fstab")
		line := "esfs:" + f.Index + "  " + dir + "  fuse.esfs  ro," + opts + "  0  0\n"
		if err := os.WriteFile(fstab, []byte("# esfs test\n"+line), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := sysMount(t, nil, "mount", "--fstab", fstab, dir)
		if err != nil || !mounttest.IsMounted(dir) {
			t.Fatalf("mount --fstab (%s): %v\n%s", line, err, out)
		}
		pid, conn, _ := helperMounted(t, "mount --fstab", out, 0, dir)
		if data, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(data) != "through-mount\n" {
			t.Errorf("reading the file written before: %q, %v", data, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing on a ro fstab mount: %v, want EROFS", err)
		}
		// ro from fstab, rw typed: mount(8) passes both, the last wins.
		out, err = sysMount(t, nil, "mount", "--fstab", fstab, "-o", "remount,rw", dir)
		if err == nil || !strings.Contains(out, "it was mounted read-only (ro), and its daemon cannot start writing live") {
			t.Errorf("mount -o remount,rw of a read-only fstab mount: %v, output %q; want it refused", err, out)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
		if mounttest.IsMounted(dir) {
			t.Fatal("still mounted after SIGTERM to the daemon")
		}
	})

	t.Run("fstab line, remount", func(t *testing.T) {
		dir := t.TempDir()
		fstab := filepath.Join(t.TempDir(), "fstab")
		line := "esfs:" + f.Index + "  " + dir + "  fuse.esfs  " + opts + "  0  0\n"
		if err := os.WriteFile(fstab, []byte(line), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := sysMount(t, nil, "mount", "--fstab", fstab, dir)
		if err != nil || !mounttest.IsMounted(dir) {
			t.Fatalf("mount --fstab (%s): %v\n%s", line, err, out)
		}
		pid, conn, _ := helperMounted(t, "mount --fstab", out, 0, dir)
		// mount(8) passes the line's options again, with those typed:
		// the same settings are no change.
		remountCycle(t, dir, "--fstab", fstab)
		// The line edited since the mount: a remount would not apply it.
		if err := os.WriteFile(fstab, []byte(strings.Replace(line, "lease=2s", "lease=3s", 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err = sysMount(t, nil, "mount", "--fstab", fstab, "-o", "remount", dir)
		if err == nil || !strings.Contains(out, "lease=3s (it runs with 2s)") {
			t.Errorf("mount -o remount after the fstab line's lease changed: %v, output %q; want it refused, naming lease", err, out)
		}
		if out, err := sysMount(t, nil, "umount", dir); err != nil {
			t.Fatalf("umount: %v\n%s", err, out)
		}
		mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
	})

	t.Run("mount.fuse3 convention", func(t *testing.T) {
		if _, err := os.Stat("/sbin/mount.fuse3"); err != nil {
			t.Skip("no mount.fuse3 (fuse3)")
		}
		// Without our helper, mount(8) falls back to mount.fuse, which
		// runs the program named by the subtype: esfs, from PATH.
		_ = os.Remove(helper)
		defer func() { _ = os.Symlink(bin, helper) }()
		// mount(8) hands helpers a sanitized PATH: esfs must be where
		// programs are installed, as a user would put it.
		installed := "/usr/local/bin/esfs"
		if _, err := os.Lstat(installed); err == nil {
			t.Skipf("%s exists: not replacing an installed esfs", installed)
		}
		if err := os.Symlink(bin, installed); err != nil {
			t.Skipf("cannot install %s: %v", installed, err)
		}
		defer os.Remove(installed)
		dir := t.TempDir()
		out, err := sysMount(t, nil, "mount", "-t", "fuse.esfs", f.Index, dir, "-o", opts)
		if err != nil || !mounttest.IsMounted(dir) {
			t.Fatalf("mount -t fuse.esfs through mount.fuse3: %v\n%s", err, out)
		}
		pid, conn, _ := helperMounted(t, "mount -t fuse.esfs through mount.fuse3", out, 0, dir)
		mounttest.Sh(t, dir, `test "$(cat f)" = through-mount`)
		remountCycle(t, dir) // mount.fuse3 runs esfs with -o remount,...
		if out, err := sysMount(t, nil, "umount", dir); err != nil {
			t.Fatalf("umount: %v\n%s", err, out)
		}
		mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
	})

	t.Run("errors", func(t *testing.T) {
		dir := t.TempDir()
		for _, c := range []struct{ index, opts, want string }{
			{f.Index, opts + ",colour=blue", `"colour" is not an esfs option`},
			{f.Index, opts + ",lease", `"lease" needs a value`},
			{"esfs-never-made", opts, "esfs mkfs"},
			{f.Index, "es_url=http://127.0.0.1:1", "127.0.0.1:1"},
		} {
			out, err := sysMount(t, nil, "mount", "-t", "fuse.esfs", c.index, dir, "-o", c.opts)
			if err == nil || mounttest.IsMounted(dir) || !strings.Contains(out, c.want) {
				t.Errorf("mount -o %s: err %v, mounted %v, want a failure saying %q:\n%s", c.opts, err, mounttest.IsMounted(dir), c.want, out)
			}
			if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 1 {
				t.Errorf("mount -o %s: %d lines of output, want one:\n%s", c.opts, len(lines), out)
			}
			if mounttest.IsMounted(dir) {
				_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			}
		}
	})
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
		{"unknown flag", []string{"mount", "--no-such-flag", emptyDir}, 2, "unknown flag --no-such-flag"},
		{"bad index name", []string{"mkfs", "--es-url", f.URL, "--index", "Bad/Name"}, 1, "index name"},
		{"bad URL", []string{"mkfs", "--es-url", "localhost:9200"}, 1, "http(s)://host:port"},
		{"a password in the URL refused, unsaid", []string{"mount", "--es-url", "http://someone:hunter2@127.0.0.1:1", "--index", f.Index, emptyDir}, 2, "holds a password"},
		{"credentials in the URL stay secret", []string{"mount", "--es-url", "http://someone:hunter2@127.0.0.1:1", "--index", f.Index, "--daemon", "--log-file", filepath.Join(t.TempDir(), "log"), emptyDir}, 1, "cannot reach Elasticsearch"},
		{"umount of a non-mount", []string{"umount", emptyDir}, 1, "not mounted"},
		{"unknown command", []string{"frobnicate"}, 2, "unknown command"},
		{"negative timeout", []string{"mount", "--attr-timeout=-1s", emptyDir}, 2, "must not be negative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mounttest.Run(t, mounttest.Cmd{Args: c.args, Env: []string{"ELASTICSEARCH_URL="}, Limit: 30 * time.Second})
			out, code, took := r.Out, r.Code, r.Took
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

// TestMountDaemonMode: --daemon returns once mounted with status 0, and with a
// clear error and non-zero status when it cannot mount.
func TestMountDaemonMode(t *testing.T) {
	f := mounttest.NewFS(t)
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "esfs.log") // not the system's log directory
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--daemon", "--log-file", logFile, "--es-url", f.URL, "--index", f.Index, dir}, Env: []string{"ELASTICSEARCH_URL="}, Limit: 60 * time.Second})
	pid, conn, logAt := daemonMounted(t, r.Out, r.Code, dir)
	if logAt != logFile {
		t.Errorf("the daemon says it logs to %q, want --log-file %s", logAt, logFile)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("daemon"), 0o644); err != nil {
		t.Fatal(err)
	}
	umountDaemon(t, f, dir, pid, conn)
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--daemon", "--es-url", f.URL, "--index", "esfs-never-made", dir}, Env: []string{"ELASTICSEARCH_URL="}, Limit: 60 * time.Second})
	out, code := r.Out, r.Code
	if code == 0 || !strings.Contains(out, "esfs mkfs") || mounttest.IsMounted(dir) {
		t.Fatalf("daemon mount of a missing filesystem: status %d:\n%s", code, out)
	}
}
