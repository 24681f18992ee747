package test

// esfs import and export, and what admin commands (export, search, fsck,
// status) see: every write that completed before they started, a failure
// instead of fewer files when the index disagrees with itself, and a
// rename being recovered while export reads.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
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
		r := mounttest.Run(t, mounttest.Cmd{Args: append([]string{args[0], "--es-url", f.URL, "--index", f.Index}, args[1:]...), Env: []string{"ELASTICSEARCH_URL="}, Limit: 5 * time.Minute})
		return r.Out, r.Code
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

	// The same small files imported and copied through the mount (whose
	// write delegations make cp -a about as fast: no timed assertion here,
	// the bench measures both) make the same tree.
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
	if out, err := exec.Command("diff", "-r", m.Path("in", "many-imported"), m.Path("in", "many-copied")).CombinedOutput(); err != nil {
		t.Errorf("imported and copied trees differ: %s", out)
	}

	// A failed import leaves nothing visible, and can simply be redone.
	proxy := mounttest.NewFaultProxy(t, f.URL)
	proxy.Add(&mounttest.Fault{Match: mounttest.BulkTo("-data"), Nth: 1, Reset: true})
	r := mounttest.Run(t, mounttest.Cmd{Bin: f.Bin, Args: []string{"import", "--es-url", proxy.URL, "--index", f.Index, "--es-timeout", "5s", src, "/in/failed"}})
	if r.Err == nil || !strings.Contains(r.Out, "nothing is visible at /in/failed") {
		t.Errorf("import through a failing connection: %v\n%s", r.Err, r.Out)
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
	mounttest.WaitFor(t, "the re-imported tree on the mount", 5*time.Second, func() bool {
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

// TestImportExportHugeSparseFile: esfs import of a local 1 TiB sparse file
// reads only its data (SEEK_DATA) and stores only its data chunks; esfs
// export lists the stored chunks instead of reading a billion holes and
// writes a sparse copy.
func TestImportExportHugeSparseFile(t *testing.T) {
	f := mounttest.NewFS(t)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 1 << 40
	offsets := []int64{3, 1 << 30, size - 5}
	fh, err := os.Create(filepath.Join(src, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(size); err != nil {
		t.Skipf("the local filesystem takes no 1 TiB sparse file: %v", err)
	}
	for _, off := range offsets {
		if _, err := fh.WriteAt([]byte("data"), off); err != nil {
			t.Fatal(err)
		}
	}
	fh.Close()
	run := func(args ...string) {
		t.Helper()
		r := mounttest.Run(t, mounttest.Cmd{Bin: f.Bin, Args: append([]string{args[0], "--es-url", f.URL, "--index", f.Index, "--quiet"}, args[1:]...), Limit: 2 * time.Minute})
		if r.Err != nil {
			t.Fatalf("esfs %s: %v after %s\n%s", strings.Join(args, " "), r.Err, r.Took.Round(time.Millisecond), r.Out)
		}
		t.Logf("REPORT %s: esfs %s of a 1 TiB sparse file: %s", t.Name(), args[0], r.Took.Round(time.Millisecond))
	}
	run("import", src, "/in")
	m := f.Mount(t)
	ino := mounttest.Ino(t, m.Path("in", "sparse"))
	if got := mounttest.StoredChunks(t, f, ino); len(got) != len(offsets) {
		t.Errorf("import stored chunks %v for data at %v", got, offsets)
	}
	out := filepath.Join(t.TempDir(), "out")
	run("export", "/in", out)
	g, err := os.Open(filepath.Join(out, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(g.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != size || st.Blocks*512 > 64<<20 {
		t.Errorf("exported copy: size %d, %d blocks; want %d bytes, sparse", st.Size, st.Blocks, int64(size))
	}
	for _, off := range offsets {
		buf := make([]byte, 4)
		if _, err := g.ReadAt(buf, off); err != nil || string(buf) != "data" {
			t.Errorf("exported copy at %d: %q, %v", off, buf, err)
		}
	}
}

// The admin commands read the indices directly, bypassing every mount:
// export, search, fsck and status must see every write that completed
// before they started, and export must fail rather than copy fewer files
// when the listing and the documents disagree.

// slowRefresh sets the filesystem's refresh interval to a minute, as a
// busy cluster might: nothing written is visible to search until someone
// refreshes, so a command that forgets to fails every time, not one time
// in a few.
func slowRefresh(t *testing.T, f *mounttest.FS) {
	t.Helper()
	mounttest.ESRequest(t, f.URL, "PUT", "/"+f.Index+","+f.Index+"-*/_settings", `{"index":{"refresh_interval":"60s"}}`)
}

// smallTree is a local tree with one of everything export keeps.
func smallTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Sh(t, src, `
mkdir -p a/b/c empty
printf 'hello\n' > a/hello.txt
printf 'deep\n' > a/b/c/deep.txt
ln a/hello.txt a/b/hard-link
ln -s ../hello.txt a/b/rel-link
for i in 1 2 3 4 5; do printf 'file %d\n' $i > a/f$i; done
touch -d '2010-01-01 00:00:00' a/b/c a/b a empty
`)
	return src
}

// TestAdminCommandsSeeCompletedWrites: export right after import exports the
// whole tree; a file closed on a mount a moment before an export, a search
// or an fsck is in what they show; status shows a mount that just started.
// The refresh interval is a minute, so each of them sees those writes only
// if it refreshes (or reads in real time) before it looks.
func TestAdminCommandsSeeCompletedWrites(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	slowRefresh(t, f)
	m := f.Mount(t)

	src := smallTree(t)
	if out, code := mounttest.RunOn(t, f, "", "import", src, "/imported"); code != 0 {
		t.Fatalf("import: %d\n%s", code, out)
	}
	dst := filepath.Join(t.TempDir(), "exported")
	out, code := mounttest.RunOn(t, f, "", "export", "/imported", dst)
	if code != 0 {
		t.Fatalf("export right after import: status %d\n%s", code, out)
	}
	sameTree(t, src, dst, false)

	// Written and closed through the mount, then exported at once.
	mounttest.Sh(t, m.Dir, `mkdir -p w/sub && printf 'zebra crossing\n' > w/sub/fresh.txt && printf 'old\n' > w/gone.txt`)
	mounttest.Sh(t, m.Dir, `rm w/gone.txt && printf 'quagga\n' > w/second.txt`)
	dst2 := filepath.Join(t.TempDir(), "w")
	out, code = mounttest.RunOn(t, f, "", "export", "/w", dst2)
	if code != 0 || strings.Contains(out, "removed during the export") {
		t.Fatalf("export right after writes: status %d\n%s", code, out)
	}
	if got := mounttest.Sh(t, dst2, `find . | sort && cat sub/fresh.txt second.txt`); got != ".\n./second.txt\n./sub\n./sub/fresh.txt\nzebra crossing\nquagga\n" {
		t.Errorf("exported right after the writes:\n%s", got)
	}

	// Search, by contents and by name, right after a write.
	mounttest.Sh(t, m.Dir, `printf 'okapi giraffe\n' > w/sub/just-written.txt`)
	if out, code := mounttest.RunOn(t, f, "", "search", "okapi"); code != 0 || out != "/w/sub/just-written.txt\n" {
		t.Errorf("search right after a write: status %d, %q", code, out)
	}
	mounttest.Sh(t, m.Dir, `mv w/sub/just-written.txt w/renamed.txt`)
	if out, code := mounttest.RunOn(t, f, "", "search", "--name", "renamed.*"); code != 0 || out != "/w/renamed.txt\n" {
		t.Errorf("search --name right after a rename: status %d, %q", code, out)
	}

	// fsck counts what was just made, and sees damage made a moment ago.
	paths := func() int {
		t.Helper()
		out, code := mounttest.RunOn(t, f, "", "fsck", "--no-wait")
		if code != 0 && code != 4 {
			t.Fatalf("fsck: status %d\n%s", code, out)
		}
		n, err := strconv.Atoi(strings.Fields(out)[0])
		if err != nil {
			t.Fatalf("fsck output: %q", out)
		}
		return n
	}
	before := paths()
	mounttest.Sh(t, m.Dir, `mkdir w/x && touch w/x/1 w/x/2`)
	if after := paths(); after != before+3 {
		t.Errorf("fsck right after mkdir and two creates counts %d paths, want %d", after, before+3)
	}
	writeOrphanPath(t, f, "/w/nowhere/orphan")
	// Its directory is reported missing (a repair makes it again, keeping
	// the file): the file's inode is named, not unreachable.
	if out, code := mounttest.RunOn(t, f, "", "fsck", "--no-wait"); code != 4 || !strings.Contains(out, "missing directory: /w/nowhere") || strings.Contains(out, "unreachable") {
		t.Errorf("fsck right after an orphan path was written: status %d\n%s", code, out)
	}

	// status lists a mount that has just started.
	m2 := f.Mount(t)
	if out, code := mounttest.RunOn(t, f, "", "status", "--observe", "10ms"); code != 0 || !strings.Contains(out, m2.Dir) {
		t.Errorf("status right after a mount: status %d\n%s", code, out)
	}
	if _, err := os.Stat(m.Path("w")); err != nil {
		t.Errorf("the mount died: %v", err)
	}
}

// writeOrphanPath writes, straight into the index, a file whose path
// names a directory that does not exist (with its inode, so that only the
// parent is missing).
func writeOrphanPath(t *testing.T, f *mounttest.FS, path string) {
	t.Helper()
	ctx := context.Background()
	a := store.Inode{Ino: store.NewIno(), Type: store.TypeFile, Mode: 0o644, Nlink: 1}
	if _, err := f.Store.Write(ctx, store.CreateInode(a)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Store.Write(ctx, store.CreateDentry(store.Dentry{Path: path, Ino: a.Ino, Type: store.TypeFile})); err != nil {
		t.Fatal(err)
	}
}

// TestExportFailsOnInconsistentIndex: export copies what it can, names
// every entry it could not, and exits non-zero when the listing and the
// documents disagree: a path whose directory does not exist, a path whose
// inode does not exist, an unreadable path document, SRC that a direct
// read finds but the listing lacks, and a listing page that fails.
func TestExportFailsOnInconsistentIndex(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `mkdir -p t/a t/b/c && echo 1 > t/a/f1 && echo 2 > t/b/f2 && echo 3 > t/b/c/f3 && echo ok > t/ok`)
	export := func(url, src string) (string, int, string) {
		t.Helper()
		dst := filepath.Join(t.TempDir(), "out")
		out, code := mounttest.RunOn(t, f, url, "export", src, dst)
		return out, code, dst
	}
	if out, code, _ := export("", "/t"); code != 0 {
		t.Fatalf("export of a consistent tree: status %d\n%s", code, out)
	}

	// A path whose directory is missing: the rest is copied, it is named.
	writeOrphanPath(t, f, "/t/ghost/child")
	out, code, dst := export("", "/t")
	if code != 1 || !strings.Contains(out, "/t/ghost/child: not copied: its directory /t/ghost is not in the listing") ||
		!strings.Contains(out, "1 entries of /t were not copied") {
		t.Errorf("export with an orphan path: status %d\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "b", "c", "f3")); err != nil || string(b) != "3\n" {
		t.Errorf("the consistent part was not copied: %q %v", b, err)
	}
	removeDoc(t, f, f.Index, store.DocID("/t/ghost/child"))

	// A path whose inode is gone (while the path still names it), with the
	// directory below it: both left out, the path named.
	var st unix.Stat_t
	if err := unix.Stat(m.Path("t", "b"), &st); err != nil {
		t.Fatal(err)
	}
	removeDoc(t, f, f.Index+"-inodes", strconv.FormatUint(st.Ino, 10))
	out, code, dst = export("", "/t")
	if code != 1 || !strings.Contains(out, fmt.Sprintf("/t/b: not copied: its inode %d does not exist", st.Ino)) ||
		!strings.Contains(out, "4 entries of /t were not copied") {
		t.Errorf("export with a missing inode: status %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dst, "a", "f1")); err != nil {
		t.Errorf("the consistent part was not copied: %v", err)
	}

	// An unreadable path document.
	mounttest.Sh(t, m.Dir, `mkdir u && echo x > u/x`)
	mounttest.ESRequest(t, f.URL, "PUT", "/"+f.Index+"/_doc/not-a-path-id", `{"path":"/u/y","parent":"/u","name":"y","ino":12345,"type":"bogus"}`)
	out, code, _ = export("", "/u")
	if code != 1 || !strings.Contains(out, "an unreadable path document, not copied") || !strings.Contains(out, "/u/y") {
		t.Errorf("export with a damaged path document: status %d\n%s", code, out)
	}
	removeDoc(t, f, f.Index, "not-a-path-id")

	// A subdirectory whose path document is lost: the directory's link
	// count still counts it, so the listing is known to lack something.
	mounttest.Sh(t, m.Dir, `mkdir -p w/s1 w/s2 && echo x > w/s1/x`)
	if out, code, _ := export("", "/w"); code != 0 {
		t.Fatalf("export of a consistent /w: status %d\n%s", code, out)
	}
	removeDoc(t, f, f.Index, store.DocID("/w/s2"))
	out, code, dst = export("", "/w")
	if code != 1 || !strings.Contains(out, "/w: directory with 4 links, but its listing shows 1 subdirectories") {
		t.Errorf("export with a subdirectory missing from the listing: status %d\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "s1", "x")); err != nil || string(b) != "x\n" {
		t.Errorf("the consistent part was not copied: %q %v", b, err)
	}

	// SRC exists, but the listing lacks it: here a refresh that does not
	// happen, with a refresh interval of a minute.
	slowRefresh(t, f)
	src := smallTree(t)
	if out, code := mounttest.RunOn(t, f, "", "import", src, "/v"); code != 0 {
		t.Fatalf("import: %d\n%s", code, out)
	}
	noRefreshProxy := mounttest.NewFaultProxy(t, f.URL)
	noRefreshProxy.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/_refresh") {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"_shards":{"total":1,"successful":1,"failed":0}}`))
			return true
		}
		return false
	})
	out, code, _ = export(noRefreshProxy.URL, "/v")
	if code != 1 || !strings.Contains(out, "/v exists (read directly) but the listing of the index does not show it") {
		t.Errorf("export of a SRC missing from the listing: status %d\n%s", code, out)
	}

	// A listing page that fails: the export fails, naming SRC.
	proxy := mounttest.NewFaultProxy(t, f.URL)
	proxy.Add(&mounttest.Fault{Match: func(method, path string, body []byte) bool {
		return path == "/_search" && bytes.Contains(body, []byte(`"sort":[{"path"`))
	}, Reset: true})
	out, code, _ = export(proxy.URL, "/t/a")
	if code != 1 || !strings.Contains(out, "listing /t/a failed") {
		t.Errorf("export with a failing listing page: status %d\n%s", code, out)
	}

	if _, err := os.Stat(m.Path("t", "ok")); err != nil {
		t.Errorf("the mount died: %v", err)
	}
}

// removeDoc deletes one document straight from an index, bypassing esfs.
func removeDoc(t *testing.T, f *mounttest.FS, index, id string) {
	t.Helper()
	mounttest.ESRequest(t, f.URL, "DELETE", "/"+url.PathEscape(index)+"/_doc/"+url.PathEscape(id)+"?refresh=true", "")
}

// TestExportDuringRenameRecovery: a directory rename of a mount that died
// after its commit point is finished by another mount while an export
// reads the tree. The export's snapshot was taken before the finish, so
// its documents carry the rename's intents; judged against the record
// once the rename is done, the old names are hidden (committed) and the
// staged new ones too (their intent outlived the rename). Export must copy
// the directory whole, under one name or the other, never drop it.
func TestExportDuringRenameRecovery(t *testing.T) {
	f := mounttest.NewFS(t)
	dying := f.MountAt(t, t.TempDir(), []string{"ESFS_CRASH_POINT=rename-after-commit"}, "--lease", "2s", "--write-delegations=false") // a journaled rename
	mounttest.Sh(t, dying.Dir, `mkdir -p r/src && for i in $(seq 20); do echo $i > r/src/f$i; done && echo keep > r/keep`)
	_ = exec.Command("mv", dying.Path("r", "src"), dying.Path("r", "dst")).Run() // the mount dies at its commit point
	if err, ok := dying.WaitExit(60 * time.Second); !ok {
		t.Fatal("the mount did not die at its crash point")
	} else {
		t.Logf("mount at its crash point: %v", err)
	}
	ops, err := f.Store.SearchOps(context.Background(), store.OpCommitted)
	if err != nil || len(ops) != 1 {
		t.Fatalf("committed renames: %v %v", ops, err)
	}
	op := ops[0].ID

	// The export's first search over its snapshot is held until the rename
	// has been finished by another mount.
	dst := filepath.Join(t.TempDir(), "out")
	export := mounttest.StartHeld(t, f, "listing", func(r *http.Request, body []byte) bool {
		return r.URL.Path == "/_search" && bytes.Contains(body, []byte(`"pit"`))
	}, "export", "/r", dst)
	recoverer := f.Mount(t, "--lease", "2s")
	mounttest.WaitFor(t, "the dead mount's rename finished by another mount", 60*time.Second, func() bool {
		rec, err := f.Store.GetOp(context.Background(), op)
		return err == nil && rec.State == store.OpDone
	})
	out, err := export.Finish()
	if err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	t.Logf("export: %s", strings.TrimSpace(out))
	got := mounttest.Sh(t, dst, `find . -type f | sort | xargs cat | sort -n | tr '\n' ' '`)
	want := "keep "
	for i := 1; i <= 20; i++ {
		want += strconv.Itoa(i) + " "
	}
	if got != want {
		t.Errorf("exported contents %q, want %q", got, want)
	}
	if names := mounttest.Sh(t, dst, `ls`); names != "dst\nkeep\n" && names != "keep\nsrc\n" {
		t.Errorf("exported names %q, want the renamed directory under one name", names)
	}
	if _, err := os.Stat(recoverer.Path("r", "dst", "f20")); err != nil {
		t.Errorf("after recovery: %v", err)
	}
}
