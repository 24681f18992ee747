package test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
)

// storedIno returns the inode stored at path p of f's index (0: none).
func storedIno(t *testing.T, f *mounttest.FS, p string) uint64 {
	t.Helper()
	d, err := f.Store.GetDentry(context.Background(), p)
	if errors.Is(err, store.ErrNotFound) {
		return 0
	}
	if err != nil {
		t.Fatalf("reading %s from the index: %v", p, err)
	}
	return d.Ino
}

// listDir returns the sorted names in dir.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("listing %s: %v", dir, err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	return names
}

// TestSubdirMount: `esfs mount --subdir /projects/a` shows exactly that
// directory; ".." at its root leaves the mount, not into /projects; what
// is made, renamed and removed there lands at the stored paths below
// /projects/a, as a whole-filesystem mount sees them; the mount table
// names the subdirectory; `esfs search --mount` prints paths under the
// mount point and nothing from outside it; df and esfs umount work.
func TestSubdirMount(t *testing.T) {
	f := mounttest.NewFS(t)
	whole := f.Mount(t)
	mounttest.Sh(t, whole.Dir, `mkdir -p projects/a/sub projects/b && echo apricot > projects/a/x &&
		echo apricot banana > projects/a/sub/y && echo apricot > projects/b/z && echo apricot > top`)
	whole.Sync(t)

	sub := f.Mount(t, "--subdir", "/projects/a/")
	// Without delegations (ESFS_TEST_MOUNT_FLAGS) another mount's
	// creations reach a listing within the refresh interval: wait for it.
	var got []string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if got = listDir(t, sub.Dir); strings.Join(got, " ") == "sub x" || time.Now().After(deadline) {
			break
		}
	}
	if strings.Join(got, " ") != "sub x" {
		t.Errorf("the subdir mount's root lists %q, want [sub x]", got)
	}
	if data, err := os.ReadFile(sub.Path("sub", "y")); err != nil || string(data) != "apricot banana\n" {
		t.Errorf("reading sub/y: %q, %v", data, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(sub.Dir, &st); err != nil {
		t.Fatal(err)
	}
	if want := storedIno(t, f, "/projects/a"); st.Ino != want || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		t.Errorf("the root is inode %d (mode %o), want /projects/a's inode %d", st.Ino, st.Mode, want)
	}
	// ".." at the mount's root is the mount point's parent: the kernel's
	// business, never a lookup the daemon could answer from /projects.
	// (Paths joined by hand: filepath.Join would clean the ".." away
	// before the kernel sees it.)
	parentSt, err := os.Stat(filepath.Dir(sub.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sub.Dir + "/..", sub.Dir + "/sub/../.."} {
		if st, err := os.Stat(p); err != nil || !os.SameFile(st, parentSt) {
			t.Errorf("%s is not the mount point's parent (%v)", p, err)
		}
	}
	for _, p := range []string{sub.Dir + "/../b", sub.Dir + "/sub/../../b/z", sub.Dir + "/../../projects/b"} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("stat %s: %v, want ENOENT: nothing above /projects/a is reachable", p, err)
		}
	}
	if _, src, ok := mountEntryOf(sub.Dir); !ok || src != "esfs:"+f.Index+":/projects/a" {
		t.Errorf("the mount table's source is %q, want esfs:%s:/projects/a", src, f.Index)
	}
	if log := sub.Log(); !strings.Contains(log, "subdir=/projects/a") {
		t.Errorf("the 'mounted' log line does not name the subdirectory:\n%s", log)
	}

	// Changes through the subdir mount, seen at their stored paths.
	mounttest.Sh(t, sub.Dir, `echo new > new && mkdir d && mv x d/x2 && rm sub/y && rmdir sub && mkdir gone && rmdir gone && mv d d2 && ln -s x2 d2/link`)
	sub.Sync(t)
	for p, want := range map[string]bool{"/projects/a/new": true, "/projects/a/d2": true, "/projects/a/d2/x2": true, "/projects/a/d2/link": true,
		"/projects/a/x": false, "/projects/a/sub": false, "/projects/a/d": false, "/projects/a/gone": false, "/new": false, "/d2": false} {
		if got := storedIno(t, f, p) != 0; got != want {
			t.Errorf("stored path %s exists: %v, want %v", p, got, want)
		}
	}
	want := ". ./a ./a/d2 ./a/d2/link ./a/d2/x2 ./a/new ./b ./b/z apricot\n"
	var shown string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if shown = mounttest.Sh(t, whole.Dir, `cd projects && find . | sort | tr '\n' ' '; cat a/d2/link`); shown == want || time.Now().After(deadline) {
			break
		}
	}
	if shown != want {
		t.Errorf("the whole filesystem's mount shows %q, want %q", shown, want)
	}
	// And the other way round: what the whole mount makes there appears.
	mounttest.Sh(t, whole.Dir, `echo cherry > projects/a/fromwhole && mv projects/b/z projects/a/z`)
	mounttest.Sh(t, sub.Dir, `test "$(cat fromwhole)" = cherry && test "$(cat z)" = apricot`)

	// search --mount prints paths under the mount point, none outside.
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"search", "--es-url", f.URL, "--index", f.Index, "--mount", sub.Dir, "apricot"}, Limit: time.Minute})
	if want := sub.Dir + "/d2/x2\n" + sub.Dir + "/z\n"; r.Code != 0 || r.Out != want {
		t.Errorf("search --mount on the subdir mount: status %d\n%s\nwant:\n%s", r.Code, r.Out, want)
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"search", "--es-url", f.URL, "--index", f.Index, "--mount", sub.Dir, "--under", sub.Path("d2"), "apricot"}, Limit: time.Minute})
	if want := sub.Dir + "/d2/x2\n"; r.Code != 0 || r.Out != want {
		t.Errorf("search --mount --under DIR/d2: status %d\n%s\nwant:\n%s", r.Code, r.Out, want)
	}
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"search", "--es-url", f.URL, "--index", f.Index, "--mount", whole.Dir, "apricot"}, Limit: time.Minute})
	if want := whole.Dir + "/projects/a/d2/x2\n" + whole.Dir + "/projects/a/z\n" + whole.Dir + "/top\n"; r.Code != 0 || r.Out != want {
		t.Errorf("search --mount on the whole mount: status %d\n%s\nwant:\n%s", r.Code, r.Out, want)
	}

	var sfs syscall.Statfs_t
	if err := syscall.Statfs(sub.Dir, &sfs); err != nil || sfs.Blocks == 0 {
		t.Errorf("statfs of the subdir mount: %v (%d blocks)", err, sfs.Blocks)
	}
	if r := mounttest.Run(t, mounttest.Cmd{Args: []string{"umount", sub.Dir}, Limit: time.Minute}); r.Code != 0 || mounttest.IsMounted(sub.Dir) {
		t.Errorf("esfs umount of the subdir mount: status %d\n%s", r.Code, r.Out)
	}
}

