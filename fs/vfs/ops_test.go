package vfs

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// These tests drive the filesystem's logic in process, through the
// path-based operations, against a real cluster and without a kernel
// mount: what a mount does for mkdir, create, link, unlink, rmdir and
// rename, and the errors it answers with.

func TestMain(m *testing.M) {
	testenv.PrintVersion("fs")
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newFS builds a filesystem on a fresh index, as esfs mount does, with
// locking strategy strategy.
func newFS(t *testing.T, strategy string) *Mount {
	t.Helper()
	f, _ := newMountOn(t, testenv.Store(t), strategy, Options{})
	return f
}

// newMountOn is a mount of the filesystem in st with locking strategy
// strategy and options o, as esfs mount makes one (its own session), and
// what ends its session (once; the test's end does too).
func newMountOn(t *testing.T, st *store.Store, strategy string, o Options) (*Mount, func()) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	co, err := locking.Start(ctxT(t), st, locking.Config{Strategy: strategy, Lease: 10 * time.Second,
		LockTimeout: 10 * time.Second, Mount: "(in-process test)", Log: log, NoSweeper: true})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	end := func() { once.Do(func() { _ = co.Close(context.Background()) }) }
	t.Cleanup(end)
	c, err := cache.New(16<<20, time.Second, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	o.LockTimeout, o.Logger = 10*time.Second, log
	return New(st, co, c, o), end
}

// errnoOf is the errno the adapter answers for err, for the errors these
// tests expect (fs.FS.toErrno maps the rest).
func errnoOf(_ *Mount, err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, store.ErrNotFound):
		return syscall.ENOENT
	case errors.Is(err, store.ErrExists):
		return syscall.EEXIST
	case errors.Is(err, store.ErrNameTooLong):
		return syscall.ENAMETOOLONG
	case errors.Is(err, store.ErrInvalid):
		return syscall.EINVAL
	}
	return syscall.EIO
}

// wantErrno fails the test unless err is an error a mount answers with want.
func wantErrno(t *testing.T, f *Mount, what string, err error, want syscall.Errno) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %v", what, want)
	}
	if got := errnoOf(f, err); got != want {
		t.Fatalf("%s: %v (errno %v), want %v", what, err, got, want)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// names lists directory dir as readdir does: refreshed for this FS's own
// writes, hiding what a rename in flight hides.
func names(t *testing.T, f *Mount, dir string) []string {
	t.Helper()
	ctx := ctxT(t)
	must(t, "refresh", f.refreshIfDirty(ctx))
	sc := f.co.View.List(dir, store.DefaultPageSize)
	defer sc.Close()
	var out []string
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil || len(bad) > 0 {
			t.Fatalf("listing %s: %v %v", dir, err, bad)
		}
		if page == nil {
			slices.Sort(out)
			return out
		}
		for _, d := range page {
			out = append(out, d.Name)
		}
	}
}

// nlink is the link count the store holds for the inode at path.
func nlink(t *testing.T, f *Mount, path string) uint32 {
	t.Helper()
	sn, err := f.resolveFresh(ctxT(t), path)
	must(t, "resolving "+path, err)
	return inodeOf(t, f, sn.Ino).Nlink
}

func inodeOf(t *testing.T, f *Mount, ino uint64) store.Inode {
	t.Helper()
	a, err := f.st.GetInode(ctxT(t), ino)
	must(t, "reading an inode", err)
	return a
}

func dir(mode uint32) Entry  { return Entry{Type: store.TypeDir, Mode: mode, Uid: 1000, Gid: 1000} }
func file(mode uint32) Entry { return Entry{Type: store.TypeFile, Mode: mode, Uid: 1000, Gid: 1000} }

// TestEntryOps: names appear and disappear, link counts of files and
// directories follow, and the refusals are the errors a mount answers,
// with each locking strategy (tree and document take creates under
// shared locks, global does not).
func TestEntryOps(t *testing.T) {
	for _, strategy := range []string{"tree", "document", "global"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			testEntryOps(t, newFS(t, strategy))
		})
	}
}

