package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/fs/floor"
	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

type benchCase struct {
	group string
	run   func(s *suite)
	named bool // runs only when ESFS_BENCH_ONLY names it (long)
}

var cases = []benchCase{
	{group: "stat", run: benchStat},
	{group: "readdir", run: benchReaddir},
	{group: "create", run: benchCreate},
	{group: "write_read", run: benchWriteRead},
	{group: "rename_file", run: benchRenameFile},
	{group: "rename_dir", run: benchRenameDir},
	{group: "rename_disjoint", run: benchDisjoint},
	{group: "lock_rt", run: benchLockRT},
	{group: "flock_rt", run: benchFlockRT},
	{group: "memory", run: benchMemory},
	{group: "mdtest", run: benchMdtest},
	{group: "real_tools", run: benchRealTools},
	{group: "shared", run: benchShared},
	{group: "data", run: benchData},
	{group: "data_floor", run: benchDataFloor},
	{group: "du", run: benchDu},
	{group: "first_walk", run: benchFirstWalk},
	{group: "scale", run: benchScale, named: true},
	{group: "find", run: benchFind, named: true},
}

// noKernelCache turns the kernel's caches off, so every lookup reaches the
// daemon.
var noKernelCache = []string{"--attr-timeout=0", "--entry-timeout=0", "--negative-timeout=0"}

// rawRoot is where the floors write: no directory document names it, so
// no mount ever lists it.
const rawRoot = "/zz-raw-floor"

func names(n int, prefix string) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%06d", prefix, i)
	}
	return out
}

// turn returns (a, b) on even turns and (b, a) on odd ones, and counts
// the turn: a side that renames back and forth, one repetition each way.
func turn[T any](n *int, a, b T) (T, T) {
	*n++
	if *n%2 == 0 {
		return b, a
	}
	return a, b
}

// rawPopulate writes path documents dir/name for the floors.
func rawPopulate(r *raw, dir string, files []string) {
	items := make([]string, len(files))
	for i, n := range files {
		p := dir + "/" + n
		items[i] = r.createAction(r.prefix, store.DocID(p), pathDoc(p, nextIno(), "file"))
	}
	r.bulk(items, 5000, 4)
	r.refresh()
}

func lstatAll(t testing.TB, paths []string) time.Duration {
	var st unix.Stat_t
	start := time.Now()
	for _, p := range paths {
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatalf("lstat %s: %v", p, err)
		}
	}
	return time.Since(start)
}

func under(root string, ns []string) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = filepath.Join(root, n)
	}
	return out
}

func mountTmpfs(t testing.TB) string {
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64m", "bench", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	return dir
}

func mountFloor(t testing.TB, o vfs.Options, dirs map[string][]string) string {
	dir := t.TempDir()
	fl, err := floor.Mount(dir, o, dirs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fl.Unmount() })
	return dir
}