// mountEntryOf reads the mount table's type and source for dir.
func mountEntryOf(dir string) (fstype, source string, ok bool) {
	_, fstype, source, ok = mounttest.MountEntry(dir)
	return fstype, source, ok
}

// TestSubdirMountErrors: a missing subdirectory, one that is not a
// directory, a relative path and ".." are refused in one line, before
// anything is mounted; the ESFS_SUBDIR variable works as the flag.
func TestSubdirMountErrors(t *testing.T) {
	f := mounttest.NewFS(t)
	whole := f.Mount(t)
	mounttest.Sh(t, whole.Dir, `mkdir -p projects/a && echo x > projects/file`)
	whole.Sync(t)
	dir := t.TempDir()
	cases := []struct {
		name, subdir string
		code         int
		want         string
	}{
		{"missing", "/projects/nope", 1, "no directory /projects/nope in filesystem " + f.Index + ": create it first (mkdir on a mount of the whole filesystem)"},
		{"missing parent", "/nope/a", 1, "no directory /nope/a in filesystem"},
		{"a file", "/projects/file", 1, "/projects/file in filesystem " + f.Index + " is a file, not a directory"},
		{"relative", "projects/a", 2, "give the directory's path from the filesystem's root, such as /projects/a"},
		{"dot-dot", "/projects/b/../a", 2, `no ".." in it`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := mounttest.Run(t, mounttest.Cmd{Args: []string{"mount", "--es-url", f.URL, "--index", f.Index, "--subdir", c.subdir, dir}, Limit: time.Minute})
			lines := strings.Split(strings.TrimRight(r.Out, "\n"), "\n")
			if r.Code != c.code || len(lines) != 1 || !strings.Contains(r.Out, c.want) {
				t.Errorf("status %d, output:\n%s\nwant status %d and one line containing %q", r.Code, r.Out, c.code, c.want)
			}
			if mounttest.IsMounted(dir) {
				t.Fatal("a refused mount left a mount behind")
			}
		})
	}
	// The variable, spelled loosely: normalized.
	m := f.MountAt(t, t.TempDir(), []string{"ESFS_SUBDIR=//projects/./a/"})
	if _, src, _ := mountEntryOf(m.Dir); src != "esfs:"+f.Index+":/projects/a" {
		t.Errorf("ESFS_SUBDIR=//projects/./a/: mount source %q", src)
	}
	mounttest.Sh(t, m.Dir, `echo v > v`)
	m.Sync(t)
	if storedIno(t, f, "/projects/a/v") == 0 {
		t.Error("a file made on the ESFS_SUBDIR mount is not at /projects/a/v")
	}
	// --subdir / is the whole filesystem.
	root := f.Mount(t, "--subdir", "/")
	if _, src, _ := mountEntryOf(root.Dir); src != "esfs:"+f.Index {
		t.Errorf("--subdir /: mount source %q, want esfs:%s", src, f.Index)
	}
	if got := listDir(t, root.Dir); strings.Join(got, " ") != "projects" {
		t.Errorf("--subdir / lists %q", got)
	}
}

