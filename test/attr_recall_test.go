package test

// A change of a file's attributes through an open descriptor (the size and
// mtime a write sets at fsync or close, fchmod, fchown, ftruncate,
// fsetxattr) recalls the read delegations of the directory that holds the
// file now, as the store says, whatever this mount remembers of where the
// file was when it opened it: log rotation (`mv app.log app.log.1` while
// the writer keeps appending), a rename by another mount, a link made
// elsewhere and the old name removed.

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// readHeldBy reports whether mount m holds a read delegation on directory
// ino, as the lock index says.
func readHeldBy(t *testing.T, f *mounttest.FS, m *mounttest.Mount, ino uint64) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	docs, err := f.Store.GetLocks(ctx, []string{store.DelegLockID(ino)})
	if err != nil {
		t.Fatal(err)
	}
	sess := mounttest.Session(t, f, m).ID
	for _, h := range docs[0].Holders {
		if h.Session == sess && h.Mode == store.ReadDeleg {
			return true
		}
	}
	return false
}

// TestAttrRecallFollowsTheFile: writer A keeps a file open while it is
// moved away from where A found it; an observer C, which holds a read
// delegation on the file's new directory and keeps its answers for an hour
// (the kernel's and its own), sees every change A then makes through its
// descriptor as soon as A's call returns: the appended bytes and size
// after fsync and after close, the mode, the owner, a truncation, an
// xattr. The file is moved by A itself or by another mount B, within its
// directory (log rotation) or to another one, or linked into another
// directory and unlinked where it was.
func TestAttrRecallFollowsTheFile(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	b, _ := delegMount(t, f)
	c, _ := delegMount(t, f)
	cases := []struct {
		name string
		// move moves logs/app.log (with the mount given) to dst, relative
		// to the case's directory.
		mover *mounttest.Mount
		dst   string
		link  bool // ln + rm instead of mv
	}{
		{"writer renames within the directory", a, "logs/app.log.1", false},
		{"another mount renames within the directory", b, "logs/app.log.1", false},
		{"writer renames to another directory", a, "archive/app.log.1", false},
		{"another mount renames to another directory", b, "archive/app.log.1", false},
		{"writer links elsewhere and unlinks", a, "archive/app.log.1", true},
		{"another mount links elsewhere and unlinks", b, "archive/app.log.1", true},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top := filepath.Join("case", string(rune('a'+i)))
			if err := os.MkdirAll(a.Path(top, "logs"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(a.Path(top, "archive"), 0o755); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(a.Path(top, "logs", "app.log"), unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if fd >= 0 {
					unix.Close(fd)
				}
			}()
			content := []byte("hello\n")
			if _, err := unix.Write(fd, content); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fsync(fd); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(top, tc.dst)
			dstDir := mounttest.Ino(t, c.Path(filepath.Dir(dst)))

			// C holds a read delegation on the directory the file goes to,
			// and knows what it holds there.
			settle := func(what string, name string) {
				t.Helper()
				mounttest.WaitFor(t, "C's read delegation on "+filepath.Dir(name)+" "+what, 30*time.Second, func() bool {
					names(t, c.Path(filepath.Dir(name)))
					_, _ = os.Stat(c.Path(name))
					return readHeldBy(t, f, c, dstDir)
				})
				_, _ = os.Stat(c.Path(name)) // learnt under the delegation
			}
			if filepath.Dir(dst) == filepath.Join(top, "logs") {
				settle("before the move", filepath.Join(top, "logs", "app.log"))
				if fi, err := os.Stat(c.Path(top, "logs", "app.log")); err != nil || fi.Size() != 6 {
					t.Fatalf("C: %v, %v before the move", fi, err)
				}
			}
			if tc.link {
				if err := os.Link(tc.mover.Path(top, "logs", "app.log"), tc.mover.Path(dst)); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(tc.mover.Path(top, "logs", "app.log")); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Rename(tc.mover.Path(top, "logs", "app.log"), tc.mover.Path(dst)); err != nil {
				t.Fatal(err)
			}

			check := func(what string, ok func(fi os.FileInfo, st *syscall.Stat_t) bool) {
				t.Helper()
				fi, err := os.Stat(c.Path(dst))
				if err != nil {
					t.Fatalf("C after %s: %v", what, err)
				}
				if st := fi.Sys().(*syscall.Stat_t); !ok(fi, st) {
					time.Sleep(2 * time.Second)
					later, _ := os.Stat(c.Path(dst))
					t.Errorf("C sees size %d, mode %v, uid %d right after A's %s (2s later: %d, %v, %d)",
						fi.Size(), fi.Mode(), st.Uid, what, later.Size(), later.Mode(), later.Sys().(*syscall.Stat_t).Uid)
				}
			}
			readBack := func(what string) {
				t.Helper()
				if got, err := os.ReadFile(c.Path(dst)); err != nil || string(got) != string(content) {
					t.Errorf("C reads %q, %v right after A's %s, want %q", got, err, what, content)
				}
			}

			settle("after the move", dst)
			check("move", func(fi os.FileInfo, _ *syscall.Stat_t) bool { return fi.Size() == 6 })
			more := []byte("world\n")
			if _, err := unix.Write(fd, more); err != nil {
				t.Fatal(err)
			}
			if err := unix.Fsync(fd); err != nil {
				t.Fatal(err)
			}
			content = append(content, more...)
			check("append and fsync", func(fi os.FileInfo, _ *syscall.Stat_t) bool { return fi.Size() == int64(len(content)) })
			readBack("append and fsync")

			settle("before fchmod", dst)
			if err := unix.Fchmod(fd, 0o600); err != nil {
				t.Fatal(err)
			}
			check("fchmod", func(fi os.FileInfo, _ *syscall.Stat_t) bool { return fi.Mode().Perm() == 0o600 })

			settle("before fchown", dst)
			if err := unix.Fchown(fd, 4321, 4321); err != nil {
				t.Fatal(err)
			}
			check("fchown", func(_ os.FileInfo, st *syscall.Stat_t) bool { return st.Uid == 4321 && st.Gid == 4321 })

			settle("before ftruncate", dst)
			if err := unix.Ftruncate(fd, 3); err != nil {
				t.Fatal(err)
			}
			content = content[:3]
			check("ftruncate", func(fi os.FileInfo, _ *syscall.Stat_t) bool { return fi.Size() == 3 })
			readBack("ftruncate")

			settle("before fsetxattr", dst)
			if _, err := unix.Getxattr(c.Path(dst), "user.rotated", make([]byte, 64)); err == nil {
				t.Fatal("user.rotated is there before it was set")
			}
			if err := unix.Fsetxattr(fd, "user.rotated", []byte("yes"), 0); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			if n, err := unix.Getxattr(c.Path(dst), "user.rotated", buf); err != nil || string(buf[:n]) != "yes" {
				t.Errorf("C reads user.rotated = %q, %v right after A's fsetxattr", buf[:max(n, 0)], err)
			}

			settle("before the last write", dst)
			last := []byte("bye\n")
			if _, err := unix.Write(fd, last); err != nil {
				t.Fatal(err)
			}
			err = unix.Close(fd)
			fd = -1
			if err != nil {
				t.Fatal(err)
			}
			content = append(content, last...)
			// The kernel sends the flush of close before close returns.
			check("write and close", func(fi os.FileInfo, _ *syscall.Stat_t) bool { return fi.Size() == int64(len(content)) })
			readBack("write and close")
		})
	}
	mounttest.FsckClean(t, f)
}

// TestAttrRecallAfterOwnRename: mount B keeps a file's attributes under
// its delegation on the file's directory (it looked the file up there and
// holds it open), and moves the file into another directory it holds;
// mount A then changes the file's mode and owner. A's change recalls the
// directories the stored inode names, the new one now, not the one B's
// kernel was told the attributes under: B's kernel must not keep them
// past the move. What the kernel's permission check, ls -l or fstat with
// no ctime asked (statx of mode and owner: the rename marked only the
// ctime stale) was answered from before A's change for the rest of B's
// lease. Moved within its directory (whose delegation the change
// recalls) the file is the control.
func TestAttrRecallAfterOwnRename(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	b := f.Mount(t)
	for i, tc := range []struct{ name, dst string }{
		{"within the directory", "src/moved"},
		{"into another directory", "dst/moved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			top := filepath.Join("case", strconv.Itoa(i))
			for _, d := range []string{"src", "dst"} {
				if err := os.MkdirAll(a.Path(top, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(a.Path(top, "src", "f"), []byte("f\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, d := range []string{"src", "dst"} {
				ino := mounttest.Ino(t, b.Path(top, d))
				mounttest.WaitFor(t, "B's read delegation on "+d, 30*time.Second, func() bool {
					names(t, b.Path(top, d))
					return readHeldBy(t, f, b, ino)
				})
			}
			// Looked up and opened under src's delegation: B's kernel keeps
			// the attributes, and holds the file through the descriptor.
			fd, err := unix.Open(b.Path(top, "src", "f"), unix.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			if err := os.Rename(b.Path(top, "src", "f"), b.Path(top, tc.dst)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(a.Path(top, tc.dst), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(a.Path(top, tc.dst), 4321, 4321); err != nil {
				t.Fatal(err)
			}
			var st unix.Statx_t
			if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_MODE|unix.STATX_UID|unix.STATX_GID, &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o7777 != 0o600 || st.Uid != 4321 || st.Gid != 4321 {
				t.Errorf("B's statx of mode and owner through its descriptor right after A's chmod and chown: %o %d:%d, want 600 4321:4321", st.Mode&0o7777, st.Uid, st.Gid)
			}
		})
	}
}

// TestAttrRecallOfInodesWithoutDirectories: an inode as an older esfs
// wrote it records no directory for its links. No mount then keeps its
// attributes under a delegation (a change recalls nobody, and another
// mount still sees it at once); esfs fsck reports it and --repair records
// the directory, after which the attributes are delegated again and a
// change recalls the mount that holds them.
func TestAttrRecallOfInodesWithoutDirectories(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	c, _ := delegMount(t, f)
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.Path("d", "f"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.Sync(t)
	ctx := context.Background()
	ino := mounttest.Ino(t, a.Path("d", "f"))
	n, err := f.Store.GetInode(ctx, ino)
	if err != nil || len(n.Parents) != 1 {
		t.Fatalf("inode of d/f: %+v, %v; want one directory recorded", n, err)
	}
	n.Parents = nil
	if _, err := f.Store.Write(ctx, store.PutInode(n, n.Ver)); err != nil {
		t.Fatal(err)
	}
	dir := mounttest.Ino(t, c.Path("d"))
	mode := os.FileMode(0o600)
	step := func(what string) {
		t.Helper()
		mounttest.WaitFor(t, "C's read delegation on d "+what, 30*time.Second, func() bool {
			names(t, c.Path("d"))
			_, _ = os.Stat(c.Path("d", "f"))
			return readHeldBy(t, f, c, dir)
		})
		_, _ = os.Stat(c.Path("d", "f"))
		if err := os.Chmod(a.Path("d", "f"), mode); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(c.Path("d", "f")); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: C sees %v, %v right after A's chmod to %v", what, fi.Mode(), err, mode)
		}
		mode ^= 0o040
	}
	step("with no directory recorded")

	out, err := f.Run("fsck", "--no-wait")
	if exitCode(err) != 4 || !strings.Contains(out, "stored directories: inode "+strconv.FormatUint(ino, 10)+": none recorded") {
		t.Fatalf("fsck: exit %d, want 4 naming inode %d:\n%s", exitCode(err), ino, out)
	}
	if out, err := f.Run("fsck", "--no-wait", "--repair"); exitCode(err) != 1 || strings.Count(out, "(repaired)") != 1 {
		t.Fatalf("fsck --repair: exit %d, want 1 with one repair:\n%s", exitCode(err), out)
	}
	if n, err := f.Store.GetInode(ctx, ino); err != nil || !slices.Equal(n.Parents, []uint64{dir}) {
		t.Fatalf("after fsck --repair: %+v, %v; want directory %d recorded", n, err, dir)
	}
	step("recorded by fsck --repair")
	mounttest.FsckClean(t, f)
}

// TestUncoveredAnswersAreNotKept: what no delegation covers (here the
// attributes of a file with two links) B's kernel must not keep at all:
// a stat right after A's chmod shows it, whether B's kernel last learnt
// the file from a stat, a lookup or a listing (READDIRPLUS), however
// little time passed since. (The kernel rounds any timeout up to a jiffy,
// so "keep it for 1 ns" kept stale answers for 1-4 ms.)
func TestUncoveredAnswersAreNotKept(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := delegMount(t, f)
	b, _ := delegMount(t, f)
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(a.Path("d", "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(a.Path("d", "f"), a.Path("d", "g")); err != nil {
		t.Fatal(err)
	}
	a.Sync(t)
	mode := os.FileMode(0o600)
	stale := map[string]int{}
	for round := 0; round < 60; round++ {
		for _, how := range []string{"stat", "lookup", "listing"} {
			switch how {
			case "stat":
				_, _ = os.Stat(b.Path("d", "f"))
			case "lookup":
				_, _ = os.Stat(b.Path("d", "g")) // the inode, through its other name
			case "listing":
				names(t, b.Path("d"))
			}
			if err := os.Chmod(a.Path("d", "f"), mode); err != nil {
				t.Fatal(err)
			}
			fi, err := os.Lstat(b.Path("d", "f"))
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != mode {
				stale[how]++
			}
			mode ^= 0o040
		}
	}
	if len(stale) > 0 {
		t.Errorf("B's stat right after A's chmod showed the mode before it, after B's kernel last learnt the file by (of 60 each): %v", stale)
	}
}