func benchStat(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	const n = 10000
	ns := names(n, "f")
	mounttest.Populate(t, f, "/s", ns, nil)
	r := newRaw(t, f.Index)

	// stat_hot: every path in the kernel's caches (default timeouts), many
	// passes; the floor is a local tmpfs.
	tmp := mountTmpfs(t)
	if err := os.Mkdir(filepath.Join(tmp, "s"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range under(filepath.Join(tmp, "s"), ns) {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Long kernel timeouts: with the default 1s, a pass over 10k paths
	// outlasts the cache it is meant to measure.
	hot := f.MountAt(t, t.TempDir(), nil, "--attr-timeout=1h", "--entry-timeout=1h")
	const passes = 5
	passesOf := func(paths []string) func() time.Duration {
		return func() time.Duration {
			lstatAll(t, paths) // warm whatever cache the case is about
			var d time.Duration
			for i := 0; i < passes; i++ {
				d += lstatAll(t, paths)
			}
			return d
		}
	}
	as, bs := s.ab(passesOf(under(hot.Path("s"), ns)), passesOf(under(filepath.Join(tmp, "s"), ns)))
	s.add(row{name: "stat_hot", workload: fmt.Sprintf("lstat of %d cached paths × %d passes (mount with 1h kernel timeouts)", n, passes), floor: "same on tmpfs",
		esfs: as, base: bs, target: "≤ 1.5", limit: 1.5})

	// stat_warm: no kernel caching, the daemon's cache holds everything;
	// the floor is a no-op go-fuse filesystem with the same options.
	warm := f.MountAt(t, t.TempDir(), nil, append(noKernelCache, "--cache-ttl=1h")...)
	floor := mountFloor(t, vfs.Options{}, map[string][]string{"s": ns})
	as, bs = s.ab(passesOf(under(warm.Path("s"), ns)), passesOf(under(filepath.Join(floor, "s"), ns)))
	s.add(row{name: "stat_warm", workload: fmt.Sprintf("lstat of %d paths × %d passes, kernel caching off, daemon cache hit", n, passes),
		floor: "no-op go-fuse fs, same options", esfs: as, base: bs, target: "≤ 1.15", limit: 1.15})

	// stat_cold: every cache dropped (a fresh mount with the default
	// options, and the kernel's dentries and inodes dropped), then each
	// path is looked at once. The floor is a no-op FUSE lstat with the
	// same options plus one raw realtime GET per path.
	floorDefault := mountFloor(t, vfs.Options{EntryTimeout: time.Second, AttrTimeout: time.Second, NegativeTimeout: time.Second},
		map[string][]string{"s": ns})
	m := s.n(n)
	as, bs = s.ab(func() time.Duration {
		cold := f.MountAt(t, t.TempDir(), nil)
		defer cold.Unmount(t)
		dropCaches(t)
		return lstatAll(t, under(cold.Path("s"), ns[:m]))
	}, func() time.Duration {
		dropCaches(t)
		d := lstatAll(t, under(filepath.Join(floorDefault, "s"), ns[:m]))
		start := time.Now()
		for _, nm := range ns[:m] {
			r.getPath("/s/" + nm)
		}
		return d + time.Since(start)
	})
	s.add(row{name: "stat_cold", workload: fmt.Sprintf("lstat of %d paths once, on a fresh mount (default options) after dropping the kernel's caches", m),
		floor: "no-op FUSE lstat (same options) + one raw realtime GET each", esfs: as, base: bs, target: "≤ 1.2", limit: 1.2})
}

// ls runs ls with args on dir and returns how long it took and how many
// lines it printed.
func ls(t testing.TB, dir string, args ...string) (time.Duration, int) {
	cmd := exec.Command("ls", append(args, dir)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("ls %v %s: %v", args, dir, err)
	}
	d := time.Since(start)
	return d, bytes.Count(out.Bytes(), []byte("\n"))
}

func benchReaddir(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	sizes := []int{100, s.n(10000), s.n(100000)}
	for _, n := range sizes {
		mounttest.Populate(t, f, fmt.Sprintf("/r%d", n), names(n, "f"), nil)
	}
	m := f.MountAt(t, t.TempDir(), nil)
	// The same trees on the no-op floor with esfs's default kernel
	// timeouts: what `ls -l` costs over `ls -f` on any FUSE filesystem
	// (ls asks for two extended attributes per file).
	floorDirs := map[string][]string{}
	for _, n := range sizes {
		floorDirs[fmt.Sprintf("r%d", n)] = names(n, "f")
	}
	floor := mountFloor(t, vfs.Options{AttrTimeout: time.Second, EntryTimeout: time.Second, NegativeTimeout: time.Second}, floorDirs)
	for _, n := range sizes {
		dir := m.Path(fmt.Sprintf("r%d", n))
		if _, lines := ls(t, dir, "-f"); lines != n+2 {
			t.Fatalf("ls -f of %d entries printed %d lines", n, lines)
		}
		var lsf []time.Duration
		as, bs := s.ab(func() time.Duration { d, _ := ls(t, dir, "-f"); lsf = append(lsf, d); return d },
			func() time.Duration {
				start := time.Now()
				if got := r.scanDir(fmt.Sprintf("/r%d", n), 10000); got != n {
					t.Fatalf("raw scan saw %d of %d", got, n)
				}
				return time.Since(start)
			})
		s.add(row{name: fmt.Sprintf("readdir_%d ls -f", n), workload: fmt.Sprintf("`ls -f` of %d entries", n),
			floor: "raw PIT scan, 10k hits a page", esfs: as, base: bs, target: "≤ 1.3", limit: 1.3})
		var lsl []time.Duration
		for i := 0; i < s.reps; i++ {
			d, _ := ls(t, dir, "-l")
			lsl = append(lsl, d)
		}
		s.add(row{name: fmt.Sprintf("readdir_%d ls -l", n), workload: fmt.Sprintf("`ls -l` of %d entries", n),
			floor: "`ls -f` of the same, same mount", esfs: lsl, base: lsf, target: "≤ 1.2", limit: 1.2})
		fdir := filepath.Join(floor, fmt.Sprintf("r%d", n))
		fl, ff := s.ab(func() time.Duration { d, _ := ls(t, fdir, "-l"); return d }, func() time.Duration { d, _ := ls(t, fdir, "-f"); return d })
		s.add(row{name: fmt.Sprintf("readdir_%d ls -l, floor fs", n), workload: fmt.Sprintf("`ls -l` of %d entries on the no-op floor (for reference)", n),
			floor: "`ls -f` of the same on the floor", esfs: fl, base: ff})
	}
}

// fanOut runs do(0..n-1) on threads goroutines, each taking every
// threads-th index, and returns the wall time; a worker stops at its first
// false.
func fanOut(threads, n int, do func(i int) bool) time.Duration {
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < threads; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < n; i += threads {
				if !do(i) {
					return
				}
			}
		}(w)
	}
	wg.Wait()
	return time.Since(start)
}

func createAll(t testing.TB, paths []string, threads int) time.Duration {
	return fanOut(threads, len(paths), func(i int) bool {
		fd, err := unix.Open(paths[i], unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Errorf("create %s: %v", paths[i], err)
			return false
		}
		unix.Close(fd)
		return true
	})
}

func rawCreateAll(r *raw, dir string, ns []string, threads int) time.Duration {
	return fanOut(threads, len(ns), func(i int) bool {
		p, ino := dir+"/"+ns[i], nextIno()
		body := r.createAction(r.prefix, store.DocID(p), pathDoc(p, ino, "file")) +
			r.createAction(r.prefix+"-inodes", strconv.FormatUint(ino, 10), inodeDoc(ino, "file"))
		r.do("POST", "/_bulk", []byte(body))
		return true
	})
}

func benchCreate(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	m := f.MountAt(t, t.TempDir(), nil)
	n := s.n(10000)
	ns := names(n, "c")
	for _, threads := range []int{1, 8} {
		repA, repB := 0, 0 // each side counts its own repetitions
		as, bs := s.ab(func() time.Duration {
			repA++
			dir := m.Path(fmt.Sprintf("t%d-%d", threads, repA))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			return createAll(t, under(dir, ns), threads)
		}, func() time.Duration {
			repB++
			return rawCreateAll(r, fmt.Sprintf("%s/t%d-%d", rawRoot, threads, repB), ns, threads)
		})
		row := row{name: fmt.Sprintf("create_%dt", threads), workload: fmt.Sprintf("%d creates (open O_CREAT\\|O_EXCL + close), %d thread(s), one directory", n, threads),
			floor: fmt.Sprintf("raw create-if-absent of the path and inode documents, one 2-item `_bulk` each, %d thread(s)", threads), esfs: as, base: bs}
		if threads == 1 {
			row.target, row.limit = "≤ 1.3", 1.3
		} else {
			row.target, row.limit = "≥ 0.8× raw parallel (≤ 1.25)", 1.25
		}
		s.add(row)
	}
}

func dropCaches(t testing.TB) {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o200); err != nil {
		t.Logf("dropping the page cache: %v", err)
	}
}

