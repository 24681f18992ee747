package test

// Error numbers and names: esfs's own table of POSIX edge cases, each row
// naming the errno it must get, and names made of any bytes.

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// TestErrnoTable is esfs's own table of POSIX edge cases: each row does one
// thing on a fresh directory of a real mount and names the errno it must get.
func TestErrnoTable(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	long := strings.Repeat("n", 256)
	cases := []struct {
		name  string
		setup string // shell run in the case's directory first
		do    func(dir string) error
		want  syscall.Errno // 0: must succeed
	}{
		{"mkdir existing", "mkdir d", func(d string) error { return os.Mkdir(d+"/d", 0o755) }, syscall.EEXIST},
		{"mkdir over file", "touch f", func(d string) error { return os.Mkdir(d+"/f", 0o755) }, syscall.EEXIST},
		{"mkdir in a file", "touch f", func(d string) error { return os.Mkdir(d+"/f/x", 0o755) }, syscall.ENOTDIR},
		{"rmdir non-empty", "mkdir -p d/e", func(d string) error { return syscall.Rmdir(d + "/d") }, syscall.ENOTEMPTY},
		{"rmdir with a file inside", "mkdir d; touch d/f", func(d string) error { return syscall.Rmdir(d + "/d") }, syscall.ENOTEMPTY},
		{"rmdir a file", "touch f", func(d string) error { return syscall.Rmdir(d + "/f") }, syscall.ENOTDIR},
		{"rmdir missing", "", func(d string) error { return syscall.Rmdir(d + "/nope") }, syscall.ENOENT},
		{"unlink a directory", "mkdir d", func(d string) error { return syscall.Unlink(d + "/d") }, syscall.EISDIR},
		{"unlink missing", "", func(d string) error { return syscall.Unlink(d + "/nope") }, syscall.ENOENT},
		{"O_EXCL on existing", "touch f", func(d string) error {
			_, err := os.OpenFile(d+"/f", os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			return err
		}, syscall.EEXIST},
		{"open missing", "", func(d string) error { _, err := os.Open(d + "/nope"); return err }, syscall.ENOENT},
		{"name of 255 bytes", "", func(d string) error { return os.WriteFile(d+"/"+long[:255], []byte("x"), 0o644) }, 0},
		{"name of 256 bytes", "", func(d string) error { return os.WriteFile(d+"/"+long, []byte("x"), 0o644) }, syscall.ENAMETOOLONG},
		{"mkdir name of 256 bytes", "", func(d string) error { return os.Mkdir(d+"/"+long, 0o755) }, syscall.ENAMETOOLONG},
		{"path over 4096 bytes", "", func(d string) error { return deepCreate(d) }, syscall.ENAMETOOLONG},
		{"mv a a/b", "mkdir a", func(d string) error { return syscall.Rename(d+"/a", d+"/a/b") }, syscall.EINVAL},
		{"mv a a/b/c deep", "mkdir -p a/b", func(d string) error { return syscall.Rename(d+"/a", d+"/a/b/c") }, syscall.EINVAL},
		{"mv file over dir", "touch f; mkdir d", func(d string) error { return syscall.Rename(d+"/f", d+"/d") }, syscall.EISDIR},
		{"mv dir over file", "touch f; mkdir d", func(d string) error { return syscall.Rename(d+"/d", d+"/f") }, syscall.ENOTDIR},
		{"mv dir over non-empty dir", "mkdir a b; touch b/x", func(d string) error { return syscall.Rename(d+"/a", d+"/b") }, syscall.ENOTEMPTY},
		{"mv dir over empty dir", "mkdir a b; touch a/x", func(d string) error { return syscall.Rename(d+"/a", d+"/b") }, 0},
		{"mv file over file", "echo 1 > a; echo 2 > b", func(d string) error { return syscall.Rename(d+"/a", d+"/b") }, 0},
		{"mv missing", "", func(d string) error { return syscall.Rename(d+"/nope", d+"/x") }, syscall.ENOENT},
		{"mv onto itself", "touch f", func(d string) error { return syscall.Rename(d+"/f", d+"/f") }, 0},
		{"RENAME_NOREPLACE onto existing", "touch a b", func(d string) error {
			return unix.Renameat2(unix.AT_FDCWD, d+"/a", unix.AT_FDCWD, d+"/b", unix.RENAME_NOREPLACE)
		}, syscall.EEXIST},
		{"RENAME_NOREPLACE onto free name", "touch a", func(d string) error {
			return unix.Renameat2(unix.AT_FDCWD, d+"/a", unix.AT_FDCWD, d+"/c", unix.RENAME_NOREPLACE)
		}, 0},
		{"hard link to a directory", "mkdir d", func(d string) error { return os.Link(d+"/d", d+"/l") }, syscall.EPERM},
		{"hard link onto existing", "touch a b", func(d string) error { return os.Link(d+"/a", d+"/b") }, syscall.EEXIST},
		{"symlink onto existing", "touch a", func(d string) error { return os.Symlink("x", d+"/a") }, syscall.EEXIST},
		{"readlink of a file", "touch f", func(d string) error { _, err := os.Readlink(d + "/f"); return err }, syscall.EINVAL},
		{"mkfifo over existing", "touch f", func(d string) error { return unix.Mkfifo(d+"/f", 0o644) }, syscall.EEXIST},
		{"mknod in a file", "touch f", func(d string) error { return unix.Mknod(d+"/f/p", unix.S_IFIFO|0o644, 0) }, syscall.ENOTDIR},
		{"mknod of a directory", "", func(d string) error { return unix.Mknod(d+"/x", unix.S_IFDIR|0o755, 0) }, syscall.EPERM},
		{"rmdir a FIFO", "mkfifo p", func(d string) error { return syscall.Rmdir(d + "/p") }, syscall.ENOTDIR},
		{"readlink of a FIFO", "mkfifo p", func(d string) error { _, err := os.Readlink(d + "/p"); return err }, syscall.EINVAL},
		{"truncate a FIFO", "mkfifo p", func(d string) error { return os.Truncate(d+"/p", 0) }, syscall.EINVAL},
		{"hard link to a FIFO", "mkfifo p", func(d string) error { return os.Link(d+"/p", d+"/q") }, 0},
		{"mv FIFO over dir", "mkfifo p; mkdir d", func(d string) error { return syscall.Rename(d+"/p", d+"/d") }, syscall.EISDIR},
		{"open a device (FUSE mounts are nodev)", "mknod c c 1 3", func(d string) error {
			f, err := os.Open(d + "/c")
			if err == nil {
				f.Close()
			}
			return err
		}, syscall.EACCES},
		{"truncate a directory", "mkdir d", func(d string) error { return os.Truncate(d+"/d", 0) }, syscall.EISDIR},
		{"getxattr missing", "touch f", func(d string) error { _, err := unix.Getxattr(d+"/f", "user.nope", make([]byte, 10)); return err }, syscall.ENODATA},
		{"setxattr security namespace", "touch f", func(d string) error { return unix.Setxattr(d+"/f", "security.x", []byte("v"), 0) }, syscall.EOPNOTSUPP},
		{"setxattr XATTR_CREATE existing", "touch f; setfattr -n user.a -v 1 f", func(d string) error {
			return unix.Setxattr(d+"/f", "user.a", []byte("2"), unix.XATTR_CREATE)
		}, syscall.EEXIST},
		{"setxattr XATTR_REPLACE missing", "touch f", func(d string) error {
			return unix.Setxattr(d+"/f", "user.a", []byte("2"), unix.XATTR_REPLACE)
		}, syscall.ENODATA},
		{"getxattr small buffer", "touch f; setfattr -n user.a -v 12345 f", func(d string) error {
			_, err := unix.Getxattr(d+"/f", "user.a", make([]byte, 2))
			return err
		}, syscall.ERANGE},
		{"removexattr missing", "touch f", func(d string) error { return unix.Removexattr(d+"/f", "user.a") }, syscall.ENODATA},
		{"xattr value over 64 KiB", "touch f", func(d string) error { return unix.Setxattr(d+"/f", "user.big", make([]byte, 65537), 0) }, syscall.E2BIG},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := m.Path(strings.NewReplacer(" ", "_", "/", "-").Replace(c.name))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if c.setup != "" {
				mounttest.Sh(t, dir, c.setup)
			}
			err := c.do(dir)
			var got syscall.Errno
			if err != nil && !errors.As(err, &got) {
				t.Fatalf("error without errno: %v", err)
			}
			if got != c.want {
				t.Fatalf("got %v (%d), want %v (%d)", err, got, c.want, c.want)
			}
		})
	}
}

