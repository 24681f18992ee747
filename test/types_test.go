package test

// File types: modes as asked, FIFOs, sockets and devices, directory link
// counts, all compared with a local filesystem. What a filesystem keeps of
// every type across a remount is in types_remount_test.go.

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// Every file type, directory link counts and
// modes as asked. The reference is not a table of expected answers but a
// local filesystem: each script runs once in a local directory and once in
// a directory of a mount, and both trees must stat alike.

// lsEntry is what stat says about one entry, as compared between trees.
type lsEntry struct {
	Type       uint32 // S_IFMT bits
	Mode       uint32 // permission, setuid, setgid and sticky bits
	Uid, Gid   uint32
	Nlink      uint64
	Rdev       uint64
	Size       int64 // regular files and symlinks only
	Target     string
	HardLinked string // for a file with several links: the first path of its inode
}

func (e lsEntry) String() string {
	s := fmt.Sprintf("%s mode %04o uid %d gid %d nlink %d", typeName(e.Type), e.Mode, e.Uid, e.Gid, e.Nlink)
	if e.Rdev != 0 {
		s += fmt.Sprintf(" rdev %d:%d", unix.Major(e.Rdev), unix.Minor(e.Rdev))
	}
	if e.Type == unix.S_IFREG || e.Type == unix.S_IFLNK {
		s += fmt.Sprintf(" size %d", e.Size)
	}
	if e.Target != "" {
		s += " -> " + e.Target
	}
	if e.HardLinked != "" {
		s += " (same inode as " + e.HardLinked + ")"
	}
	return s
}

func typeName(t uint32) string {
	switch t {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "chardev"
	case unix.S_IFBLK:
		return "blockdev"
	}
	return fmt.Sprintf("type %o", t)
}

