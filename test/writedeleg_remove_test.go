package test

// Removals under write delegations (fs/vfs/writeback_remove.go): an unlink of
// a stored file, or an rmdir of a stored empty directory, in a directory
// the mount holds for writing, is made in memory and lands with the batch
// (the name staged as the old side of the batch, its inode dropped once
// the batch commits).

import (
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// storedTree makes, under dir on m, nd directories of nf files each (some
// with a few chunks of data, some empty) and a symlink per directory, and
// flushes them (fsync of dir): every entry is stored, none pending.
func storedTree(t *testing.T, m *mounttest.Mount, dir string, nd, nf int) (entries int) {
	t.Helper()
	if err := os.MkdirAll(m.Path(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < nd; i++ {
		sub := fmt.Sprintf("%s/s%02d", dir, i)
		if err := os.Mkdir(m.Path(sub), 0o755); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < nf; j++ {
			data := []byte(strings.Repeat(fmt.Sprintf("%d.%d ", i, j), 10*j))
			if err := os.WriteFile(m.Path(sub, fmt.Sprintf("f%02d", j)), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Symlink("f00", m.Path(sub, "link")); err != nil {
			t.Fatal(err)
		}
		entries += nf + 2
	}
	fsyncDir(t, m.Path(dir))
	return entries
}

func fsyncDir(t *testing.T, dir string) {
	t.Helper()
	fd, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if err := fd.Sync(); err != nil {
		t.Fatalf("fsync %s: %v", dir, err)
	}
}

// fsckCounts returns the paths, inodes and data chunks esfs fsck counts.
func fsckCounts(t *testing.T, f *mounttest.FS) (paths, inodes, chunks int) {
	t.Helper()
	out, err := f.Run("fsck", "--no-wait")
	if err != nil {
		t.Fatalf("esfs fsck: %v\n%s", err, out)
	}
	if _, err := fmt.Sscanf(out, "%d paths, %d inodes, %d data chunks", &paths, &inodes, &chunks); err != nil {
		t.Fatalf("esfs fsck's first line: %v\n%s", err, out)
	}
	return paths, inodes, chunks
}

// TestWriteDelegationsRemoveStoredInMemory: rm -rf of a stored tree the
// mount made costs no request per entry (the directory's lease aside), and
// its flush a batch; another mount that looks in right after rm returns
// sees none of it, and the index keeps no path, inode, data chunk or lock
// document of what went. A file removed and made again by the same name
// lands as the new file; a file open here when it is unlinked is left to
// the synchronous path and stays readable through its descriptor.
func TestWriteDelegationsRemoveStoredInMemory(t *testing.T) {
	f := mounttest.NewFS(t)
	m, metrics := writerMount(t, f, nil)
	paths0, inodes0, chunks0 := fsckCounts(t, f)
	n := storedTree(t, m, "d/t", 6, 8)
	if err := os.WriteFile(m.Path("d", "keep"), []byte("kept\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path("d", "again"), []byte("first\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path("d", "open"), []byte("still readable\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fsyncDir(t, m.Path("d"))
	// Read once, so that the delegation holds every directory's listing
	// (rm reads them itself too).
	if out, err := exec.Command("ls", "-lR", m.Path("d")).CombinedOutput(); err != nil {
		t.Fatalf("ls -lR: %v\n%s", err, out)
	}
	landed := batchesLanded(t, metrics)
	before, counts := foregroundRequests(t, metrics), requestCounts(t, metrics)
	if out, err := exec.Command("rm", "-rf", m.Path("d", "t")).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf: %v\n%s", err, out)
	}
	cost := foregroundRequests(t, metrics) - before
	logRequests(t, metrics, counts)
	removes := mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_pending_removes_total")
	t.Logf("rm -rf of %d stored entries: %v requests, %v removed in memory, %v batches landed meanwhile", n+1, cost, removes, batchesLanded(t, metrics)-landed)
	// d/t itself is in d, which is write-delegated too: every entry goes
	// in memory.
	if removes != float64(n+1) {
		t.Errorf("%v entries removed in memory, want all %d", removes, n+1)
	}
	// Each directory costs its lease (its shared locks and a check of
	// where it is) and the reads of its own attributes; the synchronous
	// path costs at least three requests per entry.
	if cost >= float64(n+1) {
		t.Errorf("rm -rf of %d stored entries cost %v requests; want fewer than one per entry (only the directories' leases)", n+1, cost)
	}
	if batchesLanded(t, metrics) != landed {
		t.Errorf("a batch landed during rm -rf; want the removals in memory until someone asks")
	}
	if _, err := os.Lstat(m.Path("d", "t")); !os.IsNotExist(err) {
		t.Errorf("d/t after rm -rf on the writer: %v", err)
	}

	// Removed and made again: the removal lands first, then the new file.
	if err := os.Remove(m.Path("d", "again")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m.Path("d", "again"), []byte("second\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Open while unlinked: the synchronous path keeps it to its last close.
	fh, err := os.Open(m.Path("d", "open"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.Path("d", "open")); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile("/proc/self/fd/" + fmt.Sprint(fh.Fd())); err != nil || string(data) != "still readable\n" {
		t.Errorf("an unlinked file open here reads %q, %v", data, err)
	}
	fh.Close()

	b := mounttest.MountUncached(t, f, nil)
	if got := strings.Join(listing(b.Path("d")), " "); got != "again keep" {
		t.Fatalf("the other mount lists %q in d right after rm -rf, want \"again keep\"", got)
	}
	if data, err := os.ReadFile(b.Path("d", "again")); err != nil || string(data) != "second\n" {
		t.Errorf("d/again on the other mount: %q, %v; want the second file", data, err)
	}
	// What went left nothing behind: the same paths, inodes and chunks as
	// before the tree was made, plus d, keep and again (one chunk each for
	// keep and again).
	mounttest.WaitFor(t, "the removed inodes and data to go", 30*time.Second, func() bool {
		p, i, c := fsckCounts(t, f)
		return p == paths0+3 && i == inodes0+3 && c == chunks0+2
	})
	mounttest.FsckClean(t, f)
	// The shared locks the removals were made under are leases, which the
	// writer gives back shareLinger (300 ms) after the batch that used
	// them landed: what must not happen is that they stay.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err := f.Run("locks")
		if err != nil {
			t.Fatalf("esfs locks: %v\n%s", err, out)
		}
		if !strings.Contains(out, "/d/t") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("esfs locks still lists a lock of the removed tree 20s after it went:\n%s", out)
		}
	}
}

// TestWriteDelegationsCrashDuringRemoveFlush: the writer dies (kill -9) at
// each step of a batch that removes stored entries (files, a symlink, a
// directory and its files), renames stored files (to a new name, and over
// another stored file) and makes new ones. Another mount sees the
// tree before the batch or after it, never a mix, and once the dead
// writer's work is recovered the removed inodes and their data are gone
// (committed) or all there (rolled back): fsck finds the index clean.
func TestWriteDelegationsCrashDuringRemoveFlush(t *testing.T) {
	for _, c := range []struct {
		point     string
		committed bool
	}{{"batch-after-record", false}, {"batch-before-commit", false}, {"batch-after-commit", true}} {
		t.Run(c.point, func(t *testing.T) {
			f := mounttest.NewFS(t)
			a, _ := writerMount(t, f, []string{"ESFS_CRASH_POINT=removing-" + c.point})
			storedTree(t, a, "d", 3, 4)
			before := []string{"s00", "s01", "s02"}
			// One batch: the whole of s01 goes, f00 and link of s00 go,
			// and s00 gains a file.
			if out, err := exec.Command("rm", "-rf", a.Path("d", "s01")).CombinedOutput(); err != nil {
				t.Fatalf("rm -rf: %v\n%s", err, out)
			}
			for _, name := range []string{"f00", "link"} {
				if err := os.Remove(a.Path("d", "s00", name)); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(a.Path("d", "s00", "new"), []byte("new"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(a.Path("d", "s02", "f00"), a.Path("d", "s02", "moved")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(a.Path("d", "s02", "f01"), a.Path("d", "s02", "f02")); err != nil {
				t.Fatal(err)
			}
			after := []string{"s00", "s02"}
			s00before := []string{"f00", "f01", "f02", "f03", "link"}
			s00after := []string{"f01", "f02", "f03", "new"}
			s02before := s00before
			s02after := []string{"f02", "f03", "link", "moved"}
			crashFlushing(t, a, "d", "removing-"+c.point)
			b := mounttest.MountUncached(t, f, nil)
			wantD, wantS00, wantS02 := before, s00before, s02before
			wantF02 := strings.Repeat("2.2 ", 20) // d/s02/f02's content
			if c.committed {
				wantD, wantS00, wantS02 = after, s00after, s02after
				wantF02 = strings.Repeat("2.1 ", 10) // d/s02/f01's
			}
			same := func(got, want []string) bool {
				sort.Strings(got)
				return strings.Join(got, " ") == strings.Join(want, " ")
			}
			deadline := time.Now().Add(mounttest.RecoveredWithin + 30*time.Second)
			for {
				d, s00, s02 := listing(b.Path("d")), listing(b.Path("d", "s00")), listing(b.Path("d", "s02"))
				mixed := !(same(d, before) && same(s00, s00before) && same(s02, s02before)) &&
					!(same(d, after) && same(s00, s00after) && same(s02, s02after))
				if mixed && d != nil && s00 != nil && s02 != nil {
					t.Fatalf("after a crash at %s the other mount sees part of the batch: d %q, d/s00 %q, d/s02 %q", c.point, d, s00, s02)
				}
				if same(d, wantD) && same(s00, wantS00) && same(s02, wantS02) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after a crash at %s the other mount lists d %q, d/s00 %q, d/s02 %q (committed: %v)", c.point, d, s00, s02, c.committed)
				}
				time.Sleep(200 * time.Millisecond)
			}
			if data, err := os.ReadFile(b.Path("d", "s02", "f02")); err != nil || string(data) != wantF02 {
				t.Errorf("d/s02/f02 after the batch (committed: %v): %q, %v; want %q", c.committed, data, err, wantF02)
			}
			if !c.committed {
				if got := listing(b.Path("d", "s01")); len(got) != 5 {
					t.Errorf("d/s01 after the rolled-back batch lists %q, want its 4 files and link", got)
				}
				if data, err := os.ReadFile(b.Path("d", "s00", "f00")); err != nil || string(data) != "" {
					t.Errorf("d/s00/f00 after the rolled-back batch: %q, %v", data, err)
				}
			}
			mounttest.FsckCleanAfterCrash(t, f, mounttest.RecoveredWithin+30*time.Second)
			// Recovered: every inode has a name, every chunk an inode.
			p, i, _ := fsckCounts(t, f)
			if p != i {
				t.Errorf("after recovery: %d paths, %d inodes", p, i)
			}
		})
	}
}

// TestWriteDelegationsRenameStoredInMemory: renames of stored files in a
// write-delegated directory, to new names and over other stored files,
// and unlinks of renamed ones, cost no request per call; another mount
// that looks in right after sees every one of them, with the right
// contents, and the replaced and removed files' inodes and data are gone.
func TestWriteDelegationsRenameStoredInMemory(t *testing.T) {
	f := mounttest.NewFS(t)
	m, metrics := writerMount(t, f, nil)
	paths0, inodes0, _ := fsckCounts(t, f)
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		if err := os.WriteFile(m.Path("d", fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsyncDir(t, m.Path("d"))
	listing(m.Path("d"))
	before, counts := foregroundRequests(t, metrics), requestCounts(t, metrics)
	for i := 0; i < 10; i++ {
		if err := os.Rename(m.Path("d", fmt.Sprintf("f%02d", i)), m.Path("d", fmt.Sprintf("g%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 10; i < 15; i++ {
		if err := os.Rename(m.Path("d", fmt.Sprintf("f%02d", i)), m.Path("d", fmt.Sprintf("f%02d", i+5))); err != nil {
			t.Fatal(err)
		}
	}
	// Renamed, then removed: one removal of the old name.
	for i := 0; i < 5; i++ {
		if err := os.Remove(m.Path("d", fmt.Sprintf("g%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	cost := foregroundRequests(t, metrics) - before
	logRequests(t, metrics, counts)
	fams := mounttest.Scrape(t, metrics)
	renames, removes := mounttest.Sample(fams, "esfs_pending_renames_total"), mounttest.Sample(fams, "esfs_pending_removes_total")
	t.Logf("15 renames of stored files and 5 unlinks of renamed ones: %v requests; %v renames, %v removals made in memory", cost, renames, removes)
	if renames != 15 || removes != 5 {
		t.Errorf("%v renames and %v removals made in memory, want all 15 and 5", renames, removes)
	}
	if cost >= 20 {
		t.Errorf("20 renames and unlinks of stored files cost %v requests; want fewer than one per call (only the directory's lease)", cost)
	}
	want := map[string]string{}
	for i := 5; i < 10; i++ {
		want[fmt.Sprintf("g%02d", i)] = fmt.Sprintf("file %d\n", i)
	}
	for i := 15; i < 20; i++ {
		want[fmt.Sprintf("f%02d", i)] = fmt.Sprintf("file %d\n", i-5)
	}
	b := mounttest.MountUncached(t, f, nil)
	if got, w := strings.Join(listing(b.Path("d")), " "), strings.Join(mounttest.SortedKeys(want), " "); got != w {
		t.Fatalf("the other mount lists %q right after the renames, want %q", got, w)
	}
	for name, content := range want {
		if data, err := os.ReadFile(b.Path("d", name)); err != nil || string(data) != content {
			t.Errorf("d/%s on the other mount: %q, %v; want %q", name, data, err, content)
		}
	}
	// The 5 replaced files and the 5 removed went: d and its 10 files
	// are left.
	mounttest.WaitFor(t, "the replaced and removed inodes to go", 30*time.Second, func() bool {
		p, i, _ := fsckCounts(t, f)
		return p == paths0+11 && i == inodes0+11
	})
	mounttest.FsckClean(t, f)
}

// TestWriteDelegationsRemovalsArePrefixes: the writer removes stored files
// one after the other, in name order, flushing at its ordinary pace, while
// another mount lists the directory again and again (each listing recalls
// the writer, whose pending removals land first): every listing shows the
// last names, from some k on, never a name back once it went.
func TestWriteDelegationsRemovalsArePrefixes(t *testing.T) {
	f := mounttest.NewFS(t)
	a := mounttest.MountUncached(t, f, nil, "--write-delegations", "--flush-interval=50ms")
	b := mounttest.MountUncached(t, f, nil)
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := 0; i < n; i++ {
		if err := os.WriteFile(a.Path("d", fmt.Sprintf("f%04d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fsyncDir(t, a.Path("d"))
	done := make(chan struct{})
	var werr error
	go func() {
		defer close(done)
		for i := 0; i < n; i++ {
			if err := os.Remove(a.Path("d", fmt.Sprintf("f%04d", i))); err != nil {
				werr = err
				return
			}
		}
	}()
	lists, lowest := 0, 0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		got := listing(b.Path("d"))
		first := n - len(got)
		for i, name := range got {
			if name != fmt.Sprintf("f%04d", first+i) {
				t.Fatalf("a listing on the other mount is not what is left after the writer's first removals: %d names, #%d is %q", len(got), i, name)
			}
		}
		if first < lowest {
			t.Fatalf("a listing on the other mount shows %d names after one showed %d: a removal came back", len(got), n-lowest)
		}
		lowest = first
		lists++
	}
	if werr != nil {
		t.Fatal(werr)
	}
	if got := listing(b.Path("d")); len(got) != 0 {
		t.Fatalf("after the writer removed everything the other mount lists %d names", len(got))
	}
	t.Logf("%d listings, each what was left", lists)
	mounttest.FsckClean(t, f)
}

// TestWriteDelegationsUpgradeDirectoryHeldAlone: a directory made before
// the mount, which it then reads and changes alone, is upgraded to a
// write delegation after its first change: the following removals are
// made in memory. Another mount that looks in sees all of them at once,
// and its own change there lands after them.
func TestWriteDelegationsUpgradeDirectoryHeldAlone(t *testing.T) {
	f := mounttest.NewFS(t)
	old := mounttest.MountUncached(t, f, nil)
	if err := os.Mkdir(old.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 30
	for i := 0; i < n; i++ {
		if err := os.WriteFile(old.Path("d", fmt.Sprintf("f%02d", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old.Unmount(t)
	a, metrics := writerMount(t, f, nil)
	held := func(mode string) float64 {
		return mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_delegations_held", "mode", mode)
	}
	mounttest.WaitFor(t, "a read delegation on d", 10*time.Second, func() bool {
		listing(a.Path("d"))
		return held("read") >= 2 // the root and d
	})
	if err := os.Remove(a.Path("d", "f00")); err != nil {
		t.Fatal(err)
	}
	mounttest.WaitFor(t, "the upgrade of d to a write delegation", 10*time.Second, func() bool { return held("write") >= 1 })
	for i := 1; i < n; i++ {
		if err := os.Remove(a.Path("d", fmt.Sprintf("f%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	if removes := mounttest.Sample(mounttest.Scrape(t, metrics), "esfs_pending_removes_total"); removes != n-1 {
		t.Errorf("%v removals made in memory after the upgrade, want %d", removes, n-1)
	}
	b := mounttest.MountUncached(t, f, nil)
	if got := listing(b.Path("d")); len(got) != 0 {
		t.Fatalf("the other mount lists %q in d right after the removals", got)
	}
	if err := os.WriteFile(b.Path("d", "f00"), []byte("B's"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(listing(a.Path("d")), " "); got != "f00" {
		t.Fatalf("the writer lists %q after the other mount's create", got)
	}
	mounttest.FsckClean(t, f)
}

// TestWriteDelegationsMadeAndRemovedLeaseGoes: a file made and removed in
// memory before a flush leaves nothing to flush, and the lease its create
// took on the directory's shared locks (held until the batch lands) was
// never given back: another mount's rename of the directory then waited
// for it its whole --lock-timeout and failed with EAGAIN, as long as the
// writer lived (the campaign's stuck-lock, seed 814943796). The recall's
// flush, finding nothing, gives the lease back now.
func TestWriteDelegationsMadeAndRemovedLeaseGoes(t *testing.T) {
	f := mounttest.NewFS(t)
	a, _ := writerMount(t, f, nil)
	b := f.Mount(t, "--lock-timeout=10s")
	if err := os.Mkdir(a.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	dir, err := os.Open(a.Path("d"))
	if err != nil {
		t.Fatal(err)
	}
	if err := dir.Sync(); err != nil { // d is stored, and still a's to write
		t.Fatal(err)
	}
	dir.Close()
	if err := os.WriteFile(a.Path("d", "f"), []byte("brief\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(a.Path("d", "f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(b.Path("d"), b.Path("e")); err != nil {
		t.Fatalf("renaming, on another mount, the directory where a file was made and removed in memory: %v", err)
	}
	if _, err := os.Stat(a.Path("e")); err != nil {
		t.Errorf("the writer does not see the renamed directory: %v", err)
	}
}
