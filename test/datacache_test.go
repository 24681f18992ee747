package test

// The chunks a mount reads are kept for rereads, of open files and of
// files closed since (fs/vfs/clean.go), and the kernel keeps a file's pages
// across opens when the file has not changed: rereads cost no request.
// Whatever another mount does to the file between two opens, the second
// open reads what it did (close-to-open), from the daemon and from the
// kernel's pages alike.

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// dataReads counts the chunk reads (data index _mget requests) a mount
// behind fp sends.
func dataReads(fp *mounttest.FaultProxy) *atomic.Int64 {
	var n atomic.Int64
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if strings.Contains(r.URL.Path, "-data") && strings.HasSuffix(r.URL.Path, "/_mget") {
			n.Add(1)
		}
		return false
	})
	return &n
}

// dropPages makes the kernel forget its pages of path (clean ones: all,
// after a close), so that the next read asks the daemon.
func dropPages(t *testing.T, path string) {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if err := unix.Fadvise(int(fh.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
}

// fuseReads is how many FUSE READs the mount serving metrics at addr has
// answered.
func fuseReads(t *testing.T, addr string) float64 {
	return mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), "esfs_fuse_request_duration_seconds", "op", "READ")
}

// pages is how many pages a file of size bytes spans.
func pages(size int) int { return (size + os.Getpagesize() - 1) / os.Getpagesize() }

