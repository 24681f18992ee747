package test

// A generated tree for differential tests (esfs find and du against GNU
// find and du through a mount): every file type, sizes from empty to
// huge and sparse, owners with and without names, every mode bit, times
// past and future (and at day and minute boundaries), hard links, deep
// and wide directories, and names with spaces, newlines, glob
// characters, other scripts and bytes that are not UTF-8.

import (
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// diffTree is what makeDiffTree made, relative to its root ("" is the
// root): for the tests to pick starting points, names and reference
// files from.
type diffTree struct {
	Root  string
	Dirs  []string // the root first
	Files []string // everything but directories
	Names []string // every name used (for patterns)
	Built time.Time
}

// diffNames are the names a tree draws from (each made unique in its
// directory by a suffix when drawn twice).
var diffNames = []string{
	"a", "b", "ab", "Abc", "abc", "ABC", "readme", "README", "x.txt", "y.TXT", "data.bin", "core",
	"f1", "f10", "f2", ".hidden", "..dots", "with space", " lead", "trail ", "tab\tname", "new\nline",
	"star*", "q?", "br[ak]et", "back\\slash", "é", "É", "ÉCOLE", "straße", "Kelvin\u212a", "İstanbul",
	"日本語", "bad\xff", "bad\x80x", "mixé\xfe", "-dash", "+plus", "%pct", "!bang", "(paren)",
	"100%", "a.b.c", "Makefile", "main.go", "main_test.go", "notes.md", "photo.JPG", "z",
	strings.Repeat("long", 50),
}

// makeDiffTree writes a tree under root (an existing directory, through
// a mount) from seed, as root with any owner and mode: about 350 entries.
func makeDiffTree(t *testing.T, root string, seed int64) *diffTree {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	tr := &diffTree{Root: root, Dirs: []string{""}}
	used := map[string]bool{}
	// name draws a name not yet used in dir.
	name := func(dir string) string {
		for i := 0; ; i++ {
			n := diffNames[rng.Intn(len(diffNames))]
			if i > 0 || rng.Intn(4) == 0 {
				n = fmt.Sprintf("%s%d", n, rng.Intn(100))
			}
			rel := filepath.Join(dir, n)
			if !used[rel] {
				used[rel] = true
				tr.Names = append(tr.Names, n)
				return rel
			}
		}
	}
	abs := func(rel string) string { return filepath.Join(root, rel) }
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("building the tree (seed %d): %s: %v", seed, what, err)
		}
	}
	mkdir := func(rel string) {
		must("mkdir "+rel, os.Mkdir(abs(rel), 0o755))
		tr.Dirs = append(tr.Dirs, rel)
	}
	sizes := []int64{0, 0, 0, 1, 2, 100, 511, 512, 513, 1023, 1024, 1025, 2047, 2048, 4096, 10000,
		1<<20 - 1, 1 << 20, 1<<20 + 1, 3 << 20, 100 << 20, 1<<31 + 1, 5 << 30}
	file := func(rel string) {
		size := sizes[rng.Intn(len(sizes))]
		f, err := os.OpenFile(abs(rel), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		must("create "+rel, err)
		switch {
		case size == 0:
		case size <= 1<<20+1 && rng.Intn(3) > 0:
			// Written: its chunks are stored (st_blocks counts them).
			_, err = f.Write([]byte(strings.Repeat("x", int(size))))
			must("write "+rel, err)
		default:
			// Sparse: holes, or one byte at a random place.
			if rng.Intn(2) == 0 {
				_, err = f.WriteAt([]byte{'y'}, rng.Int63n(size))
				must("write "+rel, err)
			}
			must("truncate "+rel, f.Truncate(size))
		}
		must("close "+rel, f.Close())
		tr.Files = append(tr.Files, rel)
	}
	special := func(rel string) {
		modes := []uint32{syscall.S_IFIFO, syscall.S_IFSOCK, syscall.S_IFCHR, syscall.S_IFBLK}
		m := modes[rng.Intn(len(modes))]
		dev := 0
		if m == syscall.S_IFCHR || m == syscall.S_IFBLK {
			dev = int(unix.Mkdev(uint32(1+rng.Intn(8)), uint32(rng.Intn(256))))
		}
		must("mknod "+rel, syscall.Mknod(abs(rel), m|0o640, dev))
		tr.Files = append(tr.Files, rel)
	}
	symlink := func(rel string) {
		targets := []string{"a", "../x.txt", "/etc/passwd", "nowhere", "dir/sub", strings.Repeat("t", 300), "é\xff"}
		must("symlink "+rel, os.Symlink(targets[rng.Intn(len(targets))], abs(rel)))
		tr.Files = append(tr.Files, rel)
	}
	entry := func(dir string) {
		rel, k := name(dir), rng.Intn(20)
		switch {
		case k < 12:
			file(rel)
		case k < 15:
			symlink(rel)
		case k < 18:
			special(rel)
		default:
			mkdir(rel)
		}
	}
	// Mixed directories, some nested, some empty.
	for i := 0; i < 8; i++ {
		parent := tr.Dirs[rng.Intn(len(tr.Dirs))]
		d := name(parent)
		mkdir(d)
		for j := rng.Intn(30); j > 0; j-- {
			entry(d)
		}
	}
	// A deep chain, a file at every level.
	deep := name("")
	mkdir(deep)
	for i := 0; i < 14; i++ {
		deep = filepath.Join(deep, fmt.Sprintf("level%d", i))
		mkdir(deep)
		file(name(deep))
	}
	// A wide directory.
	wide := name("")
	mkdir(wide)
	for i := 0; i < 100; i++ {
		rel := filepath.Join(wide, fmt.Sprintf("w%03d", i))
		used[rel] = true
		if i%30 == 0 {
			mkdir(rel)
			continue
		}
		f, err := os.Create(abs(rel))
		must("create "+rel, err)
		if i%7 == 0 {
			_, err = f.WriteString(strings.Repeat("w", i))
			must("write "+rel, err)
		}
		must("close "+rel, f.Close())
		tr.Files = append(tr.Files, rel)
	}
	for i := 0; i < 20; i++ {
		entry(tr.Dirs[rng.Intn(len(tr.Dirs))])
	}
	// Hard links, in the same directory and in others.
	var regular []string
	for _, f := range tr.Files {
		if st, err := os.Lstat(abs(f)); err == nil && st.Mode().IsRegular() {
			regular = append(regular, f)
		}
	}
	for i := 0; i < 25 && len(regular) > 0; i++ {
		src := regular[rng.Intn(len(regular))]
		rel := name(tr.Dirs[rng.Intn(len(tr.Dirs))])
		must("link "+rel, os.Link(abs(src), abs(rel)))
		tr.Files = append(tr.Files, rel)
	}
	// Owners (some without a name on this machine), then modes (a chown
	// clears setuid and setgid), then times, last (making entries changed
	// their directories' times).
	ids := []int{0, 0, 0, 1, 2, 65534, 1000, 12345, 54321, 4000000000}
	all := append(append([]string{}, tr.Dirs[1:]...), tr.Files...)
	for _, rel := range all {
		if rng.Intn(3) == 0 {
			must("chown "+rel, os.Lchown(abs(rel), ids[rng.Intn(len(ids))], ids[rng.Intn(len(ids))]))
		}
	}
	modes := []uint32{0o644, 0o755, 0o600, 0o700, 0o777, 0o000, 0o444, 0o4755, 0o2755, 0o1777, 0o6711, 0o7777, 0o640, 0o711, 0o4000, 0o1000}
	for _, rel := range all {
		st, err := os.Lstat(abs(rel))
		must("lstat "+rel, err)
		if st.Mode()&os.ModeSymlink != 0 || rng.Intn(2) == 0 {
			continue
		}
		mode := modes[rng.Intn(len(modes))]
		if st.IsDir() {
			mode |= 0o700 // the test walks it as root, but keep it listable by the owner
		}
		must("chmod "+rel, syscall.Chmod(abs(rel), mode))
	}
	tr.Built = time.Now()
	const day = 24 * time.Hour
	offsets := []time.Duration{0, -time.Second, -59 * time.Second, -61 * time.Second, -time.Hour, -day, -day - time.Second,
		-day + time.Second, -2 * day, -7 * day, -30 * day, -400 * day, -3650 * day, day, 3650 * day, -90 * time.Minute}
	pick := func() time.Time {
		switch rng.Intn(10) {
		case 0:
			return time.Date(1969, 12, 31, 23, 59, 59, 500000000, time.UTC)
		case 1:
			return time.Unix(0, 0)
		case 2:
			return time.Date(1960, 1, 1, 0, 0, 0, 250000000, time.UTC)
		}
		return tr.Built.Add(offsets[rng.Intn(len(offsets))]).Add(time.Duration(rng.Intn(1000)) * time.Millisecond)
	}
	for i := len(all) - 1; i >= 0; i-- {
		rel := all[i]
		if rng.Intn(4) == 0 {
			continue
		}
		ts := []unix.Timespec{unix.NsecToTimespec(pick().UnixNano()), unix.NsecToTimespec(pick().UnixNano())}
		must("utimensat "+rel, unix.UtimesNanoAt(unix.AT_FDCWD, abs(rel), ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return tr
}