func benchWriteRead(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	m := f.MountAt(t, t.TempDir(), nil)
	size := 256 << 20
	if s.scale != "full" {
		size = 64 << 20
	}
	data := make([]byte, size)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	const chunk = 1 << 20
	rep := 0
	as, bs := s.ab(func() time.Duration {
		rep++
		p := m.Path(fmt.Sprintf("big-%d", rep))
		start := time.Now()
		fh, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < size; off += chunk {
			if _, err := fh.Write(data[off:min(off+chunk, size)]); err != nil {
				t.Fatal(err)
			}
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		w := time.Since(start)
		dropCaches(t)
		start = time.Now()
		fh, err = os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, chunk)
		same := true
		for off := 0; ; {
			k, err := fh.Read(buf)
			if k > 0 {
				same = same && bytes.Equal(buf[:k], data[off:off+k])
				off += k
			}
			if err != nil {
				break
			}
		}
		fh.Close()
		rd := time.Since(start)
		if !same {
			t.Fatalf("%s read back differs from what was written", p)
		}
		_ = os.Remove(p)
		return w + rd
	}, func() time.Duration {
		ino := nextIno()
		start := time.Now()
		r.bulk(r.chunkItems(ino, data, chunk), 8, 4)
		r.readChunks(ino, (size+chunk-1)/chunk, 8, 4)
		return time.Since(start)
	})
	s.add(row{name: "write_read", workload: fmt.Sprintf("a %d MiB file written (1 MiB writes, close) then read back after dropping the page cache", size>>20),
		floor: "raw `_bulk` of the same bytes as 1 MiB base64 chunk documents (8 a request, 4 in flight), then `_mget` of them", esfs: as, base: bs, target: "≤ 1.3", limit: 1.3})
}