// lsTree stats every entry below root (root itself as ".").
func lsTree(t *testing.T, root string) map[string]lsEntry {
	t.Helper()
	out := map[string]lsEntry{}
	inodes := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		e := lsEntry{Type: st.Mode & unix.S_IFMT, Mode: st.Mode &^ unix.S_IFMT, Uid: st.Uid, Gid: st.Gid, Nlink: uint64(st.Nlink), Rdev: st.Rdev}
		if e.Type == unix.S_IFREG || e.Type == unix.S_IFLNK {
			e.Size = st.Size
		}
		if e.Type == unix.S_IFLNK {
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if e.Type != unix.S_IFDIR && st.Nlink > 1 {
			if first, ok := inodes[st.Ino]; ok {
				e.HardLinked = first
			} else {
				inodes[st.Ino] = rel
			}
		}
		// d_type from the listing must agree with stat.
		if rel != "." && d.Type() != fs.FileMode(0) && uint32(fsModeType(d.Type())) != e.Type {
			t.Errorf("%s: readdir says %v, stat says %s", p, d.Type(), typeName(e.Type))
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	return out
}

// fsModeType maps the type bits of an fs.FileMode to S_IFMT bits.
func fsModeType(m fs.FileMode) uint32 {
	switch {
	case m&fs.ModeDir != 0:
		return unix.S_IFDIR
	case m&fs.ModeSymlink != 0:
		return unix.S_IFLNK
	case m&fs.ModeNamedPipe != 0:
		return unix.S_IFIFO
	case m&fs.ModeSocket != 0:
		return unix.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		return unix.S_IFCHR
	case m&fs.ModeDevice != 0:
		return unix.S_IFBLK
	}
	return unix.S_IFREG
}

// diffTrees reports every difference between two lsTree results.
func diffTrees(want, got map[string]lsEntry) []string {
	var names []string
	for n := range want {
		names = append(names, n)
	}
	for n := range got {
		if _, ok := want[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		w, inW := want[n]
		g, inG := got[n]
		switch {
		case !inG:
			out = append(out, fmt.Sprintf("%s: missing (local: %s)", n, w))
		case !inW:
			out = append(out, fmt.Sprintf("%s: not in the local tree (%s)", n, g))
		case w != g:
			out = append(out, fmt.Sprintf("%s: %s\n    local: %s", n, g, w))
		}
	}
	return out
}

// sameAsLocal runs script (bash, in the directory it makes) in a new
// local directory and in a new directory name of the mount, and checks
// that the two trees stat alike. It returns the mount's directory.
func sameAsLocal(t *testing.T, m *mounttest.Mount, name, script string) string {
	t.Helper()
	local := filepath.Join(t.TempDir(), name)
	there := m.Path(name)
	for _, d := range []string{local, there} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		mounttest.Sh(t, d, script)
	}
	want := lsTree(t, local)
	if diffs := diffTrees(want, lsTree(t, there)); len(diffs) > 0 {
		t.Errorf("%s: the mount differs from a local filesystem:\n  %s", name, strings.Join(diffs, "\n  "))
	}
	return there
}

// modesScript creates entries with odd modes under two umasks, with the
// system calls themselves (tools like install and mkdir -m chmod after).
const modesScript = `
python3 - <<'EOF'
import os, stat
def make(umask, suffix):
    os.umask(umask)
    for mode in (0o0000, 0o7777, 0o1000, 0o4711, 0o2070, 0o0777):
        os.close(os.open('f%04o%s' % (mode, suffix), os.O_CREAT | os.O_WRONLY, mode))
        os.mkdir('d%04o%s' % (mode, suffix), mode)
        os.mknod('p%04o%s' % (mode, suffix), stat.S_IFIFO | mode)
        os.mknod('c%04o%s' % (mode, suffix), stat.S_IFCHR | mode, os.makedev(1, 7))
        os.mknod('r%04o%s' % (mode, suffix), stat.S_IFREG | mode)
make(0o000, '')
make(0o027, '-umask027')
os.umask(0)
os.mkdir('sgid', 0o775)
os.chmod('sgid', 0o2775)  # mkdir(2) drops S_ISGID from the mode it is given
os.close(os.open('sgid/f', os.O_CREAT | os.O_WRONLY, 0o2777))
os.mkdir('sgid/d', 0o0700)
os.symlink('target', 'link')
EOF
`

// TestTypesModesAsAsked: open(O_CREAT), mkdir, mknod and
// symlink make exactly the mode asked, less the umask (which the kernel
// applies, once), also 0000 and every special bit, as a local filesystem
// does; a fresh mount reads the same modes back from the index, and root
// works in a directory of mode 0000.
func TestTypesModesAsAsked(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	there := sameAsLocal(t, m, "modes", modesScript)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(there, "f0000"), &st); err != nil || st.Mode&0o7777 != 0 {
		t.Errorf("open(O_CREAT, 0000): mode %04o (%v), want 0000", st.Mode&0o7777, err)
	}
	if err := unix.Stat(filepath.Join(there, "f0777-umask027"), &st); err != nil || st.Mode&0o7777 != 0o750 {
		t.Errorf("open(O_CREAT, 0777) under umask 027: mode %04o (%v), want 0750", st.Mode&0o7777, err)
	}
	// Root (CAP_DAC_OVERRIDE) lists, enters and writes a mode-0000 directory.
	mounttest.Sh(t, filepath.Join(there, "d0000"), `touch inside && ls -la . >/dev/null && cat inside`)

	// What the index holds, through a fresh mount without caches.
	fresh := f.Mount(t, mounttest.NoCache...)
	if diffs := diffTrees(lsTree(t, there), lsTree(t, fresh.Path("modes"))); len(diffs) > 0 {
		t.Errorf("a fresh mount shows other modes:\n  %s", strings.Join(diffs, "\n  "))
	}
	mounttest.Alive(t, m)
}

// specialScript makes every file type and puts the special ones through
// what any entry goes through: chmod, chown, hard links, renames (also
// inside a directory that moves, and over an existing file) and unlink.
const specialScript = `
mkfifo fifo
mkfifo -m 0600 fifo-0600
mknod null c 1 3
mknod disk b 8 1
mknod big c 300 70000
python3 -c '
import os, socket, stat
s = socket.socket(socket.AF_UNIX); s.bind("sock"); s.close()
os.mknod("regular", stat.S_IFREG | 0o640)
os.mknod("fifo-by-mknod", stat.S_IFIFO | 0o604)
'
chmod 0610 fifo
chown 1234:5678 null
chmod 4755 disk
ln fifo fifo-link
ln null null-link
mkdir sub
mkfifo sub/fifo
mknod sub/dev c 4 5
python3 -c 'import socket; s = socket.socket(socket.AF_UNIX); s.bind("sub/sock")'
mv sub moved
mkdir other
mv moved/sock other/sock
echo data > target
mv fifo-0600 target
mkfifo gone && rm gone
mknod gone-dev c 1 5 && rm gone-dev
`

// TestTypesSpecialFiles: FIFOs, UNIX sockets and character
// and block devices are entries like any other (list, stat with their type
// and device number, chmod, chown, link, rename, unlink, as a local
// filesystem shows them); a FIFO pipes and a socket connects on the mount
// (the kernel does that work); devices are not opened (the mount is nodev).
// TestImportExport carries them out of and into the filesystem.
func TestTypesSpecialFiles(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	there := sameAsLocal(t, m, "special", specialScript)

	// A FIFO works as a FIFO on the mount.
	out := mounttest.Sh(t, there, `mkfifo pipe && (echo through the pipe > pipe &) && timeout 60 cat pipe`)
	if out != "through the pipe\n" {
		t.Errorf("through a FIFO on the mount: %q", out)
	}
	// A socket bound on the mount accepts a connection made through it.
	out = mounttest.Sh(t, there, `timeout 60 python3 -c '
import os, socket, threading
srv = socket.socket(socket.AF_UNIX); srv.bind("server.sock"); srv.listen(1)
def serve():
    c, _ = srv.accept(); c.sendall(c.recv(100).upper()); c.close()
threading.Thread(target=serve).start()
cli = socket.socket(socket.AF_UNIX); cli.connect("server.sock"); cli.sendall(b"ping")
print(cli.recv(100).decode())
'`)
	if out != "PING\n" {
		t.Errorf("through a UNIX socket on the mount: %q", out)
	}
	// Devices stat right but do not open: FUSE mounts are nodev.
	if fd, err := unix.Open(filepath.Join(there, "null"), unix.O_RDONLY, 0); err != unix.EACCES {
		unix.Close(fd)
		t.Errorf("opening a character device on the mount: %v, want EACCES (nodev)", err)
	}

	// What the index holds, through a fresh mount without caches.
	fresh := f.Mount(t, mounttest.NoCache...)
	mine := lsTree(t, there)
	if diffs := diffTrees(mine, lsTree(t, fresh.Path("special"))); len(diffs) > 0 {
		t.Errorf("a fresh mount shows the special files otherwise:\n  %s", strings.Join(diffs, "\n  "))
	}
	if out, err := f.Run("fsck", "--no-wait"); err != nil {
		t.Errorf("fsck: %v\n%s", err, out)
	}
	mounttest.Alive(t, m)
	mounttest.Alive(t, fresh)
}

// linksScript changes the subdirectories of directories in every way:
// mkdir, rmdir, renames within and between directories, over empty
// directories, and of files (which change no count).
const linksScript = `
mkdir -p a/b/c d e f g h/i
mkdir a/x a/y
rmdir a/y
mv a/x d/
mv e d/e2
touch file && mv file a/b/
python3 -c '
import os
os.rename("f", "g")          # over an empty directory, same parent
os.rename("a/b/c", "d/x")    # over an empty directory in another parent
os.rename("h/i", "i")        # up
os.rename("d/e2", "h/i")     # down, into the name just freed
'
`

// TestTypesDirLinkCounts: a directory has 2 links plus its
// subdirectories, through mkdir, rmdir and renames as on a local
// filesystem, as another mount sees it, and when mounts make and remove
// subdirectories of one directory at once.
func TestTypesDirLinkCounts(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	there := sameAsLocal(t, m, "links", linksScript)
	mounttest.DirLinksAgree(t, m.Dir)

	// Another mount, without caches, reads the same counts from the index.
	other := f.Mount(t, mounttest.NoCache...)
	if diffs := diffTrees(lsTree(t, there), lsTree(t, other.Path("links"))); len(diffs) > 0 {
		t.Errorf("another mount shows other counts:\n  %s", strings.Join(diffs, "\n  "))
	}
	// With caches: within the README's bound (kernel attribute timeout +
	// daemon cache TTL), the second mount sees a change of the first.
	cached := f.Mount(t)
	var st unix.Stat_t
	if err := unix.Stat(cached.Path("links", "d"), &st); err != nil {
		t.Fatal(err)
	}
	before := st.Nlink
	if err := os.Mkdir(m.Path("links", "d", "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.WaitFor(t, "the count of a mkdir on another mount", 10*time.Second, func() bool {
		return unix.Stat(cached.Path("links", "d"), &st) == nil && st.Nlink == before+1
	})

	// Two mounts make and remove subdirectories of one directory at once:
	// every count is a compare-and-set, and none is lost.
	if err := os.Mkdir(m.Path("busy"), 0o755); err != nil {
		t.Fatal(err)
	}
	storm := `timeout 300 python3 -c '
import os, sys, threading
tag, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def work(k):
    for i in range(n):
        os.mkdir("busy/%s-%d-%d" % (tag, k, i))
        if i % 3 == 0:
            os.rmdir("busy/%s-%d-%d" % (tag, k, i))
        with open("busy/file-%s-%d-%d" % (tag, k, i), "w"): pass
ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
' `
	a := mounttest.Background(func() mounttest.Result { return mounttest.Exec(5*time.Minute, m.Dir, "bash", "-c", storm+"a 8 12") })
	b := mounttest.Background(func() mounttest.Result { return mounttest.Exec(5*time.Minute, other.Dir, "bash", "-c", storm+"b 4 12") })
	for _, r := range []mounttest.Result{mounttest.WaitResult(t, "mount A's mkdirs", a, 6*time.Minute), mounttest.WaitResult(t, "mount B's mkdirs", b, 6*time.Minute)} {
		if r.Err != nil {
			t.Fatalf("mkdir storm: %v\n%s", r.Err, r.Out)
		}
	}
	entries, err := os.ReadDir(other.Path("busy"))
	if err != nil {
		t.Fatal(err)
	}
	subdirs := 0
	for _, e := range entries {
		if e.IsDir() {
			subdirs++
		}
	}
	if want := 2 + (8+4)*8; subdirs != want-2 {
		t.Errorf("busy lists %d subdirectories, want %d", subdirs, want-2)
	}
	if err := unix.Stat(other.Path("busy"), &st); err != nil || int(st.Nlink) != 2+subdirs {
		t.Errorf("busy: %d links (%v) after concurrent mkdir and rmdir on two mounts, want %d", st.Nlink, err, 2+subdirs)
	}
	if out, err := f.Run("fsck", "--no-wait"); err != nil {
		t.Errorf("fsck: %v\n%s", err, out)
	}
	mounttest.Alive(t, m)
	mounttest.Alive(t, other)
}
