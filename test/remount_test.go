package test

// `mount -o remount`, as mount(8) runs the helper for it (here the helper
// is run directly, as mount(8) runs it; TestMountFstabAndHelper runs
// mount(8) itself), and the esfs.mount attribute by which a mount says
// what runs it.

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestMountAboutAttribute: a mount's root answers esfs.mount with the
// daemon's pid, where it logs and its settings as it runs them; the
// attribute is not listed, cannot be set, and no other file has it.
func TestMountAboutAttribute(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t, "-o", "lease=3s,cache_size=32") // -o wins over ESFS_TEST_MOUNT_FLAGS
	a := aboutOf(t, m.Dir)
	for name, want := range map[string]string{"lease": "3s", "cache-size": "32", "index": f.Index, "read-only": "false", "delegations": "true", "es-url": f.URL} {
		if got := a.Flags[name]; got != want {
			t.Errorf("esfs.mount says %s=%q, want %q", name, got, want)
		}
	}
	if a.Pid != m.Pid() || a.Log != "stderr" {
		t.Errorf("esfs.mount says pid %d, log %q; want %d, stderr (a mount in the foreground)", a.Pid, a.Log, m.Pid())
	}
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := syscall.Getxattr(m.Path("d"), "esfs.mount", make([]byte, 1024)); !errors.Is(err, syscall.ENODATA) {
		t.Errorf("esfs.mount of a directory below the root: %v, want ENODATA", err)
	}
	if err := syscall.Setxattr(m.Dir, "esfs.mount", []byte("{}"), 0); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("setting esfs.mount: %v, want EOPNOTSUPP", err)
	}
	buf := make([]byte, 4096)
	n, err := syscall.Listxattr(m.Dir, buf)
	if err != nil || strings.Contains(string(buf[:n]), "esfs.mount") {
		t.Errorf("listxattr of the root: %q, %v; want esfs.mount unlisted", buf[:n], err)
	}
}

// TestMountRemountRefusals: the helper refuses a remount, in one line and
// changing nothing, of what is no esfs mount of the source, and of
// options that would change the daemon's settings or the kernel's FUSE
// options; an option it does not know is a usage mistake, ignored with
// -s as on a mount; the same settings again are no change.
func TestMountRemountRefusals(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t, "-o", "lease=3s,cache_size=64")
	source := "esfs:" + f.Index
	delegations := aboutOf(t, m.Dir).Flags["delegations"]
	// The options as mount(8) passes them for a mount without an fstab
	// line: the mount table's, and the ones typed.
	current := "rw,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,max_read=1048576"
	tmpfs := t.TempDir()
	if err := syscall.Mount("esfs-test-tmpfs", tmpfs, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(tmpfs, syscall.MNT_DETACH) })
	plain := t.TempDir()
	helper := func(args ...string) mounttest.Result {
		return mounttest.Run(t, mounttest.Cmd{Args: args, Argv0: "mount.fuse.esfs", Limit: time.Minute})
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a plain directory", []string{source, plain, "-o", "remount,ro"}, 1, "remount of " + plain + ": it is not a mount point"},
		{"another filesystem's mount", []string{source, tmpfs, "-o", "remount,ro"}, 1, "remount of " + tmpfs + ": it is a tmpfs mount (source esfs-test-tmpfs), not esfs"},
		{"another esfs filesystem's source", []string{"esfs:esfs-other", m.Dir, "-o", "remount,ro"}, 1, source + " is mounted there, not esfs:esfs-other"},
		{"a setting of the daemon", []string{source, m.Dir, "-o", current + ",remount,lease=5s,cache_size=128,ro"}, 1,
			"esfs cannot change these on a live mount: lease=5s (it runs with 3s), cache_size=128 (it runs with 64); unmount it and mount it again to change them"},
		{"allow_other", []string{source, m.Dir, "-o", "remount,allow_other"}, 1, "allow_other (it runs with false)"},
		{"a kernel option of FUSE", []string{source, m.Dir, "-o", "remount,user_id=4242"}, 1, "user_id=4242 (the mount has user_id=0)"},
		{"a kernel option the mount lacks", []string{source, m.Dir, "-o", "remount,blksize=4096"}, 1, "blksize=4096 (the mount has no blksize)"},
		{"an unknown option", []string{source, m.Dir, "-o", "remount,ro,colour=blue"}, 2, `mount option "colour" is not an esfs option`},
		{"a bad value", []string{source, m.Dir, "-o", "remount,lease=5"}, 2, "-o lease 5: a duration needs a unit: 5s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := helper(c.args...)
			oneFailure(t, strings.Join(c.args, " "), r.Out, r.Code, c.want)
			if r.Code != c.code {
				t.Errorf("exit status %d, want %d", r.Code, c.code)
			}
		})
	}
	if opts := superOptions(t, m.Dir); !hasOption(opts, "rw") {
		t.Errorf("a refused remount changed the mount: %q", opts)
	}
	if err := os.WriteFile(m.Path("still-writable"), nil, 0o644); err != nil {
		t.Errorf("writing after the refused remounts: %v", err)
	}
	// The daemon's own settings given again (an fstab line's, as mount(8)
	// passes them) change nothing, and the kernel's flags change; -s
	// ignores what esfs does not know.
	r := helper(source, m.Dir, "-s", "-o", current+",remount,ro,lease=3s,index="+f.Index+",es_url="+f.URL+",delegations="+delegations+",_netdev,x-systemd.automount,colour=blue")
	if r.Code != 0 || r.Out != "" {
		t.Fatalf("remount,ro with the mount's own settings: status %d, output %q; want 0 and nothing", r.Code, r.Out)
	}
	if opts := superOptions(t, m.Dir); !hasOption(opts, "ro") {
		t.Errorf("after remount,ro the superblock's options are %q", opts)
	}
	if err := os.WriteFile(m.Path("g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create after remount,ro: %v, want EROFS", err)
	}
	if r := helper(source, m.Dir, "-o", "remount,rw"); r.Code != 0 || r.Out != "" {
		t.Fatalf("remount,rw: status %d, output %q", r.Code, r.Out)
	}
	if err := os.WriteFile(m.Path("g"), []byte("after\n"), 0o644); err != nil {
		t.Errorf("create after remount,rw: %v", err)
	}
	m.Unmount(t)
	mounttest.CheckInvariants(t, f, nil)
}