func testEntryOps(t *testing.T, f *Mount) {
	ctx := ctxT(t)

	// mkdir: two links, and one more for its parent.
	d, err := f.Create(ctx, "/d", dir(0o755))
	must(t, "mkdir /d", err)
	if d.Type != store.TypeDir || d.Attr.Nlink != 2 || d.Attr.Mode != 0o755 || d.Attr.Uid != 1000 || d.Attr.Gid != 1000 {
		t.Fatalf("mkdir /d made %+v", d.Attr)
	}
	if n := nlink(t, f, "/"); n != 3 {
		t.Fatalf("root has %d links after a mkdir, want 3", n)
	}
	_, err = f.Create(ctx, "/d", dir(0o755))
	if !errors.Is(err, store.ErrExists) {
		t.Fatalf("mkdir of an existing name: %v, want store.ErrExists", err)
	}
	wantErrno(t, f, "mkdir of an existing name", err, syscall.EEXIST)

	// create: a file, and no link for its directory.
	a, err := f.Create(ctx, "/d/a", file(0o640))
	must(t, "create /d/a", err)
	if a.Type != store.TypeFile || a.Attr.Nlink != 1 || a.Attr.Mode != 0o640 {
		t.Fatalf("create /d/a made %+v", a.Attr)
	}
	_, err = f.Create(ctx, "/d/a", file(0o644))
	wantErrno(t, f, "create of an existing name", err, syscall.EEXIST)
	_, err = f.Create(ctx, "/missing/a", file(0o644))
	wantErrno(t, f, "create in a missing directory", err, syscall.ENOENT)
	_, err = f.Create(ctx, "/d/a/x", file(0o644))
	wantErrno(t, f, "create below a file", err, syscall.ENOTDIR)
	_, err = f.Create(ctx, "/d/l", Entry{Type: store.TypeSymlink})
	wantErrno(t, f, "symlink without a target", err, syscall.ENOENT)
	_, err = f.Create(ctx, "/d/x", Entry{Mode: 0o644})
	wantErrno(t, f, "create without a type", err, syscall.EINVAL)
	l, err := f.Create(ctx, "/d/l", Entry{Type: store.TypeSymlink, Target: "a"})
	must(t, "symlink /d/l", err)
	if l.Attr.Target != "a" || l.Attr.Size != 1 || l.Attr.Mode != 0o777 {
		t.Fatalf("symlink /d/l made %+v", l.Attr)
	}
	_, err = f.Create(ctx, "/d/fifo", Entry{Type: store.TypeFifo, Mode: 0o600})
	must(t, "mkfifo /d/fifo", err)
	sub, err := f.Create(ctx, "/d/sub", dir(0o700))
	must(t, "mkdir /d/sub", err)
	if got, want := names(t, f, "/d"), []string{"a", "fifo", "l", "sub"}; !slices.Equal(got, want) {
		t.Fatalf("/d lists %q, want %q", got, want)
	}
	if n := nlink(t, f, "/d"); n != 3 {
		t.Fatalf("/d has %d links with one subdirectory, want 3", n)
	}

	// link: a second name, and the count of the one inode.
	b, err := f.Link(ctx, "/d/a", "/d/b")
	must(t, "link /d/a /d/b", err)
	if b.Ino != a.Ino || b.Attr.Nlink != 2 || nlink(t, f, "/d/a") != 2 {
		t.Fatalf("link made %+v (ino %d), want inode %d with 2 links", b.Attr, b.Ino, a.Ino)
	}
	_, err = f.Link(ctx, "/d/a", "/d/l")
	wantErrno(t, f, "link over an existing name", err, syscall.EEXIST)
	_, err = f.Link(ctx, "/d/sub", "/d/sub2")
	wantErrno(t, f, "link of a directory", err, syscall.EPERM)
	_, err = f.Link(ctx, "/d/nothing", "/d/c")
	wantErrno(t, f, "link of a missing name", err, syscall.ENOENT)
	if n := nlink(t, f, "/d/a"); n != 2 {
		t.Fatalf("refused links changed the count to %d", n)
	}

	// unlink and rmdir refuse the wrong kind, and non-empty directories.
	wantErrno(t, f, "rmdir of a non-empty directory", f.Rmdir(ctx, "/d"), syscall.ENOTEMPTY)
	wantErrno(t, f, "unlink of a directory", f.Unlink(ctx, "/d/sub"), syscall.EISDIR)
	wantErrno(t, f, "rmdir of a file", f.Rmdir(ctx, "/d/a"), syscall.ENOTDIR)
	wantErrno(t, f, "unlink of a missing name", f.Unlink(ctx, "/d/nothing"), syscall.ENOENT)

	// unlink drops one link; the inode lives on under its other name.
	must(t, "unlink /d/a", f.Unlink(ctx, "/d/a"))
	if _, err := f.resolveFresh(ctx, "/d/a"); errnoOf(f, err) != syscall.ENOENT {
		t.Fatalf("/d/a after its unlink: %v, want ENOENT", err)
	}
	wantErrno(t, f, "second unlink", f.Unlink(ctx, "/d/a"), syscall.ENOENT)
	if n := nlink(t, f, "/d/b"); n != 1 {
		t.Fatalf("/d/b has %d links after unlinking /d/a, want 1", n)
	}

	// rmdir: the directory goes, and its parent's count with it.
	must(t, "rmdir /d/sub", f.Rmdir(ctx, "/d/sub"))
	if _, err := f.st.GetInode(ctx, sub.Ino); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("inode of a removed directory: %v, want store.ErrNotFound", err)
	}
	if n := nlink(t, f, "/d"); n != 2 {
		t.Fatalf("/d has %d links after its subdirectory's rmdir, want 2", n)
	}
	if got, want := names(t, f, "/d"), []string{"b", "fifo", "l"}; !slices.Equal(got, want) {
		t.Fatalf("/d lists %q, want %q", got, want)
	}
}