// deepCreate makes directories of 255-byte names with relative calls, so
// that no syscall argument exceeds PATH_MAX but the full path does.
func deepCreate(dir string) error {
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	name := strings.Repeat("d", 255)
	total := len(dir)
	for i := 0; i < 20; i++ {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			unix.Close(fd)
			return err
		}
		total += 256
		next, err := unix.Openat(fd, name, unix.O_DIRECTORY|unix.O_RDONLY, 0)
		unix.Close(fd)
		if err != nil {
			return err
		}
		fd = next
	}
	unix.Close(fd)
	return nil
}

// TestStrangeNames: any byte but '/' and NUL makes a valid name, and names
// that look like Elasticsearch query syntax are just names.
func TestStrangeNames(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	names := []string{"with space", "new\nline", "per%cent", "hash#tag", "ünïcødé-日本", "\xff\xfe-not-utf8",
		"*", "?", "[a-z]", `{"query":{"match_all":{}}}`, "path:x", "a\\b", "-dash", ".hidden", "..dots", "tab\tchar",
		"\U0010FF80-private", strings.Repeat("z", 255)}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(m.Dir, n), []byte(n), 0o644); err != nil {
			t.Fatalf("create %q: %v", n, err)
		}
	}
	entries, err := os.ReadDir(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	want := append([]string(nil), names...)
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("listing:\n got %q\nwant %q", got, want)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(m.Dir, n))
		if err != nil || string(b) != n {
			t.Fatalf("read %q: %q %v", n, b, err)
		}
	}
	// The same names survive a directory rename.
	if err := os.Mkdir(m.Path("sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := syscall.Rename(filepath.Join(m.Dir, n), filepath.Join(m.Dir, "sub", n)); err != nil {
			t.Fatalf("rename %q: %v", n, err)
		}
	}
	if err := syscall.Rename(m.Path("sub"), m.Path("moved")); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if b, err := os.ReadFile(filepath.Join(m.Dir, "moved", n)); err != nil || string(b) != n {
			t.Fatalf("after rename, read %q: %q %v", n, b, err)
		}
	}
}