func benchRenameFile(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	n := s.n(5000)
	from, to := names(n, "f"), names(n, "g")
	mounttest.Populate(t, f, "/rf", from, nil)
	rawPopulate(r, rawRoot+"/rf", from)
	m := f.MountAt(t, t.TempDir(), nil)
	repA, repB := 0, 0 // each side renames back and forth on its own
	as, bs := s.ab(func() time.Duration {
		a, b := turn(&repA, from, to)
		start := time.Now()
		for i := range a {
			if err := os.Rename(m.Path("rf", a[i]), m.Path("rf", b[i])); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start)
	}, func() time.Duration {
		a, b := turn(&repB, from, to)
		start := time.Now()
		for i := range a {
			pa, pb := rawRoot+"/rf/"+a[i], rawRoot+"/rf/"+b[i]
			r.do("POST", "/_bulk", []byte(r.createAction(r.prefix, store.DocID(pb), pathDoc(pb, 1, "file"))+r.deleteAction(r.prefix, store.DocID(pa))))
		}
		return time.Since(start)
	})
	s.add(row{name: "rename_file", workload: fmt.Sprintf("%d file renames in one directory, one after another", n),
		floor: "a raw 2-item `_bulk` (create new, delete old) each", esfs: as, base: bs, target: "≤ 1.3", limit: 1.3})
}

// countEntries lists dir (getdents only) and returns how many entries
// it has, or -1 if it does not exist.
func countEntries(dir string) int {
	d, err := os.Open(dir)
	if err != nil {
		return -1
	}
	defer d.Close()
	n := 0
	for {
		es, err := d.ReadDir(4096)
		n += len(es)
		if err != nil {
			return n
		}
	}
}

func benchRenameDir(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	sizes := []int{1000, 10000}
	if s.scale == "full" {
		sizes = append(sizes, 100000)
	}
	for _, n := range sizes {
		ns := names(n, "f")
		mounttest.Populate(t, f, fmt.Sprintf("/d%d/a", n), ns, nil)
		rawPopulate(r, fmt.Sprintf("%s/d%d/a", rawRoot, n), ns)
	}
	addr := mounttest.FreeAddr(t)
	m := f.MountAt(t, t.TempDir(), nil, "--metrics-addr", addr)
	// A rename is answered at its commit point and finished in the
	// background (old documents deleted, intents stripped): that work is
	// not the caller's wait, but it must not run into the floor's turn or
	// the next rename's, so each turn ends when the mount has no rename in
	// flight, outside the time measured.
	quiet := func() {
		for start := time.Now(); ; time.Sleep(5 * time.Millisecond) {
			if mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), "esfs_renames_in_flight") == 0 {
				return
			}
			if time.Since(start) > 10*time.Minute {
				t.Fatal("a rename still in flight 10 minutes after it was answered")
			}
		}
	}
	for _, n := range sizes {
		ns := names(n, "f")
		repA, repB := 0, 0
		as, bs := s.ab(func() time.Duration {
			a, b := turn(&repA, "a", "b")
			src, dst := m.Path(fmt.Sprintf("d%d", n), a), m.Path(fmt.Sprintf("d%d", n), b)
			start := time.Now()
			if err := os.Rename(src, dst); err != nil {
				t.Fatal(err)
			}
			renamed := time.Since(start)
			for countEntries(dst) != n {
				if time.Since(start) > 10*time.Minute {
					t.Fatalf("%s incomplete 10 minutes after the rename", dst)
				}
				time.Sleep(5 * time.Millisecond)
			}
			took := time.Since(start)
			quiet()
			t.Logf("rename_dir_%d: rename(2) %s, then the listing %s; finished %s after the answer", n, fmtDur(renamed), fmtDur(took-renamed), fmtDur(time.Since(start)-renamed))
			return took
		}, func() time.Duration {
			a, b := turn(&repB, "a", "b")
			base := fmt.Sprintf("%s/d%d/", rawRoot, n)
			items := make([]string, 0, 2*n)
			for _, nm := range ns {
				pa, pb := base+a+"/"+nm, base+b+"/"+nm
				items = append(items, r.createAction(r.prefix, store.DocID(pb), pathDoc(pb, 1, "file")), r.deleteAction(r.prefix, store.DocID(pa)))
			}
			start := time.Now()
			r.bulk(items, 5000, 4)
			r.refresh()
			if got := r.scanDir(base+b, 10000); got != n {
				t.Fatalf("raw rewrite: %d of %d at the new path", got, n)
			}
			return time.Since(start)
		})
		s.add(row{name: fmt.Sprintf("rename_dir_%d", n), workload: fmt.Sprintf("rename of a directory of %d files, until a listing of the new path is complete", n),
			floor: "raw `_bulk` rewrite of the same documents (2N items, 5000 a request, 4 in flight), refresh, scan", esfs: as, base: bs, target: "≤ 2.0", limit: 2.0})
	}
}

