package test

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// makeTree builds a local tree with everything import and export must keep.
// It returns whether the local filesystem took extended attributes.
func makeTree(t *testing.T, root string) (xattrs bool) {
	t.Helper()
	mounttest.Sh(t, root, `
set -e
mkdir -p a/b/c empty 'with space' many
printf 'hello\n' > a/hello.txt
printf 'the quick brown fox\n' > 'with space/ünïcödé.txt'
printf 'raw\n' > "$(printf 'bad\377name')"
: > a/b/empty-file
chmod 0640 a/hello.txt
printf '#!/bin/sh\n' > a/b/run.sh && chmod 4755 a/b/run.sh
chmod 2775 a/b/c
ln a/hello.txt a/b/c/hard-link
ln -s ../hello.txt a/b/rel-link
ln -s /nonexistent/target a/dangling
head -c 2500000 /dev/zero | tr '\000' x > a/text.big
truncate -s 5M a/sparse && printf 'end' | dd of=a/sparse bs=1 seek=4194304 conv=notrunc 2>/dev/null
for i in $(seq 300); do printf 'file %d\n' $i > many/f$i; done
touch -h -d '2001-02-03 04:05:06.123456789' a/hello.txt a/b/rel-link 'with space'
mkdir special
mkfifo -m 0640 special/fifo
ln special/fifo special/fifo-link
python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("special/sock")'
mknod -m 0600 special/null c 1 3
mknod special/disk b 259 70000
chown 1234:5678 special/null
touch -h -d '2002-03-04 05:06:07.5' special/fifo special/sock special/null
`)
	big := make([]byte, 3<<20+12345)
	rand.New(rand.NewSource(1)).Read(big)
	if err := os.WriteFile(filepath.Join(root, "a", "random.bin"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(filepath.Join(root, "a", "hello.txt"), "user.colour", []byte("blue"), 0); err == nil {
		xattrs = true
		_ = unix.Lsetxattr(filepath.Join(root, "a", "b"), "user.empty", nil, 0)
	} else if !errors.Is(err, unix.ENOTSUP) {
		t.Fatal(err)
	}
	// Times last: everything above moved the directories' mtimes.
	mounttest.Sh(t, root, `touch -d '2010-01-01 00:00:00' a/b/c empty special`)
	return xattrs
}

// sameTree compares two trees entry by entry: type, mode, size, mtime to
// the nanosecond, symlink targets, contents, hard links, device numbers,
// extended attributes, and (owners) uid and gid.
func sameTree(t *testing.T, want, got string, xattrs bool) {
	t.Helper()
	// diff calls any two FIFOs or sockets different, and would read
	// devices: the special files are compared by stat below.
	if out, err := exec.Command("diff", "-r", "--no-dereference", "--exclude=special", want, got).CombinedOutput(); err != nil {
		t.Errorf("diff -r %s %s: %v\n%s", want, got, err, out)
	}
	inodes := map[uint64]string{}     // got's inode -> first path, for hard links
	wantInodes := map[uint64]string{} // the same in want
	n := 0
	err := filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		q := filepath.Join(got, rel)
		var a, b unix.Stat_t
		if err := unix.Lstat(p, &a); err != nil {
			return err
		}
		if err := unix.Lstat(q, &b); err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		n++
		if a.Mode != b.Mode || a.Uid != b.Uid || a.Gid != b.Gid || a.Rdev != b.Rdev {
			t.Errorf("%s: mode %o uid %d gid %d rdev %#x, want %o %d %d %#x", rel, b.Mode, b.Uid, b.Gid, b.Rdev, a.Mode, a.Uid, a.Gid, a.Rdev)
		}
		if a.Mode&unix.S_IFMT != unix.S_IFDIR && a.Size != b.Size {
			t.Errorf("%s: size %d, want %d", rel, b.Size, a.Size)
		}
		if a.Mode&unix.S_IFMT == unix.S_IFDIR && a.Nlink != b.Nlink {
			t.Errorf("%s: directory with %d links, want %d", rel, b.Nlink, a.Nlink)
		}
		if a.Mtim != b.Mtim {
			t.Errorf("%s: mtime %v, want %v", rel, time.Unix(b.Mtim.Unix()), time.Unix(a.Mtim.Unix()))
		}
		if a.Mode&unix.S_IFMT != unix.S_IFDIR && a.Nlink > 1 {
			wantInodes[a.Ino] = rel
			if first, ok := inodes[b.Ino]; ok {
				t.Logf("%s is a hard link of %s, as in the source", rel, first)
			} else {
				inodes[b.Ino] = rel
			}
			if b.Nlink != a.Nlink {
				t.Errorf("%s: %d links, want %d", rel, b.Nlink, a.Nlink)
			}
		}
		if xattrs && a.Mode&unix.S_IFMT != unix.S_IFLNK {
			for _, name := range []string{"user.colour", "user.empty"} {
				va, ea := xattr(p, name)
				vb, eb := xattr(q, name)
				if (ea == nil) != (eb == nil) || !bytes.Equal(va, vb) {
					t.Errorf("%s: xattr %s = %q (%v), want %q (%v)", rel, name, vb, eb, va, ea)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(inodes) != len(wantInodes) {
		t.Errorf("hard-linked files map to %d inodes in %s, want %d as in %s: %v", len(inodes), got, len(wantInodes), want, inodes)
	}
	t.Logf("compared %d entries of %s and %s", n, want, got)
}

func xattr(p, name string) ([]byte, error) {
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(p, name, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// TestImportExport: esfs import loads a local tree through _bulk with
// everything cp -a keeps, faster than cp -a through a mount; esfs export
// brings it back identical; a failed import leaves nothing visible; and
// mistakes are one clear line.
func TestImportExport(t *testing.T) {
	f := mounttest.NewFS(t)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	xattrs := makeTree(t, src)
	m := f.Mount(t)
	if err := os.Mkdir(m.Path("in"), 0o755); err != nil {
		t.Fatal(err)
	}
	esfs := func(args ...string) (string, int) {
		t.Helper()
		out, code, _ := runCLI(t, 5*time.Minute, append([]string{args[0], "--es-url", f.URL, "--index", f.Index}, args[1:]...)...)
		return out, code
	}

	start := time.Now()
	out, code := esfs("import", src, "/in/tree")
	importTook := time.Since(start)
	if code != 0 || !strings.Contains(out, "imported") || !strings.Contains(out, " 5 special files") || strings.Contains(out, "skipped") {
		t.Fatalf("import: status %d:\n%s", code, out)
	}
	t.Logf("import: %s", strings.TrimSpace(out))
	sameTree(t, src, m.Path("in", "tree"), xattrs)
	// The imported tree is an ordinary part of the filesystem.
	mounttest.Sh(t, m.Dir, `mv in/tree in/moved && echo more >> in/moved/a/hello.txt && cat in/moved/a/b/c/hard-link | grep -q more && mv in/moved in/tree && printf 'hello\n' > in/tree/a/hello.txt && touch -d '2001-02-03 04:05:06.123456789' in/tree/a/hello.txt`)
	if out, err := f.Run("fsck", "--no-wait"); err != nil {
		t.Errorf("fsck after import: %v\n%s", err, out)
	}

	// Export brings it back: the same tree, times, links and attributes.
	dst := filepath.Join(t.TempDir(), "exported")
	out, code = esfs("export", "/in/tree", dst)
	if code != 0 || !strings.Contains(out, "exported") {
		t.Fatalf("export: status %d:\n%s", code, out)
	}
	sameTree(t, src, dst, xattrs)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dst, "a", "sparse"), &st); err != nil || st.Blocks*512 >= 5<<20 {
		t.Errorf("exported sparse file: %d blocks (%v), want a hole", st.Blocks, err)
	}
	exportAsNobody(t, f, src)

	// Faster than cp -a through the mount, on the same small files.
	start = time.Now()
	out, code = esfs("import", filepath.Join(src, "many"), "/in/many-imported")
	manyImport := time.Since(start)
	if code != 0 {
		t.Fatalf("import many: %s", out)
	}
	start = time.Now()
	if out, err := exec.Command("cp", "-a", filepath.Join(src, "many"), m.Path("in", "many-copied")).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	manyCp := time.Since(start)
	t.Logf("300 small files: esfs import %s, cp -a through the mount %s (%.1fx); whole tree import %s", manyImport, manyCp, manyCp.Seconds()/manyImport.Seconds(), importTook)
	if manyImport >= manyCp {
		t.Errorf("import (%s) was not faster than cp -a through the mount (%s)", manyImport, manyCp)
	}
	if out, err := exec.Command("diff", "-r", m.Path("in", "many-imported"), m.Path("in", "many-copied")).CombinedOutput(); err != nil {
		t.Errorf("imported and copied trees differ: %s", out)
	}

	// A failed import leaves nothing visible, and can simply be redone.
	proxy := mounttest.NewFaultProxy(t, f.URL)
	proxy.Add(&mounttest.Fault{Match: mounttest.BulkTo("-data"), Nth: 1, Reset: true})
	cmd := exec.Command(f.Bin, "import", "--es-url", proxy.URL, "--index", f.Index, "--es-timeout", "5s", src, "/in/failed")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "nothing is visible at /in/failed") {
		t.Errorf("import through a failing connection: %v\n%s", err, out)
	}
	if _, err := os.Lstat(m.Path("in", "failed")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("after a failed import, /in/failed: %v, want ENOENT", err)
	}
	if names := mounttest.Sh(t, m.Dir, `ls in`); strings.Contains(names, "failed") {
		t.Errorf("a failed import is listed: %q", names)
	}
	if out, code := esfs("import", src, "/in/failed"); code != 0 {
		t.Errorf("import again after a failure: %d\n%s", code, out)
	}
	// The mount looked for in/failed a moment ago: its negative entry
	// lasts up to --negative-timeout (1 s), as for any other mount's create.
	waitFor(t, "the re-imported tree on the mount", 5*time.Second, func() bool {
		_, err := os.Lstat(m.Path("in", "failed"))
		return err == nil
	})
	sameTree(t, src, m.Path("in", "failed"), xattrs)
	if out, err := f.Run("fsck", "--no-wait", "--repair"); err != nil && !strings.Contains(out, "repaired") {
		t.Errorf("fsck --repair after a failed import: %v\n%s", err, out)
	}

	// Mistakes: one line each.
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"import", src, "/in/tree"}, 1, "/in/tree exists"},
		{[]string{"import", src, "/nope/x"}, 1, "/nope does not exist"},
		{[]string{"import", src, "relative"}, 2, "path from the filesystem's root"},
		{[]string{"import", filepath.Join(src, "missing"), "/in/x"}, 1, "no such file"},
		{[]string{"import", filepath.Join(src, "a", "hello.txt"), "/in/x"}, 1, "not a directory"},
		{[]string{"import", src}, 2, "LOCALDIR and DEST"},
		{[]string{"export", "/in/tree", dst}, 1, "exists"},
		{[]string{"export", "/in/none", filepath.Join(t.TempDir(), "x")}, 1, "/in/none does not exist"},
	} {
		out, code := esfs(c.args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != c.code || !strings.Contains(out, c.want) || len(lines) != 1 {
			t.Errorf("esfs %q: status %d (want %d), want one line saying %q:\n%s", c.args, code, c.code, c.want, out)
		}
	}
	if _, err := os.Stat(m.Path("in", "x")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("a refused import left /in/x: %v", err)
	}
}

// exportAsNobody: a user other than root gets the FIFOs and sockets but
// cannot make devices; as cp -a, export names each, copies the rest and
// exits 1.
func exportAsNobody(t *testing.T, f *mounttest.FS, src string) {
	t.Helper()
	// Everything nobody uses must be reachable by nobody: the binary too.
	dir, err := os.MkdirTemp("", "esfs-export-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "esfs")
	mounttest.Sh(t, dir, "cp "+f.Bin+" "+bin+" && chmod 0755 "+bin)
	dst := filepath.Join(dir, "out")
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", bin,
		"export", "--es-url", f.URL, "--index", f.Index, "--quiet", "/in/tree", dst)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "2 devices not made") ||
		!strings.Contains(string(out), "special/null: device 1:3 not made") {
		t.Fatalf("export as nobody: %v, want exit 1 naming the 2 devices:\n%s", err, out)
	}
	for name, typ := range map[string]uint32{"fifo": unix.S_IFIFO, "fifo-link": unix.S_IFIFO, "sock": unix.S_IFSOCK} {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dst, "special", name), &st); err != nil || st.Mode&unix.S_IFMT != typ {
			t.Errorf("export as nobody: special/%s: mode %o (%v)", name, st.Mode, err)
		}
	}
	for _, name := range []string{"null", "disk"} {
		if _, err := os.Lstat(filepath.Join(dst, "special", name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("export as nobody: special/%s: %v, want it not made", name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "a", "hello.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("export as nobody: a/hello.txt = %q (%v)", b, err)
	}
}