// TestSubdirCrossMountRename: a mount of the whole filesystem and a
// mount of /p/a rename in the same directories at once (directories
// through the whole mount, files through the subdir mount, and files
// into and out of the subdirectory): the tree locks both take are on the
// stored paths, so nothing is lost or duplicated.
func TestSubdirCrossMountRename(t *testing.T) {
	f := mounttest.NewFS(t)
	whole := f.Mount(t)
	const n = 12
	mounttest.Sh(t, whole.Dir, fmt.Sprintf(`mkdir -p p/a/d p/a/e p/out && for i in $(seq 1 %d); do echo "file $i" > p/a/d/f$i; echo "out $i" > p/out/o$i; done`, n))
	whole.Sync(t)
	sub := f.Mount(t, "--subdir", "/p/a")

	var wg sync.WaitGroup
	var wholeDone, subDone atomic.Int64 // renames that succeeded
	var wholeOver atomic.Bool
	const rounds = 15
	wg.Add(2)
	go func() {
		// The whole mount: moves d and e, the subdir's directories, back
		// and forth, and files from outside into them.
		defer wg.Done()
		defer wholeOver.Store(true)
		for i := 0; i < rounds; i++ {
			count(&wholeDone, os.Rename(whole.Path("p/a/d"), whole.Path("p/a/tmp")))
			count(&wholeDone, os.Rename(whole.Path("p/a/e"), whole.Path("p/a/d")))
			count(&wholeDone, os.Rename(whole.Path("p/a/tmp"), whole.Path("p/a/e")))
			if i < n {
				count(&wholeDone, os.Rename(whole.Path(fmt.Sprintf("p/out/o%d", i+1)), whole.Path(fmt.Sprintf("p/a/d/o%d", i+1))))
			}
		}
	}()
	go func() {
		// The subdir mount: moves files between d and e, and d itself,
		// for as long as the whole mount renames and a few rounds more
		// (while d is away at tmp, its renames fail at once: ENOENT).
		defer wg.Done()
		for after := 0; after < 3; {
			if wholeOver.Load() {
				after++
			}
			for j := 1; j <= n; j += 3 {
				count(&subDone, os.Rename(sub.Path(fmt.Sprintf("d/f%d", j)), sub.Path(fmt.Sprintf("e/f%d", j))))
				count(&subDone, os.Rename(sub.Path(fmt.Sprintf("e/f%d", j+1)), sub.Path(fmt.Sprintf("d/f%d", j+1))))
			}
			count(&subDone, os.Rename(sub.Path("d"), sub.Path("x")))
			count(&subDone, os.Rename(sub.Path("x"), sub.Path("d")))
		}
	}()
	wg.Wait()
	t.Logf("renames done: %d through the whole mount, %d through the subdir mount", wholeDone.Load(), subDone.Load())
	if wholeDone.Load() == 0 || subDone.Load() == 0 {
		t.Error("one of the mounts renamed nothing: the test raced nothing")
	}
	sub.Unmount(t)
	whole.Unmount(t)

	// Every file once, wherever it ended.
	m := f.Mount(t, mounttest.NoCache...)
	files, _, err := mounttest.Walk(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string][]string{}
	for p, c := range files {
		seen[c] = append(seen[c], p)
	}
	for i := 1; i <= n; i++ {
		for _, c := range []string{fmt.Sprintf("file %d\n", i), fmt.Sprintf("out %d\n", i)} {
			if len(seen[c]) != 1 {
				t.Errorf("%q is at %v: want exactly one path", c, seen[c])
			}
		}
	}
	if len(files) != 2*n {
		t.Errorf("%d files, want %d: %v", len(files), 2*n, mounttest.SortedKeys(files))
	}
	m.Unmount(t)
	mounttest.CheckInvariants(t, f, files)
}

