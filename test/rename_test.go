package test

// Renames seen from other mounts: appends during a directory rename, a
// stale working directory, git's rename-over-file commits from two mounts,
// a copy right after a rename, maximal paths and raw names, mv of a large
// directory, and listings that show the old name or the new, never
// neither. (Races: rename_race_test.go; crashes: crash_test.go.)

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// crQ quotes s for bash.
func crQ(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestRenameDirWhileAppendingLosesNothing: one mount appends
// continuously to files in a directory, through a held-open descriptor and
// by opening the path for each append, while another mount renames the
// directory back and forth. Nothing acknowledged may be lost: sizes and
// data are keyed by inode, so a write never races the rename's rewrite of
// the path documents.
func TestRenameDirWhileAppendingLosesNothing(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil)
	b := mounttest.MountUncached(t, f, nil)
	if err := os.Mkdir(a.Path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	held, err := os.OpenFile(a.Path("dir", "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	var heldData, pathData bytes.Buffer
	var heldErr error
	var pathFails []string
	wg.Add(2)
	go func() { // the held-open appender, fsync every 10 lines
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			line := fmt.Sprintf("held %06d\n", i)
			if _, err := held.WriteString(line); err != nil {
				heldErr = fmt.Errorf("write %d: %w", i, err)
				return
			}
			heldData.WriteString(line)
			if i%10 == 9 {
				if err := held.Sync(); err != nil {
					heldErr = fmt.Errorf("fsync after %d: %w", i, err)
					return
				}
			}
		}
	}()
	go func() { // open, append, close by path, under whichever name the directory has
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			line := fmt.Sprintf("path %06d\n", i)
			var err error
			for _, dir := range []string{"dir", "moved"} {
				var fh *os.File
				fh, err = os.OpenFile(a.Path(dir, "log2"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
				if err != nil {
					continue
				}
				if _, err = fh.WriteString(line); err != nil {
					fh.Close()
					pathFails = append(pathFails, fmt.Sprintf("write %d: %v", i, err))
					break
				}
				if err = fh.Close(); err != nil {
					pathFails = append(pathFails, fmt.Sprintf("close %d: %v", i, err))
					break
				}
				pathData.WriteString(line)
				break
			}
		}
	}()
	names := []string{"dir", "moved"}
	renames := 0
	for i := 0; i < 8; i++ {
		time.Sleep(250 * time.Millisecond)
		from, to := names[i%2], names[(i+1)%2]
		start := time.Now()
		if err := os.Rename(b.Path(from), b.Path(to)); err != nil {
			t.Errorf("rename %d (%s -> %s) in B: %v", i, from, to, err)
			break
		}
		renames++
		t.Logf("rename %s -> %s took %s", from, to, time.Since(start).Round(time.Millisecond))
	}
	time.Sleep(250 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	if err := held.Close(); err != nil {
		t.Errorf("closing the held-open file: %v", err)
	}
	if heldErr != nil {
		t.Errorf("held-open appender: %v", heldErr)
	}
	if len(pathFails) > 0 {
		t.Errorf("appends by path failed after opening: %s", mounttest.JoinCapped(pathFails, 10))
	}
	final := names[renames%2]
	t.Logf("REPORT %s: %d renames in B; %d bytes appended through a held descriptor, %d bytes by path; final name %s",
		t.Name(), renames, heldData.Len(), pathData.Len(), final)
	want := mounttest.NewTree()
	want.Files[final+"/log"] = heldData.String()
	want.Files[final+"/log2"] = pathData.String()
	for _, m := range []*mounttest.Mount{b, a} {
		if probs := mounttest.VerifyEventually(m, want, "", true); len(probs) > 0 {
			t.Errorf("through %s:\n  %s", m.Dir, mounttest.JoinCapped(probs, 10))
		}
	}
	mounttest.FinalCheck(t, f, b, want)
}

// TestRenameStaleCwdCreateNeverLandsInNewDir: a shell in another mount
// has its cwd in /a; this mount runs `mv /a /z; mkdir /a`; the shell's
// `touch x` must fail with ESTALE or land in /z, never in the new /a.
// Checked for an uncached mount and for one with the default caches.
func TestRenameStaleCwdCreateNeverLandsInNewDir(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil)
	b := mounttest.MountUncached(t, f, nil)
	c := f.MountAt(t, t.TempDir(), nil, "--lease", mounttest.Lease.String()) // default caches
	for round, m := range []*mounttest.Mount{b, c} {
		dirA, dirZ := fmt.Sprintf("a%d", round), fmt.Sprintf("z%d", round)
		if err := os.Mkdir(a.Path(dirA), 0o755); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second) // the documented staleness bound, so m sees /a
		cmd := exec.Command("bash", "-c", `read _; touch x; echo "touch rc=$?"`)
		cmd.Dir = m.Path(dirA)
		in, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(m.Path(dirA), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(a.Path(dirA), a.Path(dirZ)); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(a.Path(dirA), 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(in)
		in.Close()
		_ = cmd.Wait()
		nfd, oerr := unix.Openat(fd, "y", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if oerr == nil {
			unix.Close(nfd)
		}
		unix.Close(fd)
		shell := strings.TrimSpace(out.String())
		t.Logf("REPORT %s (%s): shell in the old /%s: %q; openat(dirfd of the old /%s, \"y\", O_CREAT): %s",
			t.Name(), map[int]string{0: "uncached", 1: "default caches"}[round], dirA, shell, dirA, mounttest.Errno(oerr))
		if !strings.Contains(shell, "touch rc=0") && !strings.Contains(shell, "Stale file handle") {
			t.Errorf("touch in a stale cwd: %q; want success in /%s or ESTALE", shell, dirZ)
		}
		if oerr != nil && !errors.Is(oerr, syscall.ESTALE) {
			t.Errorf("openat in a stale directory: %v, want ESTALE (or success in /%s)", oerr, dirZ)
		}
		// Wherever they went, never into the new /a.
		for _, n := range []string{"x", "y"} {
			if _, err := os.Lstat(a.Path(dirA, n)); err == nil {
				t.Errorf("%s, created in the stale cwd, landed in the new /%s", n, dirA)
			}
		}
		for n, ok := range map[string]bool{"x": strings.Contains(shell, "touch rc=0"), "y": oerr == nil} {
			if _, err := os.Lstat(a.Path(dirZ, n)); (err == nil) != ok {
				t.Errorf("%s in /%s: %v, but its create reported success=%v", n, dirZ, err, ok)
			}
		}
	}
	probs, orphans, _ := mounttest.IndexProblems(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index: %s %s", mounttest.JoinCapped(probs, 10), mounttest.JoinCapped(orphans, 10))
	}
	mounttest.CheckInvariants(t, f, nil)
}

// TestRenameOverFileGitCommitsFromTwoMounts: one repository,
// committed to alternately from two mounts (index.lock -> index, ref locks:
// renames over existing files), then git fsck and a clean status from both.
func TestRenameOverFileGitCommitsFromTwoMounts(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil)
	b := mounttest.MountUncached(t, f, nil)
	env := "export HOME=" + crQ(t.TempDir()) + " GIT_CONFIG_NOSYSTEM=1 GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'\n"
	start := time.Now()
	mounttest.Sh(t, a.Dir, env+`mkdir repo && git -C repo init -q -b main
git -C repo config user.name 'Esfs Test'
git -C repo config user.email test@esfs.invalid
git -C repo config gc.auto 0
git -C repo config maintenance.auto false`) // no background gc: it only costs time here
	const rounds = 10
	for i := 0; i < rounds; i++ {
		if i > 0 && i%5 == 0 {
			t.Logf("%d rounds in %s", i, time.Since(start).Round(100*time.Millisecond))
		}
		for _, m := range []struct {
			mt   *mounttest.Mount
			name string
		}{{a, "a"}, {b, "b"}} {
			mounttest.Sh(t, m.mt.Dir, env+fmt.Sprintf(`printf '%%s\n' %s-%d > repo/%s-%d.txt
echo %s-%d >> repo/shared.txt
git -C repo add -A
git -C repo commit -q -m %s-%d`, m.name, i, m.name, i, m.name, i, m.name, i))
		}
	}
	for _, m := range []*mounttest.Mount{a, b} {
		mounttest.Sh(t, m.Dir, env+"git -C repo fsck --full --strict --no-progress")
		if st := mounttest.Sh(t, m.Dir, env+"git -C repo status --porcelain"); st != "" {
			t.Errorf("git status through %s:\n%s", m.Dir, st)
		}
		if n := strings.Count(mounttest.Sh(t, m.Dir, env+"git -C repo log --format=%s"), "\n"); n != 2*rounds {
			t.Errorf("git log through %s shows %d commits, want %d", m.Dir, n, 2*rounds)
		}
	}
	t.Logf("REPORT %s: %d commits alternating between two mounts + fsck in %s", t.Name(), 2*rounds, time.Since(start).Round(100*time.Millisecond))
	probs, orphans, notes := mounttest.IndexProblems(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index after the git loop: %s\n  %s", mounttest.JoinCapped(probs, 10), mounttest.JoinCapped(orphans, 10))
	}
	if len(notes) > 0 {
		t.Logf("REPORT %s: leaks: %s", t.Name(), strings.Join(notes, "; "))
	}
	mounttest.CheckInvariants(t, f, nil)
}

// TestRenameDirThenCopyFromOtherMountIsComplete: right after a
// directory rename returns on one mount, another (uncached) mount copies
// the new path with cp -r; the copy must be the whole tree.
func TestRenameDirThenCopyFromOtherMountIsComplete(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil)
	b := mounttest.MountUncached(t, f, nil)
	local := filepath.Join(t.TempDir(), "tree")
	for i, n := range mounttest.Names(150) {
		p := filepath.Join(local, fmt.Sprintf("l%d", i%3), n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(mounttest.Content(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mounttest.Sh(t, "/", "cp -r "+crQ(local)+" "+crQ(a.Path("n0")))
	time.Sleep(1500 * time.Millisecond) // the copy itself is refreshed, whatever the rename does
	var report []string
	failed := 0
	for round := 1; round <= 4; round++ {
		from, to := fmt.Sprintf("n%d", round-1), fmt.Sprintf("n%d", round)
		if err := os.Rename(a.Path(from), a.Path(to)); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "copy")
		cp := mounttest.Exec(time.Minute, "/", "cp", "-r", b.Path(to), dst)
		diff := mounttest.Exec(time.Minute, "/", "diff", "-r", local, dst)
		missing := strings.Count(diff.Out, "Only in "+local)
		// How long until B's listing of the new directory is complete.
		lag := time.Duration(0)
		for s := time.Now(); ; time.Sleep(20 * time.Millisecond) {
			es, err := os.ReadDir(b.Path(to))
			if err == nil && len(es) == 3 {
				lag = time.Since(s) + cp.Took
				break
			}
			if time.Since(s) > 10*time.Second {
				lag = -1
				break
			}
		}
		report = append(report, fmt.Sprintf("round %d: cp %v, diff: %d entries missing from the copy; B lists the new directory completely %s after the rename returned",
			round, mounttest.Errno(cp.Err), missing, lag.Round(10*time.Millisecond)))
		if cp.Err != nil || diff.Err != nil {
			failed++
			t.Errorf("round %d: cp -r of %s right after the rename: %v %s\ndiff -r against the tree: %s", round, to, cp.Err,
				strings.TrimSpace(cp.Out), mounttest.JoinCapped(strings.Split(strings.TrimSpace(diff.Out), "\n"), 8))
		}
	}
	t.Logf("REPORT %s: %d of 4 copies incomplete:\n  %s", t.Name(), failed, strings.Join(report, "\n  "))
}

// crOpenDir opens the directory at the components below base, one openat
// at a time (the whole path may exceed PATH_MAX).
func crOpenDir(base string, comps []string) (int, error) {
	fd, err := unix.Open(base, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, err
	}
	for _, c := range comps {
		nfd, err := unix.Openat(fd, c, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("openat %q: %w", c, err)
		}
		fd = nfd
	}
	return fd, nil
}

// crReadAt reads file name in the directory at base/comps.
func crReadAt(base string, comps []string, name string) (string, error) {
	dfd, err := crOpenDir(base, comps)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY, 0)
	if err != nil {
		return "", fmt.Errorf("openat %q: %w", name, err)
	}
	fh := os.NewFile(uintptr(fd), name)
	defer fh.Close()
	b, err := io.ReadAll(fh)
	return string(b), err
}

// TestRenameDirWithMaxPathAndRawNames: a directory
// holding a 4096-byte path and names that are not UTF-8 (or that a lossy
// encoding would merge) is renamed; everything must be found at the new
// path. A rename that would push the deep path past 4096 bytes must fail
// cleanly or keep everything reachable.
func TestRenameDirWithMaxPathAndRawNames(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil)
	b := mounttest.MountUncached(t, f, nil)
	var deep []string
	for k := 0; k < 15; k++ {
		c := fmt.Sprintf("%02d", k) + strings.Repeat("x", 253)
		if k == 7 {
			c = "\xff" + c[1:]
		}
		deep = append(deep, c)
	}
	leaf := strings.Repeat("f", 4096-len("/d")-15*256-1) // "/d/<15 x 255>/<leaf>" is exactly 4096 bytes
	if n := len("/d/" + strings.Join(deep, "/") + "/" + leaf); n != store.MaxPath {
		t.Fatalf("deep path is %d bytes", n)
	}
	raw := []string{"a\xffb", "a\xfeb", "\xff", "caf\xe9", "\xef\xbf\xbd", "\xf4\x8f\xbe\x80", "plain"}
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range raw {
		if err := os.WriteFile(a.Path("d", n), []byte(fmt.Sprintf("%x\n", n)), 0o644); err != nil {
			t.Fatalf("creating %q: %v", n, err)
		}
	}
	dfd, err := crOpenDir(a.Path("d"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range deep {
		if err := unix.Mkdirat(dfd, c, 0o755); err != nil {
			t.Fatalf("mkdirat: %v", err)
		}
		nfd, err := unix.Openat(dfd, c, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(dfd)
		if err != nil {
			t.Fatal(err)
		}
		dfd = nfd
	}
	lfd, err := unix.Openat(dfd, leaf, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
	unix.Close(dfd)
	if err != nil {
		t.Fatalf("creating the 4096-byte path: %v", err)
	}
	if _, err := unix.Write(lfd, []byte("deep\n")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Close(lfd); err != nil {
		t.Fatal(err)
	}

	check := func(m *mounttest.Mount, dir string) []string {
		var probs []string
		es, err := os.ReadDir(m.Path(dir))
		if err != nil {
			return []string{fmt.Sprintf("listing %s: %v", dir, err)}
		}
		got := map[string]bool{}
		for _, e := range es {
			got[e.Name()] = true
		}
		for _, n := range append(append([]string{}, raw...), deep[0]) {
			if !got[n] {
				probs = append(probs, fmt.Sprintf("%s: %q not listed", dir, n))
			}
		}
		if len(es) != len(raw)+1 {
			probs = append(probs, fmt.Sprintf("%s lists %d entries, want %d", dir, len(es), len(raw)+1))
		}
		for _, n := range raw {
			if b, err := os.ReadFile(m.Path(dir, n)); err != nil || string(b) != fmt.Sprintf("%x\n", n) {
				probs = append(probs, fmt.Sprintf("%s/%q: %q %v", dir, n, b, err))
			}
		}
		if s, err := crReadAt(m.Path(dir), deep, leaf); err != nil || s != "deep\n" {
			probs = append(probs, fmt.Sprintf("the deep file below %s: %q %v", dir, s, err))
		}
		return probs
	}
	// Listings of another mount's changes lag the refresh interval (README
	// "Consistency model"; TestRenameDirThenCopyFromOtherMountIsComplete is about that):
	// here allow the documented bound.
	eventually := func(m *mounttest.Mount, dir string) []string {
		var probs []string
		for start := time.Now(); time.Since(start) < mounttest.StaleWithin; time.Sleep(100 * time.Millisecond) {
			if probs = check(m, dir); len(probs) == 0 {
				break
			}
		}
		return probs
	}
	if probs := eventually(b, "d"); len(probs) > 0 {
		t.Fatalf("before the rename:\n  %s", mounttest.JoinCapped(probs, 10))
	}
	if err := os.Rename(b.Path("d"), b.Path("e")); err != nil {
		t.Fatalf("renaming d to e: %v", err)
	}
	for _, m := range []*mounttest.Mount{a, b} {
		if probs := eventually(m, "e"); len(probs) > 0 {
			t.Errorf("after renaming d to e, through %s:\n  %s", m.Dir, mounttest.JoinCapped(probs, 10))
		}
	}
	// One byte longer: the deep path would be 4097 bytes.
	err = os.Rename(a.Path("e"), a.Path("ee"))
	t.Logf("REPORT %s: renaming e to ee (deep path would be 4097 bytes): %s", t.Name(), mounttest.Errno(err))
	final := "e"
	if err == nil {
		final = "ee"
	} else if !errors.Is(err, syscall.ENAMETOOLONG) {
		t.Errorf("renaming e to ee: %v, want ENAMETOOLONG (or success with everything reachable)", err)
	}
	for _, m := range []*mounttest.Mount{a, b} {
		if probs := eventually(m, final); len(probs) > 0 {
			t.Errorf("after renaming e to ee (%v), through %s:\n  %s", err, m.Dir, mounttest.JoinCapped(probs, 10))
		}
	}
	probs, orphans, _ := mounttest.IndexProblems(t, f, true)
	if len(probs)+len(orphans) > 0 {
		t.Errorf("index: %s\n  %s", mounttest.JoinCapped(probs, 10), mounttest.JoinCapped(orphans, 10))
	}
	mounttest.CheckInvariants(t, f, nil)
}

// TestRenameLargeDirWithMv renames a directory of 5,000 files (some in
// subdirectories) into another directory with mv. One file in ten has
// content (for diff to compare); every entry must keep its inode number,
// which catches any mix-up of paths and inodes, empty files included.
// With -short the directory has 1,000 files.
func TestRenameLargeDirWithMv(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	total := 5000
	if testing.Short() {
		total = 1000
	}
	files := map[string][]byte{}
	for i := 0; i < total; i++ {
		p := fmt.Sprintf("file-%04d", i)
		if i >= total*4/5 {
			p = fmt.Sprintf("sub-%d/nested-%04d", i%10, i)
		}
		var b []byte
		if i%10 == 3 {
			b = []byte(strings.Repeat(p+"\n", i%7+1))
		}
		files[p] = b
	}
	local := filepath.Join(t.TempDir(), "big")
	if err := os.Mkdir(local, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.WriteTree(t, local, files, 1)
	old := m.Path("big")
	if err := os.Mkdir(old, 0o755); err != nil {
		t.Fatal(err)
	}
	mounttest.Step(t, fmt.Sprintf("writing %d files into the mount", total), func() { mounttest.WriteTree(t, old, files, 8) })
	inodes := "find . -printf '%i %y %P\\n' | LC_ALL=C sort"
	before := mounttest.Sh(t, old, inodes)
	if n := mounttest.CountLines(mounttest.Sh(t, old, "find . -type f")); n != total {
		t.Fatalf("find before the move: %d files, want %d", n, total)
	}
	if err := os.Mkdir(m.Path("dest"), 0o755); err != nil {
		t.Fatal(err)
	}
	moved := m.Path("dest", "moved")
	mounttest.Step(t, "mv of the directory", func() { mounttest.Sh(t, "/", "mv "+mounttest.Quote(old)+" "+mounttest.Quote(moved)) })

	if _, err := os.Lstat(old); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("lstat of the old path after mv: %v, want ENOENT", err)
	}
	if _, err := os.Lstat(filepath.Join(old, "file-0001")); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("lstat of a file below the old path after mv: %v, want ENOENT", err)
	}
	if got := mounttest.Sh(t, m.Dir, "ls -A"); got != "dest\n" {
		t.Errorf("ls -A of the mount after mv: %q, want only dest", got)
	}
	mounttest.Step(t, "diff -r", func() { mounttest.DiffTrees(t, local, moved) })
	mounttest.SameLines(t, "inode numbers and types after the move", strings.Split(before, "\n"), strings.Split(mounttest.Sh(t, moved, inodes), "\n"))
	if n := mounttest.CountLines(mounttest.Sh(t, moved, "find . -type f")); n != total {
		t.Errorf("find after the move: %d files, want %d", n, total)
	}
	// The index: nothing left under the old path, everything under the new.
	if n := mounttest.CountPaths(t, f, "/big"); n != 0 {
		t.Errorf("the path index still holds %d documents under /big", n)
	}
	if n := mounttest.CountPaths(t, f, "/dest/moved"); n != total+11 {
		t.Errorf("the path index holds %d documents under /dest/moved, want %d", n, total+11)
	}
	mounttest.FsckClean(t, f)
}

// TestRenameListedAtomicallyByOtherMount: readers see a rename atomically, old
// paths before its commit point and new ones after, never neither (the commit
// point is one compare-and-set of the record). A listing is a search, so another mount may list a
// slightly old state (README: up to the refresh interval), but never a
// state that did not exist: right after `mv c a/c2` on mount B returned,
// mount A (no caches) must list c in the round directory or c2 in a.
func TestRenameListedAtomicallyByOtherMount(t *testing.T) {
	rounds := mounttest.Rounds(t, 5)
	f := mounttest.NewFS(t)
	a := mounttest.MountLocking(t, f, "tree", false)
	b := mounttest.MountLocking(t, f, "tree", false)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	names := func(dir string) map[string]bool {
		es, err := os.ReadDir(dir)
		if err != nil {
			t.Errorf("listing %s: %v", dir, err)
		}
		out := map[string]bool{}
		for _, e := range es {
			out[e.Name()] = true
		}
		return out
	}
	neither := 0
	for i := 0; i < rounds; i++ {
		r := fmt.Sprintf("/r%02d", i)
		mounttest.MakeTree(t, b.Path(r), map[string]string{"/a/": "", "/c/": "", "/c/g": "g"})
		if err := f.Store.Refresh(ctx, store.SearchedPaths); err != nil {
			t.Fatal(err)
		}
		if err := mounttest.Rename(b.Path(r, "c"), b.Path(r, "a", "c2")); err != nil {
			t.Fatal(err)
		}
		old, moved := names(a.Path(r))["c"], names(a.Path(r, "a"))["c2"]
		if !old && !moved {
			neither++
			t.Errorf("%s: right after mv c a/c2 on another mount, the listings show c neither in %s nor as a/c2", r, r)
		}
	}
	t.Logf("%d of %d rounds listed the renamed directory in neither place", neither, rounds)
	a.Unmount(t)
	b.Unmount(t)
	mounttest.CheckInvariants(t, f, nil)
}

// TestRenameSeenAtOnceByOtherMount: a file's rename is answered at its
// commit point, its finish (the old name's document deleted) following
// in the background. Another mount that looks right after the answer sees
// the new name and not the old one, every time, whether it read the
// directory before (a delegation, recalled) or not, and whether it looks
// up the old name or lists the directory, and for a file of two links.
func TestRenameSeenAtOnceByOtherMount(t *testing.T) {
	f := mounttest.NewFS(t)
	a, b := f.Mount(t), f.Mount(t)
	const n = 30
	if err := os.Mkdir(a.Path("h"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if err := os.WriteFile(a.Path("h", fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := os.ReadDir(b.Path("h")); err != nil { // b holds h's names
			t.Fatal(err)
		}
		if _, err := os.Stat(b.Path("h", fmt.Sprintf("f%d", i))); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 { // a file of two links: its attributes are never kept
			if err := os.Link(a.Path("h", fmt.Sprintf("f%d", i)), a.Path("h", fmt.Sprintf("l%d", i))); err != nil {
				t.Fatal(err)
			}
			if _, err := os.ReadFile(b.Path("h", fmt.Sprintf("f%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		dst := a.Path(fmt.Sprintf("g%d", i))
		if i%2 == 1 {
			dst = a.Path("h", fmt.Sprintf("g%d", i))
		}
		if err := os.Rename(a.Path("h", fmt.Sprintf("f%d", i)), dst); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadFile(b.Path("h", fmt.Sprintf("f%d", i))); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("rename %d: the other mount reads the old name right after the rename: %v", i, err)
		}
		if got, err := os.ReadFile(strings.Replace(dst, a.Dir, b.Dir, 1)); err != nil || string(got) != "x" {
			t.Errorf("rename %d: the other mount reads the new name: %q, %v", i, got, err)
		}
		ents, err := os.ReadDir(b.Path("h"))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Name() == fmt.Sprintf("f%d", i) {
				t.Errorf("rename %d: the other mount lists the old name", i)
			}
		}
	}
}

// TestDirRenameAnsweredAtCommitFaults drives the two steps a directory's
// rename takes between its commit point and its answer: the refresh that
// makes the staged subtree searchable, and the move of the link counts of
// the directories it left and joined. Either refused, the rename has
// happened and says so (0), finishing in the call or later from the
// sweeper; another mount lists the new directory whole at once and the old
// one gone, and the counts end right.
func TestDirRenameAnsweredAtCommitFaults(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout=5s", "--write-delegations=false")
	b := mounttest.MountUncached(t, f, nil)
	names := mounttest.Names(30)
	mounttest.Populate(t, f, "/p/src", names, mounttest.Content)
	mounttest.Sh(t, b.Dir, `mkdir q`)
	var refuseRefresh, refuseLinks, staging atomic.Bool
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		refused := false
		switch {
		case bytes.Contains(body, []byte(`"path":"/p/src/`)) && bytes.Contains(body, []byte(`"role":"src"`)):
			// The subtree's stage: the refresh before its scan is past.
			staging.Store(true)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/_refresh"):
			refused = refuseRefresh.Load() && staging.Load()
		case strings.Contains(r.URL.Path, "-locks-W/_doc/") && bytes.Contains(body, []byte(`"dir_links_moved":true`)):
			refused = refuseLinks.Load()
		}
		if refused {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		return refused
	})
	for _, tc := range []struct {
		name     string
		refuse   *atomic.Bool
		src, dst string // renamed, then back
		log      string
	}{
		{"refresh refused", &refuseRefresh, "p/src", "p/dst", "refreshing a renamed directory's staged subtree failed"},
		{"link counts refused", &refuseLinks, "p/dst", "q/dst", "finishing a committed rename failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.refuse.Store(true)
			err := os.Rename(a.Path(tc.src), a.Path(tc.dst))
			tc.refuse.Store(false)
			if err != nil {
				t.Fatalf("rename %s %s: %v; want success (it committed)", tc.src, tc.dst, err)
			}
			if got, err := os.ReadDir(b.Path(tc.dst)); err != nil || len(got) != len(names) {
				t.Errorf("B lists %s right after the rename: %d entries (%v), want %d", tc.dst, len(got), err, len(names))
			}
			if _, err := os.Stat(b.Path(tc.src)); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("B's stat of the old name %s right after the rename: %v, want ENOENT", tc.src, err)
			}
			mounttest.WaitLog(t, a, tc.log, 10*time.Second)
			want := mounttest.NewTree().Add(tc.dst, names)
			want.Dirs["p"], want.Dirs["q"] = true, true
			if _, ok := mounttest.WaitClean(t, f, b, want, time.Now(), 30*time.Second); !ok {
				t.FailNow()
			}
			mounttest.DirLinksAgree(t, b.Dir)
			mounttest.DirLinksAgree(t, a.Dir)
		})
	}
}
