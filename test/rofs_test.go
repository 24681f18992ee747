package test

// A read-only mount answers as a read-only local filesystem: a call that
// would make a name answers EEXIST if the name is taken (also by another
// mount since this one last looked), EROFS if it is free.

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// roSetup is the tree both filesystems hold before the calls; roLate is
// made after the read-only mounts looked its names up and found nothing.
const (
	roSetup = "mkdir d; touch f d/g; ln -s f s; mkfifo p"
	roLate  = "mkdir late-d; touch late-f; ln -s f late-s; mkfifo late-p"
)

// roCall is one call that makes name (relative to the filesystem's root).
type roCall struct {
	name string
	do   func(root, name string) error
}

func roOpen(flags int) func(string, string) error {
	return func(root, name string) error {
		fd, err := unix.Open(filepath.Join(root, name), flags|unix.O_NONBLOCK, 0o644) // a FIFO must not block
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
}

var roCalls = []roCall{
	{"mkdir", func(root, name string) error { return unix.Mkdir(filepath.Join(root, name), 0o755) }},
	{"mknod FIFO", func(root, name string) error { return unix.Mkfifo(filepath.Join(root, name), 0o644) }},
	{"mknod file", func(root, name string) error { return unix.Mknod(filepath.Join(root, name), unix.S_IFREG|0o644, 0) }},
	{"symlink", func(root, name string) error { return unix.Symlink("target", filepath.Join(root, name)) }},
	{"link f", func(root, name string) error { return unix.Link(filepath.Join(root, "f"), filepath.Join(root, name)) }},
	{"open O_CREAT|O_EXCL", roOpen(unix.O_CREAT | unix.O_EXCL | unix.O_WRONLY)},
	{"open O_CREAT|O_WRONLY", roOpen(unix.O_CREAT | unix.O_WRONLY)},
	{"open O_CREAT|O_RDONLY", roOpen(unix.O_CREAT | unix.O_RDONLY)},
	{"open O_CREAT|O_RDONLY|O_TRUNC", roOpen(unix.O_CREAT | unix.O_RDONLY | unix.O_TRUNC)},
}

// roExclusive says which calls the kernel decides by a lookup made for
// the call itself, past its own cache. open(O_CREAT) without O_EXCL may
// be decided by a "no such name" the kernel keeps (--negative-timeout,
// 1s), as any lookup may be: it is only asked of the names that were
// there before.
func roExclusive(c roCall) bool {
	switch c.name {
	case "open O_CREAT|O_WRONLY", "open O_CREAT|O_RDONLY", "open O_CREAT|O_RDONLY|O_TRUNC":
		return false
	}
	return true
}

func roErrno(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// TestReadOnlyMountCreateErrnos: every call that makes a name, on a name
// taken (by each type), free, below a file and below a missing directory,
// answers on a read-only mount (with delegations, and without them with
// a daemon cache that would remember "no such name" for an hour) what it
// answers on a read-only tmpfs; also for names another mount made after
// the read-only mounts had looked them up and found nothing.
func TestReadOnlyMountCreateErrnos(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: run it as root")
	}
	local := t.TempDir()
	if err := syscall.Mount("esfs-test-rofs", local, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(local, syscall.MNT_DETACH) })
	mounttest.Sh(t, local, roSetup+"; "+roLate)
	if err := syscall.Mount("", local, "", syscall.MS_REMOUNT|syscall.MS_RDONLY, ""); err != nil {
		t.Fatalf("remounting the tmpfs read-only: %v", err)
	}

	f := mounttest.NewFS(t)
	rw := f.Mount(t)
	mounttest.Sh(t, rw.Dir, roSetup)
	rw.Sync(t)
	ros := map[string]*mounttest.Mount{
		"read-only":                 f.Mount(t, "--read-only"),
		"read-only, no delegations": f.Mount(t, "--read-only", "--delegations=false", "--cache-ttl", "1h"),
	}
	names := []string{"f", "d", "s", "p", "d/g", "new", "d/new", "f/new", "nodir/new"}
	late := []string{"late-d", "late-f", "late-s", "late-p"}
	for _, m := range ros {
		for _, n := range append(names, late...) {
			if _, err := os.Lstat(m.Path(n)); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.ENOTDIR) {
				t.Fatalf("stat %s: %v", m.Path(n), err)
			}
		}
	}
	// Another mount makes the late names, in memory under its write
	// delegation if it has one: the read-only mounts remember them
	// missing.
	mounttest.Sh(t, rw.Dir, roLate)

	run := func(root string, c roCall, name string) string {
		return roErrno(c.do(root, name))
	}
	for what, m := range ros {
		for _, c := range roCalls {
			for _, n := range names {
				want := run(local, c, n)
				if got := run(m.Dir, c, n); got != want {
					t.Errorf("%s mount: %s %s: %s, want %s as on a read-only tmpfs", what, c.name, n, got, want)
				}
			}
			if !roExclusive(c) {
				continue
			}
			for _, n := range late {
				want := run(local, c, n)
				if got := run(m.Dir, c, n); got != want {
					t.Errorf("%s mount: %s %s, made by another mount since this one looked: %s, want %s as on a read-only tmpfs", what, c.name, n, got, want)
				}
			}
		}
	}
	if got := mounttest.Sh(t, rw.Dir, "ls"); got != "d\nf\nlate-d\nlate-f\nlate-p\nlate-s\np\ns\n" {
		t.Errorf("the filesystem holds %q after the calls on its read-only mounts", got)
	}
}
