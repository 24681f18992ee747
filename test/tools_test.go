package test

// Real tools through a real mount: cp, diff, tar, rsync, git, find, grep,
// du, ls, mv and rm on trees of thousands of files, checked against the
// same trees on the local disk and, for removal, against what the indices
// still hold.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
)

// tlGoroot is the Go installation whose sources serve as real trees.
func tlGoroot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// tlLocalTree copies $GOROOT/src/<subdirs> below a new local directory and
// adds the variety a source tree lacks (tlAddVariety). It returns the
// directory, on the local disk.
func tlLocalTree(t *testing.T, subdirs ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tree")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(tlGoroot(t), "src")
	for _, s := range subdirs {
		dst := filepath.Join(dir, s)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		mounttest.Sh(t, dir, "cp -a "+mounttest.Quote(filepath.Join(src, s))+" "+mounttest.Quote(dst))
	}
	tlAddVariety(t, dir)
	// The top directory's time last: everything above changed it.
	mounttest.Sh(t, dir, "touch -d '2011-11-11 11:11:11.111111111' .")
	return dir
}

// tlAddVariety puts below dir/zz-variety what a source tree lacks: symlinks
// of every kind (relative, absolute, dangling, to a directory), a hard link,
// an empty file and directory, a file of several 1 MiB chunks, a sparse
// file, names with spaces, non-ASCII and non-UTF-8 bytes, other owners,
// setuid/setgid/sticky modes, and nanosecond mtimes (also on symlinks).
func tlAddVariety(t *testing.T, dir string) {
	t.Helper()
	x := filepath.Join(dir, "zz-variety")
	for _, d := range []string{"", "sub", "sub/deeper", "emptydir", "sticky", "setgid"} {
		if err := os.Mkdir(filepath.Join(x, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	mounttest.WriteFileMode(t, filepath.Join(x, "empty"), nil, 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "big.bin"), mounttest.RandomBytes(1, 3<<20+12345), 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "sub", "target.txt"), []byte("the target\n"), 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "sub", "deeper", "leaf.txt"), []byte("leaf\n"), 0o640)
	mounttest.WriteFileMode(t, filepath.Join(x, "name with spaces.txt"), []byte("spaces\n"), 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "ünïcødé-名前.txt"), []byte("unicode\n"), 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "caf\xe9-latin1.txt"), []byte("not utf-8\n"), 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "exec.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	mounttest.WriteFileMode(t, filepath.Join(x, "private"), []byte("secret\n"), 0o600)
	mounttest.WriteFileMode(t, filepath.Join(x, "setuid"), []byte("suid\n"), 0o4755)
	mounttest.WriteFileMode(t, filepath.Join(x, "setgid-file"), []byte("sgid\n"), 0o2755)
	mounttest.WriteFileMode(t, filepath.Join(x, "owned"), []byte("someone else's\n"), 0o644)
	mounttest.WriteFileMode(t, filepath.Join(x, "hard-a"), []byte("one inode, two names\n"), 0o644)
	if err := os.Chmod(filepath.Join(x, "sticky"), 0o1777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(x, "setgid"), 0o2775); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(x, "hard-a"), filepath.Join(x, "sub", "hard-b")); err != nil {
		t.Fatal(err)
	}
	// Sparse: data at both ends of a 5 MiB file, holes between.
	sp, err := os.Create(filepath.Join(x, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := sp.WriteAt([]byte("tail"), 5<<20+7); err != nil {
		t.Fatal(err)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"link-rel":          "sub/target.txt",
		"link-abs":          "/etc/hostname",
		"link-dangling":     "does/not/exist",
		"link-dir":          "sub",
		"sub/link-up":       "../big.bin",
		"sub/deeper/link-2": "../../name with spaces.txt",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(x, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"owned", "sub/deeper", "link-rel"} {
		if err := os.Lchown(filepath.Join(x, p), 1234, 5678); err != nil {
			t.Fatal(err)
		}
	}
	// Every entry gets a time in the past: rsync compares symlink times to
	// the second only, so a symlink made in the same second as its copy
	// would keep the copy's creation time (rsync skips the utimensat).
	mounttest.Sh(t, x, `
find . -exec touch -h -d '2004-04-04 04:04:04.404040404' {} +
touch -d '2001-02-03 04:05:06.123456789' big.bin empty sparse.bin
touch -d '1999-12-31 23:59:59.999999999' 'name with spaces.txt' private
touch -d '2030-01-02 03:04:05.5' exec.sh
touch -h -d '2002-03-04 05:06:07.890123456' link-rel link-dangling link-dir
touch -d '2005-05-05 05:05:05.000000005' sub/deeper emptydir sticky setgid
touch -d '2006-06-06 06:06:06.6' sub .
`)
}

// tlListing describes every entry below dir, one sorted line each: path,
// type, mode (with setuid/setgid/sticky), owner, group, size, link count,
// mtime in ns and symlink target. Directories have no size or link count
// (esfs reports 0 and 1, a local filesystem its own numbers).
func tlListing(t *testing.T, dir string) []string {
	t.Helper()
	out := mounttest.Sh(t, dir, `{ find . ! -type d -printf '%p|%y|%m|%U:%G|%s|%n|%T@|%l\n'; `+
		`find . -type d -printf '%p|%y|%m|%U:%G|-|-|%T@|\n'; } | LC_ALL=C sort`)
	return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
}

// tlCheckVariety checks, beyond diff, what tlAddVariety made: symlinks are
// symlinks with their targets, the hard link is one inode, the sparse
// file reads back.
func tlCheckVariety(t *testing.T, dir string) {
	t.Helper()
	x := filepath.Join(dir, "zz-variety")
	for name, target := range map[string]string{"link-rel": "sub/target.txt", "link-dangling": "does/not/exist", "link-dir": "sub"} {
		fi, err := os.Lstat(filepath.Join(x, name))
		if err != nil {
			t.Errorf("lstat %s: %v", name, err)
			continue
		}
		if fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("%s is a %v, not a symlink", name, fi.Mode())
			continue
		}
		if got, err := os.Readlink(filepath.Join(x, name)); err != nil || got != target {
			t.Errorf("readlink %s = %q, %v; want %q", name, got, err, target)
		}
	}
	var a, b syscall.Stat_t
	if err := syscall.Lstat(filepath.Join(x, "hard-a"), &a); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Lstat(filepath.Join(x, "sub", "hard-b"), &b); err != nil {
		t.Fatal(err)
	}
	if a.Ino != b.Ino || a.Nlink != 2 || b.Nlink != 2 {
		t.Errorf("hard link: inodes %d and %d, links %d and %d; want one inode with 2 links", a.Ino, b.Ino, a.Nlink, b.Nlink)
	}
	sp, err := os.ReadFile(filepath.Join(x, "sparse.bin"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sp) != 5<<20+11 || string(sp[:4]) != "head" || string(sp[5<<20+7:]) != "tail" || strings.Trim(string(sp[4:5<<20+7]), "\x00") != "" {
		t.Errorf("sparse file: %d bytes, head %q, tail %q; want %d bytes, head, zeros, tail", len(sp), sp[:min(4, len(sp))], sp[max(len(sp)-4, 0):], 5<<20+11)
	}
}

// TestToolsCpOfSourceTree copies a real source tree of several thousand
// files, Go's src/crypto, src/go and src/runtime (about 2,900 files, 3,100
// entries), plus odd files into the mount with cp -a, then compares
// contents with diff -r and metadata (mode, owner, size, links, mtime to
// the nanosecond, symlink targets) with find.
//
// The whole of src/cmd (4,355 files) is the bigger test: its cp -a took
// 3.5 minutes without -race and 5.5 with it on the 2-core test machine
// shared with other suites, too much of a CI budget; ESFS_TOOLS_TREE
// chooses other subdirectories of $GOROOT/src (ESFS_TOOLS_TREE=cmd for
// that one). With -short the tree is src/go (about 550 files).
func TestToolsCpOfSourceTree(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	trees, least := []string{"crypto", "go", "runtime"}, 2000
	if testing.Short() {
		trees, least = []string{"go"}, 400
	}
	if env := strings.Fields(os.Getenv("ESFS_TOOLS_TREE")); len(env) > 0 {
		trees, least = env, 1
	}
	src := tlLocalTree(t, trees...)
	nfiles := mounttest.CountLines(mounttest.Sh(t, src, "find . -type f"))
	if nfiles < least {
		t.Fatalf("the source tree (%s) has only %d files; want at least %d", strings.Join(trees, " "), nfiles, least)
	}
	dst := m.Path("tree")
	mounttest.Step(t, fmt.Sprintf("cp -a of %d files into the mount", nfiles), func() {
		mounttest.Sh(t, "/", "cp -a "+mounttest.Quote(src)+" "+mounttest.Quote(dst))
	})
	mounttest.Step(t, "diff -r", func() { mounttest.DiffTrees(t, src, dst) })
	mounttest.Step(t, "find listings", func() {
		mounttest.SameLines(t, "find listing of the mount against the source", tlListing(t, src), tlListing(t, dst))
	})
	tlCheckVariety(t, dst)
	if n, want := mounttest.CountLines(mounttest.Sh(t, dst, "find . -type l")), mounttest.CountLines(mounttest.Sh(t, src, "find . -type l")); n != want || n < 6 {
		t.Errorf("find -type l in the mount: %d symlinks, want %d", n, want)
	}
	mounttest.FsckClean(t, f)
}

// TestToolsTarRoundTrip extracts a tar of a tree into the mount, tars it back
// out into a local directory, and compares all three.
func TestToolsTarRoundTrip(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	src := tlLocalTree(t, "archive", "encoding")
	in, out := m.Path("t"), filepath.Join(t.TempDir(), "out")
	for _, d := range []string{in, out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// posix (pax) format: nanosecond times, long names, any bytes.
	mounttest.Step(t, "tar c | tar x into the mount", func() {
		mounttest.Sh(t, "/", "tar --format=posix -C "+mounttest.Quote(src)+" -cf - . | tar -C "+mounttest.Quote(in)+" -xf -")
	})
	mounttest.Step(t, "tar c | tar x out of the mount", func() {
		mounttest.Sh(t, "/", "tar --format=posix -C "+mounttest.Quote(in)+" -cf - . | tar -C "+mounttest.Quote(out)+" -xf -")
	})
	mounttest.DiffTrees(t, src, in)
	mounttest.DiffTrees(t, src, out)
	// tar's own comparison of an archive of the source against the mount:
	// contents, modes, owners, mtimes, link targets.
	archive := filepath.Join(t.TempDir(), "src.tar")
	mounttest.Sh(t, "/", "tar --format=posix -C "+mounttest.Quote(src)+" -cf "+mounttest.Quote(archive)+" . && tar -C "+mounttest.Quote(in)+" --compare -f "+mounttest.Quote(archive))
	want := tlListing(t, src)
	mounttest.SameLines(t, "find listing of the mount against the source", want, tlListing(t, in))
	mounttest.SameLines(t, "find listing of the round trip against the source", want, tlListing(t, out))
	tlCheckVariety(t, in)
	tlCheckVariety(t, out)
	mounttest.FsckClean(t, f)
}

// TestToolsRsyncBothWays rsyncs a tree into the mount, checks that a second
// rsync has nothing to do (sizes and mtimes round-trip), that an update of
// one file transfers that file only, and rsyncs the mount back out.
func TestToolsRsyncBothWays(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	src := tlLocalTree(t, "encoding")
	dst := m.Path("r")
	mounttest.Step(t, "rsync -aH into the mount", func() {
		mounttest.Sh(t, "/", "rsync -aH "+mounttest.Quote(src+"/")+" "+mounttest.Quote(dst+"/"))
	})
	mounttest.DiffTrees(t, src, dst)
	mounttest.SameLines(t, "find listing of the mount against the source", tlListing(t, src), tlListing(t, dst))
	tlCheckVariety(t, dst)

	var again string
	mounttest.Step(t, "second rsync -aHi", func() {
		again = mounttest.Sh(t, "/", "rsync -aHi "+mounttest.Quote(src+"/")+" "+mounttest.Quote(dst+"/"))
	})
	if strings.TrimSpace(again) != "" {
		t.Errorf("a second rsync -aHi of an unchanged tree transferred something (mtimes or sizes did not round-trip):\n%s", again)
	}

	// One file changes (size and mtime): rsync sends that file only, by
	// writing a temporary file and renaming it over the old one.
	changed := filepath.Join(src, "zz-variety", "sub", "target.txt")
	mounttest.WriteFileMode(t, changed, []byte("the target, rewritten and longer\n"), 0o644)
	mounttest.Sh(t, "/", "touch -d '2012-12-12 12:12:12.121212121' "+mounttest.Quote(changed))
	upd := mounttest.Sh(t, "/", "rsync -aHi "+mounttest.Quote(src+"/")+" "+mounttest.Quote(dst+"/"))
	var sent []string
	for _, l := range strings.Split(strings.TrimSpace(upd), "\n") {
		if strings.HasPrefix(l, ">f") {
			sent = append(sent, l)
		}
	}
	if len(sent) != 1 || !strings.HasSuffix(sent[0], " zz-variety/sub/target.txt") {
		t.Errorf("rsync after changing one file sent %q; want zz-variety/sub/target.txt only; whole output:\n%s", sent, upd)
	}
	mounttest.DiffTrees(t, src, dst)
	want := tlListing(t, src)
	mounttest.SameLines(t, "find listing of the mount after the update", want, tlListing(t, dst))

	back := filepath.Join(t.TempDir(), "back")
	mounttest.Step(t, "rsync -aH out of the mount", func() {
		mounttest.Sh(t, "/", "rsync -aH "+mounttest.Quote(dst+"/")+" "+mounttest.Quote(back+"/"))
	})
	mounttest.DiffTrees(t, src, back)
	mounttest.SameLines(t, "find listing of the copy out of the mount", want, tlListing(t, back))
	tlCheckVariety(t, back)
	if again := mounttest.Sh(t, "/", "rsync -aHi "+mounttest.Quote(dst+"/")+" "+mounttest.Quote(back+"/")); strings.TrimSpace(again) != "" {
		t.Errorf("a second rsync -aHi out of the mount transferred something:\n%s", again)
	}
	mounttest.FsckClean(t, f)
}

// TestToolsGit runs a git repository inside the mount: commits, a rename, a
// removal, gc, fsck, and a clone out of it.
func TestToolsGit(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	repo := m.Path("repo")
	if err := os.Mkdir(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(tlGoroot(t), "src", "strings")
	env := "export HOME=" + mounttest.Quote(t.TempDir()) + " GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'\n"
	git := func(script string) string {
		t.Helper()
		return mounttest.Sh(t, repo, env+script)
	}
	git(`git init -q -b main .
git config user.name 'Esfs Test'
git config user.email test@esfs.invalid
cp -a ` + mounttest.Quote(src) + ` strings
printf 'hello\n' > README
mkdir -p docs/deep && printf 'deep\n' > docs/deep/file.txt
ln -s README readme-link
chmod +x docs/deep/file.txt
git add -A
git commit -q -m first`)
	if st := git("git status --porcelain"); st != "" {
		t.Errorf("git status --porcelain after the first commit:\n%s", st)
	}
	nfiles := mounttest.CountLines(git("git ls-files"))
	if want := mounttest.CountLines(mounttest.Sh(t, src, "find . -type f")) + 3; nfiles != want {
		t.Errorf("git ls-files lists %d files, want %d", nfiles, want)
	}

	git(`printf 'hello again\n' >> README
git mv docs/deep/file.txt docs/moved.txt
rmdir docs/deep
git rm -q strings/example_test.go
printf 'new\n' > new.txt
git add -A
git commit -q -m second`)
	if st := git("git status --porcelain"); st != "" {
		t.Errorf("git status --porcelain after the second commit:\n%s", st)
	}
	log := git("git log --format='%s'")
	if log != "second\nfirst\n" {
		t.Errorf("git log shows %q, want the commits second and first", log)
	}
	if show := git("git show --name-status --format= HEAD"); !strings.Contains(show, "M\tREADME") ||
		!strings.Contains(show, "R100\tdocs/deep/file.txt\tdocs/moved.txt") || !strings.Contains(show, "A\tnew.txt") ||
		!strings.Contains(show, "D\tstrings/example_test.go") {
		t.Errorf("git show HEAD does not show the modify, rename, removal and add:\n%s", show)
	}
	if got := git("git cat-file -p HEAD:README"); got != "hello\nhello again\n" {
		t.Errorf("README in HEAD is %q", got)
	}
	git("git fsck --full --strict --no-progress")
	// gc packs and deletes loose objects: many renames and unlinks.
	git("git gc -q && git fsck --full --strict --no-progress")
	if st := git("git status --porcelain"); st != "" {
		t.Errorf("git status --porcelain after gc:\n%s", st)
	}
	clone := filepath.Join(t.TempDir(), "clone")
	mounttest.Sh(t, "/", env+"git clone -q "+mounttest.Quote(repo)+" "+mounttest.Quote(clone))
	if got := mounttest.Sh(t, clone, env+"git log --format='%s' && git status --porcelain"); got != "second\nfirst\n" {
		t.Errorf("the clone out of the mount shows %q", got)
	}
	diff := mounttest.Sh(t, "/", "diff -r --no-dereference --exclude=.git "+mounttest.Quote(repo)+" "+mounttest.Quote(clone)+" && echo same")
	if diff != "same\n" {
		t.Errorf("work tree in the mount and the clone differ:\n%s", diff)
	}
	mounttest.FsckClean(t, f)
}

// TestToolsFindGrepDuLs checks find, grep -r, du and ls -lR on a tree of known
// shape.
func TestToolsFindGrepDuLs(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	const planted = "PLANTED-needle-7f3a9c"
	files := map[string][]byte{}
	var total int64
	for d := 0; d < 8; d++ {
		for s := 0; s < 4; s++ {
			for i := 0; i < 10; i++ {
				p := fmt.Sprintf("d%d/s%d/f%d.txt", d, s, i)
				files[p] = []byte(strings.Repeat(fmt.Sprintf("line of %s\n", p), d*s*i%23+1))
			}
		}
	}
	for i := 0; i < 10; i++ {
		files[fmt.Sprintf("top%d.dat", i)] = mounttest.RandomBytes(int64(i), i*1000)
	}
	files["d7/s3/big.bin"] = mounttest.RandomBytes(99, 2<<20+5)
	files["d3/s1/f4.txt"] = append(files["d3/s1/f4.txt"], "a line with "+planted+" in the middle\n"...)
	files["d6/s0/deep/er/still/here.txt"] = []byte("x\ny\n" + planted + "\n")
	files["d6/s0/near-miss.txt"] = []byte("PLANTED-needle-7f3a9\n") // one character short
	for _, b := range files {
		total += int64(len(b))
	}
	root := m.Path("tree")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Step(t, fmt.Sprintf("writing %d files", len(files)), func() { mounttest.WriteTree(t, root, files, 4) })
	dirs := map[string]bool{".": true}
	for p := range files {
		for d := filepath.Dir(p); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}

	if n := mounttest.CountLines(mounttest.Sh(t, root, "find . -type f")); n != len(files) {
		t.Errorf("find -type f: %d files, want %d", n, len(files))
	}
	if n := mounttest.CountLines(mounttest.Sh(t, root, "find . -type d")); n != len(dirs) {
		t.Errorf("find -type d: %d directories, want %d", n, len(dirs))
	}
	if got := mounttest.Sh(t, root, "find . -name 'f9.txt' | LC_ALL=C sort | head -3"); got != "./d0/s0/f9.txt\n./d0/s1/f9.txt\n./d0/s2/f9.txt\n" {
		t.Errorf("find -name f9.txt begins with %q", got)
	}
	if got := mounttest.Sh(t, root, "find . -type f -size +1M"); got != "./d7/s3/big.bin\n" {
		t.Errorf("find -size +1M = %q, want ./d7/s3/big.bin", got)
	}
	if got := mounttest.Sh(t, root, "find . -type f -empty"); got != "./top0.dat\n" {
		t.Errorf("find -empty = %q, want ./top0.dat", got)
	}

	if got := mounttest.Sh(t, root, "grep -rl "+mounttest.Quote(planted)+" . | LC_ALL=C sort"); got != "./d3/s1/f4.txt\n./d6/s0/deep/er/still/here.txt\n" {
		t.Errorf("grep -rl found %q, want the two planted files", got)
	}
	if got := mounttest.Sh(t, root, "grep -rn "+mounttest.Quote(planted)+" d6"); got != "d6/s0/deep/er/still/here.txt:3:"+planted+"\n" {
		t.Errorf("grep -rn = %q", got)
	}
	if got := mounttest.Sh(t, root, "grep -rc 'line of' . | grep -v ':0$' | wc -l"); strings.TrimSpace(got) != "320" {
		t.Errorf("grep -rc: %s files contain 'line of', want 320", strings.TrimSpace(got))
	}

	// du: the apparent size is exactly the bytes written plus what the
	// directories report; disk usage is at least the bytes written and at
	// most a block more per entry.
	var dirBytes int64
	for _, l := range strings.Fields(mounttest.Sh(t, root, "find . -type d -printf '%s\\n'")) {
		n, _ := strconv.ParseInt(l, 10, 64)
		dirBytes += n
	}
	apparent, _ := strconv.ParseInt(strings.Fields(mounttest.Sh(t, root, "du -s -B1 --apparent-size ."))[0], 10, 64)
	if apparent != total+dirBytes {
		t.Errorf("du --apparent-size = %d bytes, want %d (files) + %d (directories)", apparent, total, dirBytes)
	}
	usage, _ := strconv.ParseInt(strings.Fields(mounttest.Sh(t, root, "du -s -B1 ."))[0], 10, 64)
	limit := total + dirBytes + 4096*int64(len(files)+len(dirs))
	if usage < total || usage > limit {
		t.Errorf("du -s = %d bytes for %d bytes in %d files; want between %d and %d", usage, total, len(files), total, limit)
	}
	if kb := strings.Fields(mounttest.Sh(t, root, "du -sk ."))[0]; kb == "0" {
		t.Errorf("du -sk = 0")
	}

	// ls -lR: every file, with its size, under its directory's heading.
	want := map[string]bool{}
	for p, b := range files {
		want[fmt.Sprintf("%s -rw-r--r-- %d", p, len(b))] = true
	}
	for d := range dirs {
		if d != "." {
			want[d+" drwxr-xr-x"] = true
		}
	}
	got := map[string]bool{}
	cur := ""
	for _, l := range strings.Split(mounttest.Sh(t, root, "LC_ALL=C ls -lR ."), "\n") {
		fields := strings.Fields(l)
		switch {
		case strings.HasSuffix(l, ":") && strings.HasPrefix(l, "."):
			cur = strings.TrimPrefix(strings.TrimPrefix(strings.TrimSuffix(l, ":"), "."), "/")
		case len(fields) >= 9 && (fields[0][0] == '-' || fields[0][0] == 'd'):
			p := filepath.Join(cur, fields[len(fields)-1])
			if fields[0][0] == 'd' {
				got[p+" "+fields[0]] = true
			} else {
				got[fmt.Sprintf("%s %s %s", p, fields[0], fields[4])] = true
			}
		}
	}
	mounttest.SameLines(t, "ls -lR", tlKeys(want), tlKeys(got))
	mounttest.FsckClean(t, f)
}

func tlKeys(m map[string]bool) []string {
	s := make([]string, 0, len(m))
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return s
}
