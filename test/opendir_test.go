package test

// A directory open in a process (or its working directory) lives on when
// it is removed, by rmdir or by a rename over it, through the process's
// mount or another: its descriptor answers fstat (no links), fchmod,
// fchown and futimens as on a local filesystem, and getdents ENOENT.

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// removedDirCalls opens dir/b, has remove (given the directory to remove
// through) take it away, and reports what the descriptor answers then, and
// what a shell whose working directory it was sees.
func removedDirCalls(t *testing.T, dir, through string, remove func(string) error) string {
	t.Helper()
	for _, n := range []string{"a", "b"} {
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "in-a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "b"), 0o751); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(filepath.Join(dir, "b"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	var before unix.Stat_t
	if err := unix.Fstat(fd, &before); err != nil {
		t.Fatal(err)
	}
	// A shell whose working directory it is, asked once it is removed.
	in, shOut := startReadyIn(t, filepath.Join(dir, "b"), "sh", "-c", `echo ready; read go; stat -c "cwd: nlink %h, mode %a" .; ls -a; echo "ls: $?"`)
	if err := remove(through); err != nil {
		out, _ := exec.Command("ls", "-laR", dir).CombinedOutput()
		t.Fatalf("removing %s/b: %v\n%s", through, err, out)
	}
	out := ""
	stat := func(what string) {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			out += fmt.Sprintf("%s: %s\n", what, roErrno(err))
			return
		}
		out += fmt.Sprintf("%s: dir %v, nlink %d, mode %o, owner %d:%d, same mtime %v\n", what,
			st.Mode&unix.S_IFMT == unix.S_IFDIR, st.Nlink, st.Mode&0o7777, st.Uid, st.Gid, st.Mtim == before.Mtim)
	}
	stat("fstat")
	out += "fchmod: " + roErrno(unix.Fchmod(fd, 0o700)) + "\n"
	out += "fchown: " + roErrno(unix.Fchown(fd, 1000, 1001)) + "\n"
	stat("fstat after fchmod and fchown")
	ts := []unix.Timespec{{Sec: 1000}, {Sec: 2000}}
	out += "futimens: " + roErrno(unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH)) + "\n"
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil {
		out += fmt.Sprintf("mtime after futimens: %d\n", st.Mtim.Sec)
	}
	buf := make([]byte, 4096)
	_, err = unix.Getdents(fd, buf)
	out += "getdents: " + roErrno(err) + "\n"
	out += "fsync: " + roErrno(unix.Fsync(fd)) + "\n"
	in.Write([]byte("go\n"))
	in.Close()
	rest, _ := io.ReadAll(shOut)
	return out + string(rest)
}

// TestRemovedDirectoryOpen: a directory open in a process, then removed
// (rmdir, or a rename over it) through the same mount or another, answers
// as on a tmpfs (bind-mounted for "another mount"). And a directory that
// another mount renamed away, making a new one at its name, is never
// listed as that new one: getdents answers ESTALE (esfs lists by path).
func TestRemovedDirectoryOpen(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: run it as root")
	}
	local, bind := t.TempDir(), t.TempDir()
	if err := syscall.Mount("esfs-test-opendir", local, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(local, syscall.MNT_DETACH) })
	if err := syscall.Mount(local, bind, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting the tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(bind, syscall.MNT_DETACH) })
	f := mounttest.NewFS(t)
	m1, m2 := f.Mount(t), f.Mount(t)

	removals := map[string]func(string) error{
		"rename over it": func(d string) error { return unix.Rename(filepath.Join(d, "a"), filepath.Join(d, "b")) }, // os.Rename refuses a directory target
		"rmdir":          func(d string) error { return syscall.Rmdir(filepath.Join(d, "b")) },
	}
	for what, remove := range removals {
		for _, other := range []bool{false, true} {
			name := what + " through the same mount"
			localThrough, through := local, m1.Dir
			if other {
				name = what + " through another mount"
				localThrough, through = bind, m2.Dir
			}
			want := removedDirCalls(t, local, localThrough, remove)
			got := removedDirCalls(t, m1.Dir, through, remove)
			if got != want {
				t.Errorf("a directory open, then removed by %s:\n%s\nwant, as on a tmpfs:\n%s", name, got, want)
			}
		}
	}

	// Renamed away by another mount, and a new directory made at its
	// name: never listed as that one.
	for _, n := range []string{"a", "b", "c"} {
		if err := os.RemoveAll(m1.Path(n)); err != nil {
			t.Fatal(err)
		}
	}
	mounttest.Sh(t, m1.Dir, "mkdir b; mkdir a; touch a/in-a")
	fd, err := unix.Open(m1.Path("b"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	mounttest.Sh(t, m2.Dir, "mv b c; mv a b")
	buf := make([]byte, 4096)
	n, err := unix.Getdents(fd, buf)
	var names []string
	for off := 0; off < n; {
		var name string
		reclen := int(buf[off+16]) | int(buf[off+17])<<8
		for i := off + 19; i < off+reclen && buf[i] != 0; i++ {
			name += string(buf[i])
		}
		names = append(names, name)
		off += reclen
	}
	if err != syscall.ESTALE {
		t.Errorf("getdents of a directory another mount renamed away, a new one made at its name: %v %q, want ESTALE", err, names)
	}
}
