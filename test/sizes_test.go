package test

// Sizes and offsets from requests: no request may cost
// the daemon memory or time in proportion to a size or an offset it names,
// only to what is stored; sizes past the maximum get EFBIG, as on Linux.
// Each test runs with the largest values the kernel lets through to a FUSE
// filesystem (its s_maxbytes is 2^63-1) and a watch on the daemon's
// memory, and ends by checking that the mount is still alive.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// sizeMemLimit: the daemon's resident memory may not pass this in these
// tests (it idles at a few tens of MiB, more under -race); a request whose
// cost followed its size would pass it at once, and the watch kills the
// daemon before it can hurt the machine.
const sizeMemLimit = 1 << 30

// sizeMount mounts f with a memory watch.
func sizeMount(t *testing.T, f *mounttest.FS, extra ...string) (*mounttest.Mount, *mounttest.MemWatch) {
	t.Helper()
	m := f.Mount(t, extra...)
	return m, m.WatchMemory(t, sizeMemLimit)
}

// sizeAlive fails the test if the mount died or the watch had to kill it.
func sizeAlive(t *testing.T, m *mounttest.Mount, w *mounttest.MemWatch) {
	t.Helper()
	peak, killed := w.Peak()
	t.Logf("REPORT %s: daemon peak RSS %d MiB", t.Name(), peak>>20)
	if killed {
		t.Fatalf("the daemon passed %d MiB of memory and was killed", sizeMemLimit>>20)
	}
	if m.Exited() {
		t.Fatalf("the daemon died:\n%s", m.Log())
	}
	if _, err := os.Stat(m.Path()); err != nil {
		t.Fatalf("the mount no longer answers: %v", err)
	}
}