// TestMountRemountReadOnly: a mount started read-only stays so: rw is
// refused (its daemon cannot start writing live), ro again is no change.
func TestMountRemountReadOnly(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t, "--read-only")
	source := "esfs:" + f.Index
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{source, m.Dir, "-o", "ro,nosuid,nodev,relatime,remount,rw"}, Argv0: "mount.fuse.esfs", Limit: time.Minute})
	oneFailure(t, "remount,rw of a read-only mount", r.Out, r.Code, "remount of "+m.Dir+" read-write: it was mounted read-only (ro), and its daemon cannot start writing live")
	if opts := superOptions(t, m.Dir); !hasOption(opts, "ro") {
		t.Errorf("a refused remount,rw changed the mount: %q", opts)
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{source, m.Dir, "-o", "remount,ro,noexec"}, Argv0: "mount.fuse.esfs", Limit: time.Minute})
	if r.Code != 0 || r.Out != "" {
		t.Errorf("remount,ro,noexec of a read-only mount: status %d, output %q", r.Code, r.Out)
	}
	if opts := mountOptions(t, m.Dir); !hasOption(opts, "noexec") || !hasOption(opts, "nosuid") {
		t.Errorf("after remount,ro,noexec the mount's options are %q, want noexec added and nosuid kept", opts)
	}
}

// mountOptions are the options of the mount at dir (not its superblock's:
// nosuid, noexec, relatime...), field 6 of /proc/self/mountinfo.
func mountOptions(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	opts := ""
	for _, l := range strings.Split(string(b), "\n") {
		if fields := strings.Fields(l); len(fields) > 5 && fields[4] == dir {
			opts = fields[5]
		}
	}
	return opts
}

// remountCycle runs `mount -o remount,ro` and `remount,rw` (mount(8),
// with extra arguments before -o) on the live esfs mount at dir, which
// must succeed silently: read-only in between (EROFS, the file written
// before readable, the mount's nosuid and nodev kept), writable after;
// a change of a daemon's setting is refused and changes nothing; a file
// open for writing keeps the kernel from making it read-only, said in
// one line.
func remountCycle(t *testing.T, dir string, extra ...string) {
	t.Helper()
	remount := func(opts string) (string, error) {
		return sysMount(t, nil, "mount", append(append(append([]string{}, extra...), "-o", "remount,"+opts), dir)...)
	}
	name := "written-before-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, name), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := remount("ro"); err != nil || out != "" {
		t.Fatalf("mount -o remount,ro %s: %v, output %q; want success and nothing", dir, err, out)
	}
	if opts := superOptions(t, dir); !hasOption(opts, "ro") {
		t.Errorf("after remount,ro the superblock's options are %q", opts)
	}
	if opts := mountOptions(t, dir); !hasOption(opts, "ro") || !hasOption(opts, "nosuid") || !hasOption(opts, "nodev") {
		t.Errorf("after remount,ro the mount's options are %q, want ro, nosuid and nodev", opts)
	}
	if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != "kept\n" {
		t.Errorf("reading after remount,ro: %q, %v", b, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create after remount,ro: %v, want EROFS", err)
	}
	if out, err := remount("rw"); err != nil || out != "" {
		t.Fatalf("mount -o remount,rw %s: %v, output %q; want success and nothing", dir, err, out)
	}
	if err := os.WriteFile(filepath.Join(dir, "g"), nil, 0o644); err != nil {
		t.Errorf("create after remount,rw: %v", err)
	}
	out, err := remount("lease=7s")
	if err == nil || !strings.Contains(out, "esfs cannot change these on a live mount: lease=7s (it runs with 2s)") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("mount -o remount,lease=7s: %v, output %q; want a failure in one line naming lease", err, out)
	}
	fh, err := os.OpenFile(filepath.Join(dir, "g"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	out, err = remount("ro")
	fh.Close()
	if err == nil || !strings.Contains(out, "files are open for writing there") {
		t.Errorf("mount -o remount,ro with a file open for writing: %v, output %q; want a failure saying so", err, out)
	}
	if opts := superOptions(t, dir); !hasOption(opts, "rw") {
		t.Errorf("refused remounts left the superblock's options %q, want rw", opts)
	}
	if err := os.Remove(filepath.Join(dir, "g")); err != nil {
		t.Errorf("remove after the refused remounts: %v", err)
	}
}