// pagesHeld counts the pages of the size bytes of fh that the kernel holds
// in its page cache (mincore of a mapping, which asks the mount nothing).
func pagesHeld(t *testing.T, fh *os.File, size int) int {
	t.Helper()
	m, err := unix.Mmap(int(fh.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, pages(size))
	// x/sys/unix has no mincore wrapper.
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal(errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestDataCacheRereadsAndChanges: a file reread on a mount costs no chunk
// read, from the daemon's kept chunks (the kernel's pages dropped) or the
// kernel's own pages (FUSE READ not even asked); after another mount
// rewrites bytes in place, appends, or truncates and writes again, the
// next open on the reader reads the new bytes, with its pages and chunks
// of the old ones still there; and so it does when a descriptor of the
// reader stays open across the change.
func TestDataCacheRereadsAndChanges(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	addr := mounttest.FreeAddr(t)
	r := f.Mount(t, "--es-url", fp.URL, "--metrics-addr", addr)
	w := f.Mount(t)
	chunkReads := dataReads(fp)

	want := mounttest.RandomBytes(61, 3<<20+12345)
	if err := os.WriteFile(w.Path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	// read reads the file on the reader through one descriptor, checks
	// it, and returns how many chunk reads and FUSE reads that took, and
	// how many of the file's pages the kernel held right after the open.
	read := func(step string) (chunks int64, reads float64, held int) {
		t.Helper()
		c0, r0 := chunkReads.Load(), fuseReads(t, addr)
		fh, err := os.Open(r.Path("f"))
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		defer fh.Close()
		held = pagesHeld(t, fh, len(want))
		got, err := io.ReadAll(fh)
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if !bytes.Equal(got, want) {
			i := 0
			for i < min(len(got), len(want)) && got[i] == want[i] {
				i++
			}
			t.Fatalf("%s: the reader reads %d bytes differing from the %d written at byte %d", step, len(got), len(want), i)
		}
		chunks, reads = chunkReads.Load()-c0, fuseReads(t, addr)-r0
		t.Logf("%s: %d chunk reads, %v FUSE reads, %d of %d pages held by the kernel after the open", step, chunks, reads, held, pages(len(want)))
		return chunks, reads, held
	}

	if c, _, _ := read("first read"); c == 0 {
		t.Fatal("the first read of the file read no chunk: the count is broken, the test proves nothing")
	}
	if kept := mounttest.Sample(mounttest.Scrape(t, "http://"+addr+"/metrics"), "esfs_data_cache_bytes"); kept < float64(len(want)) {
		t.Errorf("esfs_data_cache_bytes says %v bytes kept after reading a file of %d", kept, len(want))
	}
	dropPages(t, r.Path("f"))
	if c, fr, _ := read("reread, the kernel's pages dropped"); c != 0 || fr == 0 {
		t.Errorf("a reread of an unchanged file from the daemon: %d chunk reads (want 0), %v FUSE reads (want some)", c, fr)
	}
	// The kernel may drop clean pages of its own accord meanwhile, under
	// memory pressure or by proactive reclaim (this machine runs DAMON's,
	// which took one to three pages of the file between two reads here, in
	// about one run in eight under load): those it no longer holds after
	// the open may cost a FUSE read each, the others none. An open that
	// made it drop them all leaves it none.
	if c, fr, held := read("reread, the kernel's pages kept"); c != 0 || held == 0 || fr > float64(pages(len(want))-held) {
		t.Errorf("a reread of an unchanged file whose pages the kernel has: %d chunk reads (want 0), %d of its %d pages held by the kernel after the open (want some), %v FUSE reads (want none but for the pages it lacked)", c, held, pages(len(want)), fr)
	}

	change := func(step string, do func(fh *os.File) error) {
		t.Helper()
		fh, err := os.OpenFile(w.Path("f"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := do(fh); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		if err := fh.Close(); err != nil {
			t.Fatalf("%s: close: %v", step, err)
		}
		if c, _, _ := read("after " + step); c == 0 {
			t.Errorf("after %s the reader read no chunk: it answered from what it read before", step)
		}
		read("reread after " + step)
	}
	change("a rewrite in place (same size)", func(fh *os.File) error {
		patch := bytes.Repeat([]byte("N"), 5000)
		copy(want[1<<20-100:], patch)
		_, err := fh.WriteAt(patch, 1<<20-100)
		return err
	})
	change("an append", func(fh *os.File) error {
		tail := []byte("appended on the other mount")
		want = append(want, tail...)
		_, err := fh.WriteAt(tail, int64(len(want)-len(tail)))
		return err
	})
	change("a truncation and a write back to the same size", func(fh *os.File) error {
		if err := fh.Truncate(1 << 20); err != nil {
			return err
		}
		fresh := mounttest.RandomBytes(62, len(want)-1<<20)
		copy(want[1<<20:], fresh)
		_, err := fh.WriteAt(fresh, 1<<20)
		return err
	})

	// held is open on the reader through the next change: the file keeps
	// its open state in the daemon, and the next open must still see it.
	held, err := os.Open(r.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	change("a rewrite in place while the reader holds the file open", func(fh *os.File) error {
		patch := bytes.Repeat([]byte("H"), 3000)
		copy(want[2<<20+7:], patch)
		_, err := fh.WriteAt(patch, 2<<20+7)
		return err
	})
	got := make([]byte, len(want))
	if _, err := held.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Errorf("the descriptor open throughout reads other bytes than the last change's (%v)", err)
	}
}

// TestDataCacheReopenDuringRelease: FUSE sends a file's RELEASE after
// close(2) has returned, and the daemon may take a while over it (here it
// gives back a flock, whose request the proxy holds). An open the kernel
// sends meanwhile, a reread right after a close, must find the file
// closed, as the process does, and take the chunks its close kept. Served
// before the release, it was an open that is not the first, which keeps
// none of them (nor the kernel's pages): the whole file was read again.
// (The kernel's pages are not kept here whatever the order: the flock's
// grant read the file anew, see fs/vfs/rebase.go.)
func TestDataCacheReopenDuringRelease(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	r := f.Mount(t, "--es-url", fp.URL)
	chunkReads := dataReads(fp)
	want := mounttest.RandomBytes(65, 2<<20+5000)
	if err := os.WriteFile(r.Path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	ino := mounttest.Ino(t, r.Path("f"))
	dropPages(t, r.Path("f"))
	fh, err := os.Open(r.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(fh.Fd()), unix.LOCK_SH); err != nil {
		t.Fatal(err)
	}
	c0 := chunkReads.Load()
	if got, err := io.ReadAll(fh); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the first read: %d bytes (%v), not the file", len(got), err)
	}
	if chunkReads.Load() == c0 {
		t.Fatal("the first read read no chunk: the count is broken, the test proves nothing")
	}
	release := fp.Add(&mounttest.Fault{Delay: time.Second, Match: func(_, _ string, body []byte) bool {
		return bytes.Contains(body, []byte(`"_id":"`+store.FileLockID(ino)+`"`))
	}})
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-release.Arrived():
	case <-time.After(time.Minute):
		t.Fatal("the release gave back no flock within a minute")
	}
	c0 = chunkReads.Load()
	if got, err := os.ReadFile(r.Path("f")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the reread: %d bytes (%v), not the file", len(got), err)
	}
	if c := chunkReads.Load() - c0; c != 0 {
		t.Errorf("a reread opened while the last close's release was under way: %d chunk reads, want 0 (the chunks the close kept)", c)
	}
	release.WaitFired(t)
}

// TestDataCacheBudget: --data-cache-size bounds what a mount keeps: with
// 1 MiB, a 4 MiB file read twice is fetched twice.
func TestDataCacheBudget(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	r := f.Mount(t, "--es-url", fp.URL, "--data-cache-size", "1")
	chunkReads := dataReads(fp)
	want := mounttest.RandomBytes(63, 4<<20)
	if err := os.WriteFile(r.Path("f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	for pass := 1; pass <= 2; pass++ {
		dropPages(t, r.Path("f"))
		c0 := chunkReads.Load()
		got, err := os.ReadFile(r.Path("f"))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("pass %d: %d bytes read (%v), not the file", pass, len(got), err)
		}
		if c := chunkReads.Load() - c0; c == 0 {
			t.Errorf("pass %d of a 4 MiB file with a 1 MiB data cache read no chunk", pass)
		}
	}
}

// TestDataCacheSmallFileComesWithItsOpen: an open for reading brings the
// file's first chunk with its inode, in one round trip: reading a small
// file another mount wrote then asks for no chunk (grep -r pays one request
// a file instead of two). A file open for writing, or one whose chunks the
// mount keeps, opens as before.
func TestDataCacheSmallFileComesWithItsOpen(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	r := f.Mount(t, "--es-url", fp.URL)
	w := f.Mount(t)
	chunkReads := dataReads(fp)
	files := map[string][]byte{
		"small": []byte("a small file's whole contents\n"),
		"two":   mounttest.RandomBytes(64, 1<<20+5000),
		"hole":  nil, // 100 KiB of zeros, no chunk stored
	}
	for name, b := range files {
		if err := os.WriteFile(w.Path(name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Truncate(w.Path("hole"), 100<<10); err != nil {
		t.Fatal(err)
	}
	files["hole"] = make([]byte, 100<<10)
	for _, name := range []string{"small", "hole", "two"} {
		c0 := chunkReads.Load()
		got, err := os.ReadFile(r.Path(name))
		if err != nil || !bytes.Equal(got, files[name]) {
			t.Fatalf("%s: read %d bytes (%v), not the %d written", name, len(got), err, len(files[name]))
		}
		c := chunkReads.Load() - c0
		t.Logf("%s: %d chunk reads after the open", name, c)
		switch {
		case name != "two" && c != 0:
			t.Errorf("reading %s (one chunk or none) asked for %d chunks after its open", name, c)
		case name == "two" && c != 1:
			t.Errorf("reading a file of two chunks asked for %d chunks after its open, want the second alone", c)
		}
	}
}

// TestDataCacheKeptChunksCheckedByVersion: a writer whose close fails
// after its chunks landed (its inode write refused) leaves the inode as it
// was and the bytes changed. A mount that kept the file's chunks from
// before must read what every other mount reads: its kept chunks are
// checked by their own data versions at the open, not by the inode's
// (campaign seed 381633321: zeros where another mount read the write).
func TestDataCacheKeptChunksCheckedByVersion(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	r := f.Mount(t)
	w := f.Mount(t, "--es-url", fp.URL, "--es-timeout=3s")
	old := bytes.Repeat([]byte("o"), 300<<10)
	if err := os.WriteFile(r.Path("f"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	dropPages(t, r.Path("f"))
	if got, err := os.ReadFile(r.Path("f")); err != nil || !bytes.Equal(got, old) {
		t.Fatalf("first read: %d bytes, %v", len(got), err)
	}
	// The writer's chunk bulk passes; every inode write after it is
	// refused, so its close fails with the chunk stored.
	var chunkLanded, refusing atomic.Bool
	fp.Intercept(func(rw http.ResponseWriter, req *http.Request, body []byte) bool {
		if strings.Contains(req.URL.Path, "_bulk") && bytes.Contains(body, []byte(`-data`)) {
			chunkLanded.Store(true)
			return false
		}
		if chunkLanded.Load() && (strings.Contains(req.URL.Path, "-inodes") || bytes.Contains(body, []byte(`-inodes`))) {
			refusing.Store(true)
			rw.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	fh, err := os.OpenFile(w.Path("f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	fresh := bytes.Repeat([]byte("N"), 4000)
	if _, err := fh.WriteAt(fresh, 1000); err != nil {
		t.Fatal(err)
	}
	cerr := fh.Close()
	t.Logf("the writer's close: %v (its inode writes refused: %v)", cerr, refusing.Load())
	if !chunkLanded.Load() || !refusing.Load() {
		t.Fatal("the writer's chunk bulk or its inode write was not seen: the test proves nothing")
	}
	fp.Intercept(nil)
	// What the cluster holds now, as a mount that kept nothing reads it.
	other := f.Mount(t)
	want, err := os.ReadFile(other.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want[1000:5000], fresh) {
		t.Fatalf("a fresh mount reads %q at 1000: the chunk did not land, the test proves nothing", want[1000:1010])
	}
	got, err := os.ReadFile(r.Path("f"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("the mount that kept the file's chunks reads %q at 1000, another mount %q: kept chunks outlived a change", got[1000:1010], want[1000:1010])
	}
}

// refuseInodeWritesAfterChunks makes the writer behind fp land its chunk
// bulks and have every inode write after the first of them answered 503,
// so that its close fails with its chunks stored and its inode as it was;
// it reports whether both happened.
func refuseInodeWritesAfterChunks(fp *mounttest.FaultProxy) (landedAndRefused func() bool) {
	var chunkLanded, refusing atomic.Bool
	fp.Intercept(func(rw http.ResponseWriter, req *http.Request, body []byte) bool {
		if strings.Contains(req.URL.Path, "_bulk") && bytes.Contains(body, []byte(`-data`)) {
			chunkLanded.Store(true)
			return false
		}
		if chunkLanded.Load() && (strings.Contains(req.URL.Path, "-inodes") || bytes.Contains(body, []byte(`-inodes`))) {
			refusing.Store(true)
			rw.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	return func() bool { return chunkLanded.Load() && refusing.Load() }
}

// TestDataCacheHoleFilledElsewhere: a mount that read a
// hole of a file as zeros, past the end it had stored (its own write
// beyond the hole still buffered), must read what another mount wrote
// there since, at its next open: the kernel's zero pages of the hole are
// not kept across that open when the hole's chunk is no longer absent.
// The other mount's inode does not change (its close fails after its
// chunk landed, or it still holds the file open past its dirty limit), so
// only the chunk's own version tells.
func TestDataCacheHoleFilledElsewhere(t *testing.T) {
	const mib = 1 << 20
	f := mounttest.NewFS(t)
	reader := f.Mount(t)
	// holdFsynced makes name on the writer, writes and fsyncs a byte,
	// and keeps it open: its data generation taken, its next writes send
	// their chunks without writing the inode first.
	holdFsynced := func(t *testing.T, w *mounttest.Mount, name string) *os.File {
		t.Helper()
		fh, err := os.OpenFile(w.Path(name), os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { fh.Close() })
		if _, err := fh.WriteAt([]byte("S"), 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
		return fh
	}
	// readHole makes the reader write 4 KiB at at and, with that write
	// still buffered, read the hole before it (zeros, past the end the
	// reader has stored), then close.
	readHole := func(t *testing.T, name string, holeFrom, holeLen, at int64) {
		t.Helper()
		fh, err := os.OpenFile(reader.Path(name), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt(bytes.Repeat([]byte("E"), 4096), at); err != nil {
			t.Fatal(err)
		}
		hole := make([]byte, holeLen)
		if _, err := fh.ReadAt(hole, holeFrom); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(hole, make([]byte, holeLen)) {
			t.Fatal("the hole did not read as zeros")
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// check reads name's range on the reader, its pages from before
	// still in the kernel, and on a fresh mount, and wants both alike and
	// the written bytes there. The fresh mount is made before the writer
	// writes: starting a process closes, at its exec, the test's
	// descriptors, the writer's among them, and a close flushes.
	check := func(t *testing.T, fresh *mounttest.Mount, name string, from, n int64, wrote []byte) {
		t.Helper()
		want := make([]byte, n)
		fh, err := os.Open(fresh.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		_, err = fh.ReadAt(want, from)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(want[:len(wrote)], wrote) {
			t.Fatalf("a fresh mount does not read the bytes written into the hole: the test proves nothing")
		}
		for reopen := 1; reopen <= 2; reopen++ {
			got := make([]byte, n)
			fh, err := os.Open(reader.Path(name))
			if err != nil {
				t.Fatal(err)
			}
			_, err = fh.ReadAt(got, from)
			fh.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				i := 0
				for i < len(got) && got[i] == want[i] {
					i++
				}
				t.Errorf("reopen %d: the mount that read the hole reads other bytes than a fresh mount from %d on (%q, want %q)", reopen, from+int64(i), got[i:i+8], want[i:i+8])
			}
		}
	}

	t.Run("close failed after the chunk landed", func(t *testing.T) {
		fp := mounttest.NewFaultProxy(t, f.URL)
		writer := f.Mount(t, "--es-url", fp.URL, "--es-timeout=3s")
		fresh := f.Mount(t)
		wfh := holdFsynced(t, writer, "f")
		readHole(t, "f", mib, mib, 2*mib)
		landedAndRefused := refuseInodeWritesAfterChunks(fp)
		fill := mounttest.RandomBytes(71, mib)
		if _, err := wfh.WriteAt(fill, mib); err != nil {
			t.Fatal(err)
		}
		t.Logf("the writer's close: %v", wfh.Close())
		fp.Intercept(nil)
		if !landedAndRefused() {
			t.Fatal("the writer's chunk bulk or its refused inode write was not seen: the test proves nothing")
		}
		check(t, fresh, "f", mib, mib, fill)
	})

	t.Run("chunks landed past the dirty limit, the writer still open", func(t *testing.T) {
		// 33 MiB buffered pass the 32 MiB dirty limit (vfs.Options): the
		// writer sends its chunks and keeps the file open, its inode
		// unwritten.
		writer, fresh := f.Mount(t), f.Mount(t)
		wfh := holdFsynced(t, writer, "g")
		readHole(t, "g", mib, 33*mib, 40*mib)
		fill := mounttest.RandomBytes(72, 33*mib)
		if _, err := wfh.WriteAt(fill, mib); err != nil {
			t.Fatal(err)
		}
		check(t, fresh, "g", mib, 33*mib, fill[:32*mib])
	})
}

// TestDataCacheLateOpenKeepsNewer: an open whose read of
// the file is answered late, after another open of the same file on the
// same mount read it newer, must not roll the open file back: a descriptor
// that has read the new bytes reads them again, whole, and so does the
// late one. Whether the mount had chunks of the file kept, or had it
// open already (the newer state then its own fsynced append), the older
// read loses.
func TestDataCacheLateOpenKeepsNewer(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	b := f.Mount(t, "--es-url", fp.URL, "--es-timeout=10s")
	a := f.Mount(t)
	old, fresh := []byte("old content\n"), []byte("new content, longer than before\n")
	openReads := func(method, path string, body []byte) bool {
		return method == http.MethodPost && strings.HasSuffix(path, "/_mget") &&
			bytes.Contains(body, []byte("-inodes")) && bytes.Contains(body, []byte("-data"))
	}
	// armed picks, of the inode reads a late open of a file the mount
	// has open makes, the open's own: the kernel asks GETATTR first (the
	// attributes of a file open for writing are not kept), then OPEN.
	var armed atomic.Bool
	var gets atomic.Int32
	inodeGets := func(method, path string, body []byte) bool {
		return armed.Load() && method == http.MethodGet && strings.Contains(path, "-inodes/_doc/") && gets.Add(1) == 2
	}
	readAll := func(fh *os.File) []byte {
		t.Helper()
		buf := make([]byte, 256)
		n, err := fh.ReadAt(buf, 0)
		if err != nil && n == 0 {
			t.Fatal(err)
		}
		return buf[:n]
	}
	// race opens name on b (#1) with the fault on its read, makes the
	// change once that read has landed, then opens name again (#2) and
	// reads it, and once #1 is answered reads through both.
	race := func(t *testing.T, name string, match func(string, string, []byte) bool, change func() []byte) {
		fault := fp.Add(&mounttest.Fault{Match: match, Late: 3 * time.Second})
		gets.Store(0)
		armed.Store(true)
		type opened struct {
			fh  *os.File
			err error
		}
		// #1 opens through an O_PATH descriptor's /proc link: no LOOKUP
		// on the way (the kernel's entry may have expired), so the held
		// read is the open's own.
		pathFD, err := unix.Open(b.Path(name), unix.O_PATH, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(pathFD)
		first := make(chan opened, 1)
		go func() {
			fh, err := os.Open(fmt.Sprintf("/proc/self/fd/%d", pathFD))
			first <- opened{fh, err}
		}()
		select {
		case <-fault.Arrived():
		case <-time.After(time.Minute):
			t.Fatal("the first open's read never came")
		}
		armed.Store(false)
		want := change()
		fh2, err := os.Open(b.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		defer fh2.Close()
		if got := readAll(fh2); !bytes.Equal(got, want) {
			t.Fatalf("an open after the change returned reads %q, want %q", got, want)
		}
		o := <-first
		if o.err != nil {
			t.Fatal(o.err)
		}
		defer o.fh.Close()
		select {
		case <-fault.Fired():
		default:
			t.Fatal("the first open returned before its late answer: the test proves nothing")
		}
		if got := readAll(fh2); !bytes.Equal(got, want) {
			t.Errorf("after the late open, the descriptor that read %q reads %q", want, got)
		}
		if got := readAll(o.fh); !bytes.Equal(got, want) {
			t.Errorf("the late open's descriptor reads %q after the other read %q", got, want)
		}
	}
	write := func(path string, b []byte) {
		t.Helper()
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("another mount rewrote it", func(t *testing.T) {
		write(a.Path("x"), old)
		if _, err := os.Stat(b.Path("x")); err != nil {
			t.Fatal(err)
		}
		race(t, "x", openReads, func() []byte { write(a.Path("x"), fresh); return fresh })
	})
	t.Run("another mount rewrote it, chunks kept", func(t *testing.T) {
		write(a.Path("y"), old)
		if got, err := os.ReadFile(b.Path("y")); err != nil || !bytes.Equal(got, old) {
			t.Fatalf("first read: %q, %v", got, err)
		}
		race(t, "y", openReads, func() []byte { write(a.Path("y"), fresh); return fresh })
	})
	t.Run("its own descriptor appended and fsynced", func(t *testing.T) {
		w, err := os.OpenFile(b.Path("z"), os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if _, err := w.Write(old); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil { // stored: the open reads the store
			t.Fatal(err)
		}
		if _, err := os.Stat(b.Path("z")); err != nil {
			t.Fatal(err)
		}
		race(t, "z", inodeGets, func() []byte {
			if _, err := w.Write(fresh); err != nil {
				t.Fatal(err)
			}
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			return append(append([]byte{}, old...), fresh...)
		})
	})
}