// TestSizeHugeSparseFileCostsWhatItStores: `truncate -s 999999999999999 f && rm f` once made
// the daemon build a bulk item per chunk number up to the size (122 GB)
// and die. Truncation and removal now cost what is stored; the maximum
// size is store.MaxFileSize, and everything past it is EFBIG.
func TestSizeHugeSparseFileCostsWhatItStores(t *testing.T) {
	f := mounttest.NewFS(t)
	m, w := sizeMount(t, f)
	limit := store.MaxFileSize
	cs := f.Store.ChunkSize()

	// The reproduction, with the shell's tools.
	mounttest.Sh(t, m.Dir, `truncate -s 999999999999999 f && ls -l f && rm f`)
	sizeAlive(t, m, w)

	// ftruncate, then unlink, with data at both ends.
	p := m.Path("g")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(999999999999999); err != nil {
		t.Fatalf("ftruncate to 999999999999999: %v", err)
	}
	if _, err := fh.WriteAt([]byte("head"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fh.WriteAt([]byte("tail"), 999999999999999-4); err != nil {
		t.Fatal(err)
	}
	if err := fh.Sync(); err != nil {
		t.Fatal(err)
	}
	ino := mounttest.Ino(t, p)
	if got := mounttest.StoredChunks(t, f, ino); len(got) != 2 || got[0] != 0 || got[1] != (999999999999999-1)/cs {
		t.Fatalf("stored chunks of a file with data at both ends: %v", got)
	}
	// Shrinking keeps the head, cuts the tail; growing again reads zeros
	// where the tail was.
	if err := fh.Truncate(2); err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(999999999999999); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, err := fh.ReadAt(buf, 999999999999999-8); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, make([]byte, 8)) {
		t.Fatalf("the cut tail came back after growing the file again: %q", buf)
	}
	if _, err := fh.ReadAt(buf[:4], 0); err != nil || string(buf[:4]) != "he\x00\x00" {
		t.Fatalf("head after truncate to 2 and back: %q, %v", buf[:4], err)
	}
	fh.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	m.Sync(t) // an unlink made in memory drops the chunks when its batch lands
	if got := mounttest.StoredChunks(t, f, ino); len(got) != 0 {
		t.Fatalf("chunks left after unlink: %v", got)
	}
	sizeAlive(t, m, w)

	// The limits, with the largest values the kernel passes on.
	p = m.Path("edge")
	fh, err = os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	fd := int(fh.Fd())
	for _, c := range []struct {
		name string
		do   func() error
		want syscall.Errno
	}{
		{"ftruncate to 2^63-1", func() error { return unix.Ftruncate(fd, math.MaxInt64) }, syscall.EFBIG},
		{"ftruncate to the maximum + 1", func() error { return unix.Ftruncate(fd, limit+1) }, syscall.EFBIG},
		{"truncate(2) to 2^63-1", func() error { return unix.Truncate(p, math.MaxInt64) }, syscall.EFBIG},
		{"ftruncate to -1", func() error { return unix.Ftruncate(fd, -1) }, syscall.EINVAL},
		{"pwrite at 2^63-2", func() error { _, err := unix.Pwrite(fd, []byte("x"), math.MaxInt64-1); return err }, syscall.EFBIG},
		{"pwrite at the maximum", func() error { _, err := unix.Pwrite(fd, []byte("x"), limit); return err }, syscall.EFBIG},
		{"pwrite of the last byte", func() error { _, err := unix.Pwrite(fd, []byte("z"), limit-1); return err }, 0},
		{"ftruncate to the maximum", func() error { return unix.Ftruncate(fd, limit) }, 0},
		{"fallocate", func() error { return unix.Fallocate(fd, 0, 0, 4096) }, syscall.EOPNOTSUPP},
	} {
		err := c.do()
		var got syscall.Errno
		if err != nil && !errors.As(err, &got) {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// A write across the limit is cut at it, as Linux cuts one at
	// s_maxbytes.
	if n, err := unix.Pwrite(fd, []byte("abcd"), limit-2); err != nil || n != 2 {
		t.Errorf("pwrite of 4 bytes 2 before the maximum: %d, %v; want 2 written", n, err)
	}
	if st, err := fh.Stat(); err != nil || st.Size() != limit {
		t.Errorf("size %v (%v), want %d", st.Size(), err, limit)
	}
	ap, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ap.Write([]byte("more")); !errors.Is(err, syscall.EFBIG) {
		t.Errorf("O_APPEND write to a file of the maximum size: %v, want EFBIG", err)
	}
	ap.Close()
	// Reads far out: the hole before the last bytes, and past the end.
	tail := make([]byte, 1<<20)
	n, err := fh.ReadAt(tail, limit-int64(len(tail)))
	if err != nil || n != len(tail) || !bytes.Equal(tail[len(tail)-2:], []byte("ab")) || !bytes.Equal(tail[:len(tail)-2], make([]byte, len(tail)-2)) {
		t.Errorf("reading the last MiB: %d bytes, %v, ends %q", n, err, tail[len(tail)-4:])
	}
	if n, err := unix.Pread(fd, tail, math.MaxInt64-int64(len(tail))); n != 0 || err != nil {
		t.Errorf("pread past the end: %d, %v", n, err)
	}
	fh.Close()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	sizeAlive(t, m, w)
}

// TestSizeHugeSparseCopy: cp of a sparse file of 1 TiB holding three chunks
// takes seconds, not the hours of reading its holes: the mount reports
// the blocks it stores (st_blocks) and answers SEEK_DATA and SEEK_HOLE
// from the chunks it stores, so cp copies only the data.
func TestSizeHugeSparseCopy(t *testing.T) {
	f := mounttest.NewFS(t)
	m, w := sizeMount(t, f)
	const size = 1 << 40
	mib := int64(1 << 20)
	src := m.Path("sparse")
	fh, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	offsets := []int64{0, 5*mib + 7, size / 2, size - 3}
	for _, off := range offsets {
		if _, err := fh.WriteAt([]byte("abc"), off); err != nil {
			t.Fatal(err)
		}
	}
	// Seeks on the open file see its own unflushed writes.
	for _, c := range []struct {
		whence int
		from   int64
		want   int64
	}{
		{unix.SEEK_DATA, 0, 0},
		{unix.SEEK_HOLE, 0, mib},
		{unix.SEEK_DATA, mib, 5 * mib},
		{unix.SEEK_DATA, 5*mib + 100, 5*mib + 100},
		{unix.SEEK_HOLE, 5 * mib, 6 * mib},
		{unix.SEEK_DATA, 6 * mib, size / 2},
		{unix.SEEK_DATA, size/2 + mib, size - mib},
		{unix.SEEK_HOLE, size - mib, size},
	} {
		got, err := unix.Seek(int(fh.Fd()), c.from, c.whence)
		if err != nil || got != c.want {
			t.Errorf("lseek(%d, whence %d) = %d, %v; want %d", c.from, c.whence, got, err, c.want)
		}
	}
	if _, err := unix.Seek(int(fh.Fd()), size, unix.SEEK_DATA); !errors.Is(err, syscall.ENXIO) {
		t.Errorf("SEEK_DATA at the end: %v, want ENXIO", err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(src, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("st_size %d, st_blocks %d", st.Size, st.Blocks)
	if st.Blocks*512 > 4*mib || st.Blocks == 0 {
		t.Errorf("st_blocks %d for 4 stored chunks", st.Blocks)
	}
	dst := filepath.Join(t.TempDir(), "copy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if out, err := exec.CommandContext(ctx, "cp", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp of the sparse file: %v (after %s)\n%s", err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("REPORT %s: cp of a 1 TiB file with 4 chunks stored: %s", t.Name(), time.Since(start).Round(time.Millisecond))
	g, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if st, err := g.Stat(); err != nil || st.Size() != size {
		t.Fatalf("copy: size %d, %v", st.Size(), err)
	}
	for _, off := range offsets {
		buf := make([]byte, 3)
		if _, err := g.ReadAt(buf, off); err != nil || string(buf) != "abc" {
			t.Errorf("copy at %d: %q, %v", off, buf, err)
		}
	}
	// copy_file_range(2) within the mount, in a loop as its callers must.
	start = time.Now()
	script := `
import os, sys
a = os.open(sys.argv[1], os.O_RDONLY)
b = os.open(sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
left = os.fstat(a).st_size
while left > 0:
    n = os.copy_file_range(a, b, left)
    if n == 0:
        break
    left -= n
os.close(b)
`
	if out, err := exec.CommandContext(ctx, "python3", "-c", script, src, m.Path("copy")).CombinedOutput(); err != nil {
		t.Fatalf("copy_file_range of the sparse file: %v (after %s)\n%s", err, time.Since(start).Round(time.Millisecond), out)
	}
	t.Logf("REPORT %s: copy_file_range of a 1 TiB file with 4 chunks stored, within the mount: %s", t.Name(), time.Since(start).Round(time.Millisecond))
	h, err := os.Open(m.Path("copy"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if st, err := h.Stat(); err != nil || st.Size() != size {
		t.Fatalf("copy_file_range copy: size %d, %v", st.Size(), err)
	}
	for _, off := range offsets {
		buf := make([]byte, 3)
		if _, err := h.ReadAt(buf, off); err != nil || string(buf) != "abc" {
			t.Errorf("copy_file_range copy at %d: %q, %v", off, buf, err)
		}
	}
	// Into bytes the destination holds: the kernel's fallback does it.
	if err := os.WriteFile(m.Path("over"), []byte("zzzzzz"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.OpenFile(m.Path("over"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	inOff, outOff := int64(0), int64(1)
	if n, err := unix.CopyFileRange(int(a.Fd()), &inOff, int(b.Fd()), &outOff, 3, 0); err != nil || n != 3 {
		t.Errorf("copy_file_range over existing bytes: %d, %v", n, err)
	}
	b.Close()
	if got := mounttest.MustReadFile(t, m.Path("over")); string(got) != "zabczz" {
		t.Errorf("copy_file_range over existing bytes: %q, want %q", got, "zabczz")
	}
	sizeAlive(t, m, w)
}

// TestSizeSeekDataAtBlockSize: SEEK_DATA from the middle of a hole answers
// where the data is at the block size the file reports (st_blksize): at
// most one block before the data's offset, on a block boundary, and the
// next hole is past the data; as the file is written (buffered) and once
// reopened. cp --sparse=always and tar --sparse copy it whole and sparse.
func TestSizeSeekDataAtBlockSize(t *testing.T) {
	f := mounttest.NewFS(t)
	m, w := sizeMount(t, f)
	const mib = 1 << 20
	const size = 40 * mib
	offsets := []int64{5*mib + 600<<10 + 7, 12*mib + 300<<10, 30*mib + mib - 5}
	p := m.Path("sparse")
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := fh.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for _, off := range offsets {
		if _, err := fh.WriteAt([]byte("data"), off); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string, fh *os.File) {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Fstat(int(fh.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		bs := int64(st.Blksize)
		from := int64(0)
		for _, off := range offsets {
			from = (from + off) / 2 // in the hole before the data
			d, err := unix.Seek(int(fh.Fd()), from, unix.SEEK_DATA)
			if err != nil || d > off || off-d >= bs || (d%bs != 0 && d != off) {
				t.Errorf("%s: SEEK_DATA from %d = %d, %v; the data is at %d, st_blksize %d: want the data's offset, or the start of the block of st_blksize holding it",
					when, from, d, err, off, bs)
				continue
			}
			if h, err := unix.Seek(int(fh.Fd()), d, unix.SEEK_HOLE); err != nil || h <= off {
				t.Errorf("%s: SEEK_HOLE from %d = %d, %v; want past the data at %d", when, d, h, err, off)
			}
			from = off + 4
		}
	}
	check("written, not flushed", fh)
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	fh, err = os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	check("reopened", fh)

	dir := t.TempDir()
	mounttest.Sh(t, dir, fmt.Sprintf("cp --sparse=always %q cp; tar -S -C %q -cf - sparse | tar -xf -; mv sparse tar", p, m.Dir))
	for _, copied := range []string{"cp", "tar"} {
		mounttest.Sh(t, dir, fmt.Sprintf("cmp %q %s", p, copied))
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, copied), &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > int64(len(offsets)+1)*mib {
			t.Errorf("the copy by %s stores %d bytes of a file holding %d chunks", copied, st.Blocks*512, len(offsets))
		}
	}
	sizeAlive(t, m, w)
}

// TestSizeXattrLimits: Linux's limits on extended attributes hold (names of
// 255 bytes, values of 64 KiB), and every file's attributes can always be
// listed: their names together stay within what listxattr may return (64
// KiB), and names and values within 128 KiB per file, which the inode
// document carries. Past that, ENOSPC, as a full local filesystem says.
func TestSizeXattrLimits(t *testing.T) {
	f := mounttest.NewFS(t)
	m, w := sizeMount(t, f)
	p := m.Path("x")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("v"), 64<<10)
	long := "user." + strings.Repeat("n", 250)
	for _, c := range []struct {
		name  string
		attr  string
		value []byte
		want  syscall.Errno
	}{
		{"a value of 64 KiB", "user.big", big, 0},
		{"a value of 64 KiB + 1", "user.bigger", append(big, 'x'), syscall.E2BIG},
		{"a name of 255 bytes", long, []byte("v"), 0},
		{"a name of 256 bytes", long + "n", []byte("v"), syscall.ERANGE},
		{"a second value of 64 KiB", "user.big2", big, syscall.ENOSPC},
	} {
		err := unix.Setxattr(p, c.attr, c.value, 0)
		var got syscall.Errno
		if err != nil && !errors.As(err, &got) {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got != c.want {
			t.Errorf("setxattr, %s: %v, want %v", c.name, err, c.want)
		}
	}
	buf := make([]byte, 64<<10)
	if n, err := unix.Getxattr(p, "user.big", buf); err != nil || !bytes.Equal(buf[:n], big) {
		t.Errorf("getxattr of the 64 KiB value: %d bytes, %v", n, err)
	}
	// Many long names: the list fills before the space does.
	q := m.Path("names")
	if err := os.WriteFile(q, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	set := 0
	for i := 0; ; i++ {
		name := fmt.Sprintf("user.%03d%s", i, strings.Repeat("n", 247))
		err := unix.Setxattr(q, name, []byte("v"), 0)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			t.Fatalf("setxattr of name %d: %v", i, err)
		}
		set++
		if set > 400 {
			t.Fatalf("%d names of 255 bytes (%d bytes of list) taken: the list can no longer be read", set, set*256)
		}
	}
	n, err := unix.Listxattr(q, make([]byte, 64<<10))
	if err != nil {
		t.Fatalf("listxattr after %d names of 255 bytes: %v", set, err)
	}
	t.Logf("%d names of 255 bytes taken, a list of %d bytes", set, n)
	sizeAlive(t, m, w)
}

// TestSizeReaddirFarOffset: a directory read from an offset far past its
// entries (a seekdir with a huge cookie) costs the directory, not the
// offset: it ends at once with no entries.
func TestSizeReaddirFarOffset(t *testing.T) {
	f := mounttest.NewFS(t)
	m, w := sizeMount(t, f)
	mounttest.Sh(t, m.Dir, `mkdir d && touch d/a d/b d/c`)
	fd, err := unix.Open(m.Path("d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for _, off := range []int64{math.MaxInt64, 1 << 62, 5} {
		if _, err := unix.Seek(fd, off, unix.SEEK_SET); err != nil {
			t.Fatalf("seekdir to %d: %v", off, err)
		}
		n, err := unix.Getdents(fd, make([]byte, 4096))
		if err != nil || n != 0 {
			t.Errorf("getdents at offset %d: %d bytes, %v; want the end", off, n, err)
		}
	}
	sizeAlive(t, m, w)
}