// TestRenameOps: a rename moves a name (and a directory's link from one
// parent to the other), refuses what rename(2) refuses, and a rename that
// replaces a file drops the replaced inode's link: an inode with another
// name lives on, the last link's inode goes.
func TestRenameOps(t *testing.T) {
	for _, strategy := range []string{"tree", "document"} {
		t.Run(strategy, func(t *testing.T) {
			t.Parallel()
			testRenameOps(t, newFS(t, strategy))
		})
	}
}

func testRenameOps(t *testing.T, f *Mount) {
	ctx := ctxT(t)
	for _, p := range []string{"/src", "/dst", "/src/sub"} {
		_, err := f.Create(ctx, p, dir(0o755))
		must(t, "mkdir "+p, err)
	}
	x, err := f.Create(ctx, "/src/x", file(0o644))
	must(t, "create /src/x", err)
	old, err := f.Create(ctx, "/dst/old", file(0o644))
	must(t, "create /dst/old", err)
	_, err = f.Link(ctx, "/dst/old", "/dst/keep")
	must(t, "link /dst/old /dst/keep", err)

	wantErrno(t, f, "rename without replacing", f.Rename(ctx, "/src/x", "/dst/old", true), syscall.EEXIST)
	wantErrno(t, f, "rename of a missing name", f.Rename(ctx, "/src/nothing", "/dst/y", false), syscall.ENOENT)
	wantErrno(t, f, "rename of a directory into itself", f.Rename(ctx, "/src", "/src/sub/src", false), syscall.EINVAL)
	wantErrno(t, f, "rename of a file over a directory", f.Rename(ctx, "/src/x", "/src/sub", false), syscall.EISDIR)
	wantErrno(t, f, "rename of a directory over a file", f.Rename(ctx, "/src/sub", "/dst/old", false), syscall.ENOTDIR)
	_, err = f.Create(ctx, "/dst/full", dir(0o755))
	must(t, "mkdir /dst/full", err)
	_, err = f.Create(ctx, "/dst/full/f", file(0o644))
	must(t, "create /dst/full/f", err)
	wantErrno(t, f, "rename over a non-empty directory", f.Rename(ctx, "/src/sub", "/dst/full", false), syscall.ENOTEMPTY)

	// Replacing a file with another name: its inode loses one link.
	must(t, "rename /src/x /dst/old", f.Rename(ctx, "/src/x", "/dst/old", false))
	moved, err := f.resolveFresh(ctx, "/dst/old")
	must(t, "resolving /dst/old", err)
	if moved.Ino != x.Ino {
		t.Fatalf("/dst/old is inode %d after the rename, want %d", moved.Ino, x.Ino)
	}
	if a := inodeOf(t, f, old.Ino); a.Nlink != 1 {
		t.Fatalf("the replaced inode has %d links, want 1 (its other name)", a.Nlink)
	}
	if got, want := names(t, f, "/src"), []string{"sub"}; !slices.Equal(got, want) {
		t.Fatalf("/src lists %q after the rename, want %q", got, want)
	}

	// Replacing its last link: the inode goes.
	y, err := f.Create(ctx, "/src/y", file(0o644))
	must(t, "create /src/y", err)
	must(t, "rename /src/y /dst/keep", f.Rename(ctx, "/src/y", "/dst/keep", false))
	if _, err := f.st.GetInode(ctx, old.Ino); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("inode replaced at its last link: %v, want store.ErrNotFound", err)
	}
	if keep, err := f.resolveFresh(ctx, "/dst/keep"); err != nil || keep.Ino != y.Ino {
		t.Fatalf("/dst/keep after the rename: %+v %v, want inode %d", keep.Dentry, err, y.Ino)
	}

	// A directory moves its link from one parent to the other, and its
	// subtree with it.
	_, err = f.Create(ctx, "/src/sub/inner", file(0o644))
	must(t, "create /src/sub/inner", err)
	must(t, "rename /src/sub /dst/sub", f.Rename(ctx, "/src/sub", "/dst/sub", false))
	if a, b := nlink(t, f, "/src"), nlink(t, f, "/dst"); a != 2 || b != 4 {
		t.Fatalf("after moving a directory: /src has %d links (want 2), /dst %d (want 4)", a, b)
	}
	if got, want := names(t, f, "/dst/sub"), []string{"inner"}; !slices.Equal(got, want) {
		t.Fatalf("/dst/sub lists %q, want %q", got, want)
	}
	if _, err := f.resolveFresh(ctx, "/src/sub/inner"); errnoOf(f, err) != syscall.ENOENT {
		t.Fatalf("/src/sub/inner after the move: %v, want ENOENT", err)
	}
}