// count counts a rename that succeeded; one that failed (its source
// moved away by the other mount meanwhile) is part of the race.
func count(n *atomic.Int64, err error) {
	if err == nil {
		n.Add(1)
	}
}

// TestSubdirGoneWhileMounted: another mount renames the mounted
// subdirectory away, makes a new one at its name, and removes the moved
// one. The subdir mount stays up; what it does after the rename fails
// with ESTALE (or ENOENT once the directory is removed), never lands in
// the new directory at the old name, and never hangs; unmounting works.
func TestSubdirGoneWhileMounted(t *testing.T) {
	f := mounttest.NewFS(t)
	whole := f.Mount(t)
	mounttest.Sh(t, whole.Dir, `mkdir -p p/a/d && echo x > p/a/x`)
	whole.Sync(t)
	for _, how := range []string{"the subdir", "its parent"} {
		t.Run("rename of "+how, func(t *testing.T) {
			mounttest.Sh(t, whole.Dir, `rm -rf p q && mkdir -p p/a/d && echo x > p/a/x`)
			sub := f.Mount(t, "--subdir", "/p/a")
			mounttest.Sh(t, sub.Dir, `ls >/dev/null && cat x >/dev/null && ls d >/dev/null`)
			// Written just before the rename (in memory, under write
			// delegations): it must move with the directory.
			mounttest.Sh(t, sub.Dir, `echo written > w`)
			if how == "the subdir" {
				mounttest.Sh(t, whole.Dir, `mkdir q && mv p/a q/a && mkdir p/a`)
			} else {
				mounttest.Sh(t, whole.Dir, `mv p q && mkdir -p p/a`)
			}
			if data, err := os.ReadFile(whole.Path("q/a/w")); err != nil || string(data) != "written\n" {
				t.Errorf("the file written on the subdir mount before the rename: %q, %v at q/a/w", data, err)
			}
			stale := func(op string, err error) {
				t.Helper()
				if !errors.Is(err, syscall.ESTALE) && !errors.Is(err, syscall.ENOENT) {
					t.Errorf("%s after the rename: %v, want ESTALE or ENOENT", op, err)
				}
				t.Logf("%s: %v", op, err)
			}
			start := time.Now()
			stale("create", os.WriteFile(sub.Path("new"), []byte("lost?"), 0o644))
			stale("mkdir", os.Mkdir(sub.Path("nd"), 0o755))
			stale("rename", os.Rename(sub.Path("x"), sub.Path("x2")))
			stale("unlink", os.Remove(sub.Path("x")))
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("the failing operations took %s", took)
			}
			if storedIno(t, f, "/p/a/new") != 0 || storedIno(t, f, "/p/a/nd") != 0 || storedIno(t, f, "/q/a/new") != 0 {
				t.Error("a change through the stale mount landed in the index")
			}
			if got := listDir(t, whole.Path("p/a")); len(got) != 0 {
				t.Errorf("the new /p/a holds %v, want nothing", got)
			}
			// Remove what was moved away: still no hang, no crash.
			mounttest.Sh(t, whole.Dir, `rm -rf q`)
			_, err := os.ReadDir(sub.Dir)
			stale("listing", err)
			_, err = os.Stat(sub.Path("x"))
			stale("stat", err)
			if sub.Exited() {
				t.Fatalf("the subdir mount died:\n%s", sub.Log())
			}
			sub.Unmount(t)
		})
	}
	whole.Unmount(t)
	mounttest.CheckInvariants(t, f, nil)
}

