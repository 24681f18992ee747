package test

// esfs fsck: it finds what dead writers left (data chunks, directory link
// counts off by one), --repair removes or recounts it, and a repair on a
// live filesystem leaves alone what changed while it ran.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// fsckRun runs esfs fsck (with args) and returns its output and exit
// status.
func fsckRun(t *testing.T, f *mounttest.FS, args ...string) (string, int) {
	t.Helper()
	out, err := f.Run(append([]string{"fsck", "--lease", mounttest.Lease.String()}, args...)...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	}
	t.Fatalf("esfs fsck: %v\n%s", err, out)
	return "", 0
}

// TestFsckLeftoverData: esfs fsck finds data chunks that dead writers
// left: a mount killed between a flush's chunks and its inode (the crash
// point flush-after-chunks), whose file then reads as empty, and whose
// chunks become those of no inode once another mount removes the file;
// and a mount killed with data sent but never flushed. --repair removes
// them; the unflushed chunks of a live writer are in flight, untouched,
// and its file is whole when it closes it.
func TestFsckLeftoverData(t *testing.T) {
	f := mounttest.NewFS(t)
	b := mounttest.MountUncached(t, f, nil)
	data := func(n int, seed byte) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(i*7) + seed
		}
		return out
	}

	// Two files whose flush dies between chunks and inode.
	var crashed []uint64
	for _, name := range []string{"gone", "empty"} {
		m := mounttest.MountUncached(t, f, []string{"ESFS_CRASH_POINT=flush-after-chunks"}, "--write-delegations=false") // data flushed by close, not in a batch
		err := os.WriteFile(m.Path(name), data(3<<20, 1), 0o644)
		if _, ok := m.WaitExit(time.Minute); !ok {
			t.Fatalf("the mount did not die at its flush (write: %v)", err)
		}
		m.Kill()
		crashed = append(crashed, mounttest.Ino(t, b.Path(name)))
		if got := mounttest.StoredChunks(t, f, crashed[len(crashed)-1]); len(got) != 3 {
			t.Fatalf("%s: %d chunks stored by the killed flush, want 3", name, len(got))
		}
	}
	if err := os.Remove(b.Path("gone")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(b.Path("empty")); err != nil || st.Size() != 0 {
		t.Fatalf("the file whose flush died: %v, %v", st, err)
	}

	// A mount killed with 32 MiB sent and its inode never updated.
	k := mounttest.MountUncached(t, f, nil)
	kh, err := os.Create(k.Path("killed"))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < 40<<20; off += 1 << 20 {
		if _, err := kh.Write(data(1<<20, 2)); err != nil {
			t.Fatal(err)
		}
	}
	killedIno := mounttest.Ino(t, k.Path("killed"))
	k.Kill()
	kh.Close()
	if got := mounttest.StoredChunks(t, f, killedIno); len(got) < 32 {
		t.Fatalf("the killed writer had stored %d chunks, want at least 32", len(got))
	}

	// A live writer, with 32 MiB sent and not flushed. It is another
	// process: every fork of this one (fsck, a mount) would close a copy
	// of the descriptor, and each close flushes.
	c := mounttest.MountUncached(t, f, nil)
	live := bytes.Repeat(data(1<<20, 3), 40)
	writer := exec.Command("python3", "-c", `
import sys
blk = bytes(((i * 7) + 3) & 255 for i in range(1 << 20))
f = open(sys.argv[1], "wb", buffering=0)
for _ in range(40):
    f.write(blk)
print("written", flush=True)
sys.stdin.read()
f.close()
print("closed", flush=True)
`, c.Path("live"))
	stdin, err := writer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := writer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	writer.Stderr = os.Stderr
	if err := writer.Start(); err != nil {
		t.Skipf("no python3 for the live writer: %v", err)
	}
	defer writer.Process.Kill()
	line := make([]byte, 8)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "written\n" {
		t.Fatalf("the live writer: %q, %v", line, err)
	}
	liveIno := mounttest.Ino(t, c.Path("live"))
	liveChunks := mounttest.StoredChunks(t, f, liveIno)
	if len(liveChunks) < 32 {
		t.Fatalf("the live writer stored %d chunks before its flush, want at least 32", len(liveChunks))
	}

	out, code := fsckRun(t, f)
	t.Logf("esfs fsck:\n%s", out)
	if code != 4 {
		t.Errorf("esfs fsck exit status %d, want 4 (problems left)", code)
	}
	for _, want := range []string{
		fmt.Sprintf("leftover data: inode %d: 3 data chunks (0..2) of an inode that does not exist", crashed[0]),
		fmt.Sprintf("leftover data: inode %d: 3 data chunks (0..2) past its size of 0 bytes", crashed[1]),
		fmt.Sprintf("leftover data: inode %d: ", killedIno),
		fmt.Sprintf("in flight: inode %d: %d data chunks", liveIno, len(liveChunks)),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("esfs fsck does not say %q", want)
		}
	}
	if strings.Contains(out, fmt.Sprintf("leftover data: inode %d", liveIno)) {
		t.Errorf("the live writer's chunks are called leftovers")
	}

	out, code = fsckRun(t, f, "--repair")
	t.Logf("esfs fsck --repair:\n%s", out)
	if code != 1 {
		t.Errorf("esfs fsck --repair exit status %d, want 1 (all repaired)", code)
	}
	for _, ino := range append(crashed, killedIno) {
		if got := mounttest.StoredChunks(t, f, ino); len(got) != 0 {
			t.Errorf("inode %d: chunks %v left after repair", ino, got)
		}
	}
	if got := mounttest.StoredChunks(t, f, liveIno); len(got) < len(liveChunks) {
		t.Errorf("the live writer's chunks: %d left of %d after repair", len(got), len(liveChunks))
	}
	stdin.Close()
	if err := writer.Wait(); err != nil {
		t.Fatalf("the live writer's close: %v", err)
	}
	if got := mounttest.MustReadFile(t, b.Path("live")); !bytes.Equal(got, live) {
		t.Errorf("the live writer's file after fsck --repair and its close: %d bytes, differs from what was written", len(got))
	}
	if out, code := fsckRun(t, f); code != 0 {
		t.Errorf("esfs fsck after repair: exit status %d\n%s", code, out)
	}
	var st unix.Stat_t
	if err := unix.Stat(b.Path("live"), &st); err != nil || st.Blocks*512 < int64(len(live)) {
		t.Errorf("the live file's st_blocks %d for %d bytes (%v)", st.Blocks, len(live), err)
	}
	if b.Exited() || c.Exited() {
		t.Fatal("a live mount exited")
	}
}