func benchDisjoint(s *suite) {
	t := s.t
	const maxK = 8
	per := s.n(2000) / 10 // renames per mount and repetition
	ns, alt := names(per, "f"), names(per, "g")
	mountsOf := func(strategy string) []*mounttest.Mount {
		f := mounttest.NewFS(t)
		for i := 0; i < maxK; i++ {
			mounttest.Populate(t, f, fmt.Sprintf("/m%d", i), ns, nil)
		}
		var ms []*mounttest.Mount
		for i := 0; i < maxK; i++ {
			ms = append(ms, f.MountAt(t, t.TempDir(), nil, "--locking", strategy))
		}
		return ms
	}
	tree, global := mountsOf("tree"), mountsOf("global")
	// renamed[m][i]: the files of mount i of ms m are named alt now.
	renamed := map[*mounttest.Mount][]bool{tree[0]: make([]bool, maxK), global[0]: make([]bool, maxK)}
	run := func(ms []*mounttest.Mount, k int) time.Duration {
		state := renamed[ms[0]]
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; i < k; i++ {
			a, b := ns, alt
			if state[i] {
				a, b = alt, ns
			}
			state[i] = !state[i]
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				for j := range a {
					if err := os.Rename(ms[i].Path(fmt.Sprintf("m%d", i), a[j]), ms[i].Path(fmt.Sprintf("m%d", i), b[j])); err != nil {
						t.Errorf("rename: %v", err)
						return
					}
				}
			}(i)
		}
		wg.Wait()
		return time.Since(start)
	}
	for _, k := range []int{2, 4, 8} {
		as, bs := s.ab(func() time.Duration { return run(tree, k) }, func() time.Duration { return run(global, k) })
		r := row{name: fmt.Sprintf("rename_disjoint_%d", k), workload: fmt.Sprintf("%d mounts, %d file renames each in its own directory, concurrently", k, per),
			floor: "the same with `--locking global`", esfs: as, base: bs}
		if k == 8 {
			r.target, r.limit = "≥ 3× global (≤ 0.33)", 1.0/3
		}
		s.add(r)
	}
}

func benchLockRT(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	r := newRaw(t, f.Index)
	ctx := context.Background()
	co, err := locking.Start(ctx, f.Store, locking.Config{Strategy: "tree", Lease: 10 * time.Second, LockTimeout: 10 * time.Second, NoSweeper: true})
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close(ctx)
	const iters = 200
	for _, depth := range []int{1, 8, 32} {
		dir := strings.Repeat("/d", depth)
		as, bs := s.ab(func() time.Duration {
			start := time.Now()
			for i := 0; i < iters; i++ {
				txn, err := co.Begin(ctx, co.Strategy.Rename(dir+"/a", dir+"/b", nil))
				if err != nil {
					t.Fatal(err)
				}
				if err := txn.End(ctx); err != nil {
					t.Fatal(err)
				}
			}
			return time.Since(start)
		}, func() time.Duration { return r.lockFloor(iters) })
		s.add(row{name: fmt.Sprintf("lock_rt_depth_%d", depth), workload: fmt.Sprintf("%d × (acquire + release) of a rename's tree locks at depth %d", iters, depth),
			floor: "raw create + delete of one document", esfs: as, base: bs, target: "≤ 2.2, flat in depth", limit: 2.2})
	}
}