// TestSubdirHelperOption: -o subdir=DIR, as an fstab line or mount -t
// fuse.esfs passes it, through the helper's command line (the one
// mount.fuse3 runs: esfs SOURCE DIR -o OPTS), mounts that directory in
// the background; esfs umount ends it. The source as the mount table
// shows it (esfs:INDEX:/DIR) mounts the same directory.
func TestSubdirHelperOption(t *testing.T) {
	f := mounttest.NewFS(t)
	whole := f.Mount(t)
	mounttest.Sh(t, whole.Dir, `mkdir -p projects/a && echo in-a > projects/a/f && echo top > top`)
	whole.Sync(t)
	dir := t.TempDir()
	logFile := filepath.Join(t.TempDir(), "esfs.log")
	r := mounttest.Run(t, mounttest.Cmd{Args: []string{"esfs:" + f.Index, dir, "-o", "rw,_netdev,es_url=" + f.URL + ",subdir=/projects/a,log_file=" + logFile}, Limit: 90 * time.Second})
	pid, conn, _ := helperMounted(t, "esfs SOURCE DIR -o subdir=/projects/a", r.Out, r.Code, dir)
	if _, src := mountEntry(dir); src != "esfs:"+f.Index+":/projects/a" {
		t.Errorf("mount source %q, want esfs:%s:/projects/a", src, f.Index)
	}
	if got := listDir(t, dir); strings.Join(got, " ") != "f" {
		t.Errorf("the helper's subdir mount lists %q, want [f]", got)
	}
	if r := mounttest.Run(t, mounttest.Cmd{Args: []string{"umount", dir}, Limit: time.Minute}); r.Code != 0 {
		t.Errorf("esfs umount: status %d\n%s", r.Code, r.Out)
	}
	mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
	// The source as the mount table showed it mounts the same directory
	// (what a user copies from /proc/mounts into fstab).
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"esfs:" + f.Index + ":/projects/a", dir, "-o", "es_url=" + f.URL + ",log_file=" + logFile}, Limit: 90 * time.Second})
	pid, conn, _ = helperMounted(t, "esfs esfs:INDEX:/projects/a DIR", r.Out, r.Code, dir)
	if got := listDir(t, dir); strings.Join(got, " ") != "f" {
		t.Errorf("the mount of source esfs:INDEX:/projects/a lists %q, want [f]", got)
	}
	if r := mounttest.Run(t, mounttest.Cmd{Args: []string{"umount", dir}, Limit: time.Minute}); r.Code != 0 {
		t.Errorf("esfs umount: status %d\n%s", r.Code, r.Out)
	}
	mounttest.EndDaemon(t, pid, conn, dir, 30*time.Second)
	r = mounttest.Run(t, mounttest.Cmd{Args: []string{"esfs:" + f.Index, dir, "-o", "es_url=" + f.URL + ",subdir=/projects/nope,log_file=" + logFile}, Limit: 90 * time.Second})
	if r.Code == 0 || !strings.Contains(r.Out, "no directory /projects/nope in filesystem") || mounttest.IsMounted(dir) {
		t.Errorf("-o subdir=/projects/nope: status %d\n%s", r.Code, r.Out)
	}
}