// TestFsckDirLinkCounts: esfs fsck finds a directory
// count left off by a crash between a rename's finish and its counts, and
// the counts of directories made by an esfs that did not count, and
// --repair sets them; a rename whose mount died with no other mount alive
// is finished by esfs fsck --repair, counts included.
func TestFsckDirLinkCounts(t *testing.T) {
	f := mounttest.NewFS(t)
	b := mounttest.MountUncached(t, f, nil)
	mounttest.Sh(t, b.Dir, `mkdir -p a/keep a/d/sub b old/x/y`)
	a := mounttest.MountUncached(t, f, []string{"ESFS_CRASH_POINT=rename-after-links-marked"}, "--write-delegations=false") // a journaled rename
	mv := mounttest.Background(func() mounttest.Result {
		return mounttest.Exec(2*time.Minute, "/", "mv", "-T", a.Path("a", "d"), a.Path("b", "d"))
	})
	if _, ok := a.WaitExit(2 * time.Minute); !ok {
		t.Fatal("the renaming mount did not die at rename-after-links-marked")
	}
	died := time.Now()
	a.Kill()
	mounttest.WaitResult(t, "mv on the dead mount", mv, time.Minute)
	want := mounttest.NewTree()
	for _, d := range []string{"a", "a/keep", "b", "b/d", "b/d/sub", "old", "old/x", "old/x/y"} {
		want.Dirs[d] = true
	}
	mounttest.WaitClean(t, f, b, want, died, mounttest.RecoveredWithin+30*time.Second)
	// The survivor finished the rename, but the counts were marked as
	// moved by the mount that died before it moved them.
	if na, nb := mounttest.Links(t, b.Path("a")), mounttest.Links(t, b.Path("b")); na != 4 || nb != 2 {
		t.Fatalf("after the crash: /a has %d links, /b %d; want the stale 4 and 2 (the crash point is not where the test thinks)", na, nb)
	}
	// A directory as an esfs that did not count left it.
	ctx := context.Background()
	var st unix.Stat_t
	if err := unix.Stat(b.Path("old", "x"), &st); err != nil {
		t.Fatal(err)
	}
	old, err := f.Store.GetInode(ctx, st.Ino)
	if err != nil {
		t.Fatal(err)
	}
	old.Nlink = 1
	// Written behind the mounts' backs, as no esfs writes: b holds a
	// delegation on the directory it made and goes on showing what it
	// knows, until fsck --repair below, which recalls it.
	if _, err := f.Store.Write(ctx, store.PutInode(old, old.Ver)); err != nil {
		t.Fatal(err)
	}

	out, err := f.Run("fsck", "--no-wait")
	if code := exitCode(err); code != 4 || !strings.Contains(out, "directory link count: /a: nlink 4, want 3 ") ||
		!strings.Contains(out, "directory link count: /b: nlink 2, want 3 ") || !strings.Contains(out, "directory link count: /old/x: not counted") {
		t.Fatalf("fsck: exit %d, want 4 naming /a, /b and /old/x:\n%s", code, out)
	}
	if out, err := f.Run("fsck", "--no-wait", "--repair"); exitCode(err) != 1 || strings.Count(out, "(repaired)") != 3 {
		t.Fatalf("fsck --repair: exit %d, want 1 with 3 repairs:\n%s", exitCode(err), out)
	}
	if out, err := f.Run("fsck", "--no-wait"); err != nil {
		t.Fatalf("fsck after the repair: %v\n%s", err, out)
	}
	mounttest.DirLinksAgree(t, b.Dir)
	mounttest.Alive(t, b)

	// No mount alive: an admin command finishes a dead mount's rename.
	b.Unmount(t)
	a = mounttest.MountUncached(t, f, []string{"ESFS_CRASH_POINT=rename-after-commit"}, "--write-delegations=false") // a journaled rename
	mv = mounttest.Background(func() mounttest.Result {
		return mounttest.Exec(2*time.Minute, "/", "mv", "-T", a.Path("b", "d"), a.Path("old", "d"))
	})
	if _, ok := a.WaitExit(2 * time.Minute); !ok {
		t.Fatal("the renaming mount did not die at rename-after-commit")
	}
	a.Kill()
	mounttest.WaitResult(t, "mv on the dead mount", mv, time.Minute)
	if out, err := f.Run("fsck", "--repair"); exitCode(err) != 1 || !strings.Contains(out, "unfinished operation") {
		t.Fatalf("fsck --repair of a dead mount's rename: exit %d, want 1:\n%s", exitCode(err), out)
	}
	if out, err := f.Run("fsck", "--no-wait"); err != nil {
		t.Fatalf("fsck after recovery by fsck: %v\n%s", err, out)
	}
	c := mounttest.MountUncached(t, f, nil)
	if _, err := os.Stat(c.Path("old", "d", "sub")); err != nil {
		t.Errorf("the rename finished by fsck: %v", err)
	}
	if nb, no := mounttest.Links(t, c.Path("b")), mounttest.Links(t, c.Path("old")); nb != 2 || no != 4 {
		t.Errorf("after fsck finished the rename: /b has %d links, /old %d; want 2 and 4", nb, no)
	}
	mounttest.DirLinksAgree(t, c.Dir)
	mounttest.Alive(t, c)
}