// TestConcurrentCreates: creators of one name race, and exactly one wins;
// the others get EEXIST and leave nothing behind.
func TestConcurrentCreates(t *testing.T) {
	f := newFS(t, "tree")
	ctx := ctxT(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { _, errs[i] = f.Create(ctx, "/race", file(0o644)) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errnoOf(f, err) != syscall.EEXIST:
			t.Fatalf("a losing create: %v, want EEXIST", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d creates of one name succeeded, want 1", won)
	}
	if got := names(t, f, "/"); !slices.Equal(got, []string{"race"}) {
		t.Fatalf("/ lists %q, want [race]", got)
	}
}

// TestReadOnlyOps: a read-only filesystem refuses every change with EROFS
// and writes nothing; making a name that is taken is EEXIST, as Linux
// checks the name before the mount's write access.
func TestReadOnlyOps(t *testing.T) {
	f := newFS(t, "tree")
	ctx := ctxT(t)
	_, err := f.Create(ctx, "/a", file(0o644))
	must(t, "create /a", err)
	_, err = f.Create(ctx, "/d", dir(0o755))
	must(t, "mkdir /d", err)
	f.opts.ReadOnly = true
	_, err = f.Create(ctx, "/b", file(0o644))
	wantErrno(t, f, "create", err, syscall.EROFS)
	_, err = f.Create(ctx, "/a", file(0o644))
	wantErrno(t, f, "create of a taken name", err, syscall.EEXIST)
	_, err = f.Create(ctx, "/d", dir(0o755))
	wantErrno(t, f, "mkdir of a taken name", err, syscall.EEXIST)
	_, err = f.Link(ctx, "/a", "/c")
	wantErrno(t, f, "link", err, syscall.EROFS)
	_, err = f.Link(ctx, "/a", "/d")
	wantErrno(t, f, "link onto a taken name", err, syscall.EEXIST)
	_, err = f.Link(ctx, "/d", "/a")
	wantErrno(t, f, "link of a directory onto a taken name", err, syscall.EEXIST)
	_, err = f.Link(ctx, "/d", "/c")
	wantErrno(t, f, "link of a directory", err, syscall.EROFS)
	_, err = f.Link(ctx, "/nope", "/a")
	wantErrno(t, f, "link of a missing name", err, syscall.ENOENT)
	wantErrno(t, f, "unlink", f.Unlink(ctx, "/a"), syscall.EROFS)
	wantErrno(t, f, "rename", f.Rename(ctx, "/a", "/e", false), syscall.EROFS)
	if got := names(t, f, "/"); !slices.Equal(got, []string{"a", "d"}) {
		t.Fatalf("/ lists %q, want [a d]", got)
	}
}