// lockFloor is the floor of the lock rows: n × a raw create and delete
// of one lock document.
func (r *raw) lockFloor(n int) time.Duration {
	start := time.Now()
	for i := 0; i < n; i++ {
		r.do("PUT", "/"+r.prefix+"-locks/_create/raw-floor", []byte(`{"kind":"lock","path":"/raw-floor"}`))
		r.do("DELETE", "/"+r.prefix+"-locks/_doc/raw-floor", nil)
	}
	return time.Since(start)
}

// benchFlockRT: an uncontended flock and unlock of one file through a
// mount, against the raw round trips of one lock document.
func benchFlockRT(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	addr := mounttest.FreeAddr(t)
	m := f.Mount(t, "--metrics-addr", addr)
	r := newRaw(t, f.Index)
	p := m.Path("lockfile")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	// Every request but the heartbeat's (the session index); the recall
	// polls, a few a second, are counted with the pairs.
	lockRequests := func() float64 {
		fams := mounttest.Scrape(t, "http://"+addr+"/metrics")
		return mounttest.Sample(fams, "esfs_es_request_duration_seconds") -
			max(mounttest.Sample(fams, "esfs_es_request_duration_seconds", "index", "session"), 0)
	}
	const iters = 200
	var perPair []float64
	as, bs := s.ab(func() time.Duration {
		before := lockRequests()
		start := time.Now()
		for i := 0; i < iters; i++ {
			if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
				t.Fatal(err)
			}
			if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		perPair = append(perPair, (lockRequests()-before)/iters)
		return took
	}, func() time.Duration { return r.lockFloor(iters) })
	s.add(row{name: "flock_rt", workload: fmt.Sprintf("%d × (flock LOCK_EX + LOCK_UN) of one file through a mount, uncontended", iters),
		floor: "raw create + delete of one document", esfs: as, base: bs,
		note: fmt.Sprintf("%.1f requests to Elasticsearch a pair (a read and a compare-and-set of the lock document for each of the lock and the unlock, the re-read of the inode after the lock, and the recall polls meanwhile); %s a pair", median(perPair), (median(as) / iters).Round(time.Microsecond))})
}

// peakRSS reads the peak resident set size (VmHWM) of process pid, in MiB.
func peakRSS(t testing.TB, pid int) float64 {
	fh, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

func benchMemory(s *suite) {
	t := s.t
	f := mounttest.NewFS(t)
	n := s.n(100000)
	mounttest.Populate(t, f, "/big", names(n, "f"), nil)
	m := f.MountAt(t, t.TempDir(), nil)
	if _, lines := ls(t, m.Path("big"), "-l"); lines != n+1 {
		t.Fatalf("ls -l of %d entries printed %d lines", n, lines)
	}
	afterList := peakRSS(t, m.Pid())
	size := int64(1 << 30)
	if s.scale != "full" {
		size = 256 << 20
	}
	src := filepath.Join(t.TempDir(), "src")
	fh, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.ReadFrom(io.LimitReader(&prng{}, size)); err != nil {
		t.Fatal(err)
	}
	fh.Close()
	if out, err := exec.Command("cp", src, m.Path("copy")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	peak := peakRSS(t, m.Pid())
	r := row{name: "memory", workload: fmt.Sprintf("daemon peak RSS (VmHWM): `ls -l` of %d entries, then `cp` of a %d MiB file in", n, size>>20),
		absolute: fmt.Sprintf("%.0f MiB (%.0f MiB after the listing)", peak, afterList), target: "< 200 MiB"}
	r.met = "no"
	if peak < 200 {
		r.met = "yes"
	}
	s.add(r)
}

// prng yields pseudo-random bytes without end: incompressible, cheap.
type prng struct{ state uint64 }

func (r *prng) Read(p []byte) (int, error) {
	for i := range p {
		r.state = r.state*6364136223846793005 + 1442695040888963407
		p[i] = byte(r.state >> 56)
	}
	return len(p), nil
}