// exitCode is the exit status of a command's error (0 for nil).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestFsckRepairSparesChangesMadeDuringIt: fsck compares a snapshot of the
// paths with a scan of the inodes made after it. A file created, a hard
// link made and a file removed between the two (here: while fsck's inode
// scan is held) are not damage: fsck --repair must leave them alone (before,
// it deleted the new file's inode and data, and lowered the link count
// below the file's paths), and report the filesystem clean.
func TestFsckRepairSparesChangesMadeDuringIt(t *testing.T) {
	mounttest.QuickExit(t)
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	mounttest.Sh(t, m.Dir, `echo linked > linked && echo doomed > doomed && mkdir d0`)
	if out, code := mounttest.RunOn(t, f, "", "fsck", "--no-wait"); code != 0 {
		t.Fatalf("fsck before: status %d\n%s", code, out)
	}

	fsck := mounttest.StartHeld(t, f, "scanning inodes", func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPost && r.URL.Path == "/"+f.Index+"-inodes/_search"
	}, "fsck", "--repair", "--no-wait")
	// sync . (an fsync of the root) flushes what write delegations kept
	// in memory: this test reads the store itself.
	mounttest.Sh(t, m.Dir, `echo born > born && ln linked link2 && rm doomed && mkdir d0/new && sync .`)
	mounttest.ESRequest(t, f.URL, "POST", "/"+f.Index+","+f.Index+"-*/_refresh", "")
	out, err := fsck.Finish()
	if err != nil {
		t.Errorf("fsck --repair during changes: %v\n%s", err, out)
	}
	t.Logf("fsck: %s", out)
	ctx := context.Background()
	for name, nlink := range map[string]uint32{"born": 1, "linked": 2} {
		d, err := f.Store.GetDentry(ctx, "/"+name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a, err := f.Store.GetInode(ctx, d.Ino)
		if err != nil || a.Nlink != nlink {
			t.Errorf("%s after fsck --repair: inode %+v, %v; want %d links", name, a, err, nlink)
		}
	}
	// A mkdir between the snapshots moved directory link counts too.
	for name, nlink := range map[string]uint32{"/d0": 3, "/d0/new": 2} {
		d, err := f.Store.GetDentry(ctx, name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if a, err := f.Store.GetInode(ctx, d.Ino); err != nil || a.Nlink != nlink {
			t.Errorf("directory %s after fsck --repair: inode %+v, %v; want %d links", name, a, err, nlink)
		}
	}
	if got := mounttest.Sh(t, m.Dir, `cat born link2`); got != "born\nlinked\n" {
		t.Errorf("contents after fsck --repair: %q", got)
	}
}

// TestFsckRepairsNamesInOneRun: damaged path documents, as no esfs
// writes them: the root's inode named again at /loop (a document that
// does not decode: deleted, and /loop, with an entry below it, made
// again as a directory of its own), an ancestor's
// below itself (/a/b/up names /a's inode, with an entry of its own), a
// directory at two names of one depth, a path of a file's inode that says
// directory, a path whose inode does not exist (with an entry below it),
// a path document that does not decode, and orphans two deep. esfs fsck
// reports them (status 4), --repair settles every one in that run, each
// keeping what it had (the twice-named directories' other names become
// directories of their own with their entries; the directory without a
// document is made again; only the path below a file is removed), and two runs of esfs fsck
// after it find the filesystem clean: before, the twice-named directories
// were reported and left, and the repairs of the root's link count undid
// each other from run to run. A mount then lists and reads it all.
func TestFsckRepairsNamesInOneRun(t *testing.T) {
	f := mounttest.NewFS(t)
	m := mounttest.MountUncached(t, f, nil)
	mounttest.Sh(t, m.Dir, `mkdir -p a/b d1 d2 control/sub && echo one > d1/one && echo two > d2/two && echo ctl > control/sub/f && echo file > file`)
	aIno := mounttest.Ino(t, m.Path("a"))
	d1Ino := mounttest.Ino(t, m.Path("d1"))
	fileIno := mounttest.Ino(t, m.Path("file"))
	oneIno := mounttest.Ino(t, m.Path("d1", "one"))
	m.Unmount(t)

	path := func(p string, ino uint64, typ string) {
		dir, name := store.Split(p)
		putRaw(t, f.URL, f.Index, store.DocID(p), map[string]any{"path": p, "parent": dir, "name": name, "ino": ino, "type": typ})
	}
	mounttest.ESRequest(t, f.URL, "DELETE", fmt.Sprintf("/%s-inodes/_doc/%d?refresh=true", f.Index, oneIno), "")
	path("/loop", store.RootIno, "dir")
	path("/loop/inside", 7777777007, "file")
	path("/a/b/up", aIno, "dir")
	path("/a/b/up/mine", 7777777001, "file") // its inode missing too
	path("/d2", d1Ino, "dir")                // d2's own inode is left unnamed
	path("/fakedir", fileIno, "dir")
	path("/gone", 7777777002, "dir")
	path("/gone/x", 7777777003, "file")
	path("/nowhere/deep", 7777777004, "dir")
	path("/nowhere/deep/er", 7777777005, "file")
	path("/file/under", 7777777006, "file")
	putRaw(t, f.URL, f.Index, store.DocID("/broken"), map[string]any{"path": "/broken", "parent": "/elsewhere", "name": "broken", "ino": 5, "type": "dir"})

	out, code := fsckRun(t, f, "--no-wait")
	t.Logf("esfs fsck:\n%s", out)
	if code != 4 {
		t.Errorf("esfs fsck: exit status %d, want 4", code)
	}
	for _, want := range []string{"corrupt path document: " + store.DocID("/loop"), "duplicate directory: /a/b/up:", "duplicate directory: /d2:",
		"type mismatch: /fakedir:", "missing inode: /gone:", "missing inode: /a/b/up/mine:", "missing inode: /d1/one:", "missing directory: /nowhere:", "orphan path: /file/under: its parent is not a directory", "corrupt path document: " + store.DocID("/broken")} {
		if !strings.Contains(out, want) {
			t.Errorf("esfs fsck does not say %q", want)
		}
	}
	out, code = fsckRun(t, f, "--no-wait", "--repair")
	t.Logf("esfs fsck --repair:\n%s", out)
	if code != 1 {
		t.Errorf("esfs fsck --repair: exit status %d, want 1 (all repaired)", code)
	}
	for i := 0; i < 2; i++ {
		if out, code := fsckRun(t, f, "--no-wait"); code != 0 {
			t.Fatalf("esfs fsck %d after the repair: exit status %d\n%s", i+1, code, out)
		}
	}
	m = mounttest.MountUncached(t, f, nil)
	got := mounttest.Sh(t, m.Dir, `ls -a . loop a/b/up d1 d2 gone && cat d1/one d2/two control/sub/f file a/b/up/mine gone/x && stat -c '%F %h' fakedir loop a/b/up d2 . a/b && find . | sort | wc -l`)
	want := `.:
.
..
a
control
d1
d2
fakedir
file
gone
loop
nowhere

a/b/up:
.
..
mine

d1:
.
..
one

d2:
.
..
two

gone:
.
..
x

loop:
.
..
inside
one
two
ctl
file
regular file 2
directory 2
directory 2
directory 2
directory 9
directory 3
`
	// find: . a a/b a/b/up a/b/up/mine control control/sub control/sub/f d1 d1/one d2 d2/two fakedir file gone gone/x loop loop/inside nowhere nowhere/deep nowhere/deep/er
	if want += "21\n"; got != want {
		t.Errorf("after the repair, the mount shows:\n%s\nwant:\n%s", got, want)
	}
	// The file made again keeps its data and takes writes.
	if got := mounttest.Sh(t, m.Dir, `echo more >> d1/one && cat d1/one`); got != "one\nmore\n" {
		t.Errorf("writes to the file made again: %q", got)
	}
	mounttest.DirLinksAgree(t, m.Dir)
	mounttest.Alive(t, m)
}
