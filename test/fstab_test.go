package test

import (
	"errors"
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

// daemonPid reads the pid from the helper's "mounted DIR (pid N)" line.
func daemonPid(t *testing.T, out string) int {
	t.Helper()
	m := regexp.MustCompile(`\(pid (\d+)\)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no pid in the helper's output: %q", out)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// mountEntry returns the fstype and source of the mount at dir.
func mountEntry(dir string) (fstype, source string) {
	_, fstype, source, _ = mounttest.MountEntry(dir)
	return fstype, source
}

// daemonOf returns the pid the helper printed and the FUSE connection of
// the mount at dir, for ending the daemon within a bound.
func daemonOf(t *testing.T, out, dir string) (pid, conn int) {
	t.Helper()
	conn, _, _, _ = mounttest.MountEntry(dir)
	return daemonPid(t, out), conn
}

// TestMountHelper: `mount -t fuse.esfs`, an /etc/fstab line, and fuse3's
// mount.fuse3 convention all mount esfs in the background with options
// passed through; umount and SIGTERM end the daemon cleanly; bad options
// and a missing filesystem fail with one clear line.
func TestMountHelper(t *testing.T) {
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
		pid, conn := daemonOf(t, out, dir)
		if typ, src := mountEntry(dir); typ != "fuse.esfs" || src != "esfs:"+f.Index {
			t.Errorf("mount table says %q %q, want fuse.esfs esfs:%s", typ, src, f.Index)
		}
		mounttest.Sh(t, dir, `echo through-mount > f && test "$(cat f)" = through-mount`)
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
		pid, conn := daemonOf(t, out, dir)
		if data, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(data) != "through-mount\n" {
			t.Errorf("reading the file written before: %q, %v", data, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing on a ro fstab mount: %v, want EROFS", err)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
		if mounttest.IsMounted(dir) {
			t.Fatal("still mounted after SIGTERM to the daemon")
		}
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
		pid, conn := daemonOf(t, out, dir)
		mounttest.Sh(t, dir, `test "$(cat f)" = through-mount`)
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
