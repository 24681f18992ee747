package test

// Everything a filesystem keeps must survive an unmount and a new mount:
// contents, sizes, holes, modes, owners, times, link counts, symlink
// targets, inode numbers and extended attributes.

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// rmtEntry is what stat, readlink, a read and the xattr calls say about one path.
type rmtEntry struct {
	Ino, Nlink          uint64
	Mode                uint32 // with the type bits
	Uid, Gid            uint32
	Size, Blocks        int64
	Atime, Mtime, Ctime int64 // ns
	Target              string
	SHA256              string
	Xattrs              map[string]string
}

func (e rmtEntry) String() string {
	keys := make([]string, 0, len(e.Xattrs))
	for k := range e.Xattrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var xs []string
	for _, k := range keys {
		xs = append(xs, fmt.Sprintf("%s=%q", k, e.Xattrs[k]))
	}
	return fmt.Sprintf("ino=%d nlink=%d mode=%o uid=%d gid=%d size=%d blocks=%d atime=%d mtime=%d ctime=%d target=%q sha256=%.16s xattrs=[%s]",
		e.Ino, e.Nlink, e.Mode, e.Uid, e.Gid, e.Size, e.Blocks, e.Atime, e.Mtime, e.Ctime, e.Target, e.SHA256, strings.Join(xs, " "))
}

func rmtNs(ts syscall.Timespec) int64 { return ts.Sec*1e9 + ts.Nsec }

// rmtXattrs lists and reads the extended attributes of a file or directory.
func rmtXattrs(t *testing.T, path string) map[string]string {
	t.Helper()
	size, err := syscall.Listxattr(path, nil)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	out := map[string]string{}
	if size == 0 {
		return out
	}
	buf := make([]byte, size)
	size, err = syscall.Listxattr(path, buf)
	if err != nil {
		t.Fatalf("listxattr %s: %v", path, err)
	}
	for _, name := range strings.Split(strings.TrimSuffix(string(buf[:size]), "\x00"), "\x00") {
		vsize, err := syscall.Getxattr(path, name, nil)
		if err != nil {
			t.Fatalf("getxattr %s %s: %v", path, name, err)
		}
		v := make([]byte, vsize)
		if vsize > 0 {
			if vsize, err = syscall.Getxattr(path, name, v); err != nil {
				t.Fatalf("getxattr %s %s: %v", path, name, err)
			}
		}
		out[name] = string(v[:vsize])
	}
	return out
}

// rmtSnapshot describes every path below root (root itself is ".").
func rmtSnapshot(t *testing.T, root string) map[string]rmtEntry {
	t.Helper()
	out := map[string]rmtEntry{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		e := rmtEntry{Ino: st.Ino, Nlink: uint64(st.Nlink), Mode: st.Mode, Uid: st.Uid, Gid: st.Gid, Size: st.Size, Blocks: st.Blocks,
			Atime: rmtNs(st.Atim), Mtime: rmtNs(st.Mtim), Ctime: rmtNs(st.Ctim)}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFLNK:
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if int64(len(b)) != st.Size {
				t.Errorf("%s: read %d bytes, stat says %d", rel, len(b), st.Size)
			}
			sum := sha256.Sum256(b)
			e.SHA256 = hex.EncodeToString(sum[:])
			e.Xattrs = rmtXattrs(t, p)
		default:
			e.Xattrs = rmtXattrs(t, p)
		}
		out[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func rmtHash(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestTypesAllKeptAcrossRemount fills a filesystem with every kind of
// thing it stores, checks it, unmounts, mounts again and finds every stat
// field, content, link target and xattr identical.
func TestTypesAllKeptAcrossRemount(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	p := func(rel string) string { return m.Path(rel) }
	for _, d := range []string{"files", "dirs", "dirs/a", "dirs/a/b", "dirs/a/b/c", "dirs/sticky", "dirs/setgid", "dirs/private", "dirs/empty", "links"} {
		if err := os.Mkdir(p(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	content := map[string][]byte{} // expected contents of regular files
	put := func(rel string, b []byte, mode os.FileMode) {
		t.Helper()
		mounttest.WriteFileMode(t, p(rel), b, mode)
		content[rel] = b
	}
	put("files/small.txt", []byte("hello\n"), 0o644)
	put("files/empty", nil, 0o644)
	put("files/multi.bin", mounttest.RandomBytes(1, 6<<20+333), 0o644)
	put("files/one-chunk.bin", mounttest.RandomBytes(2, 1<<20), 0o644)
	put("files/exec.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	put("files/setuid", []byte("setuid program\n"), 0o4755)
	put("files/private", []byte("secret\n"), 0o600)
	put("files/owned", []byte("owned by someone else\n"), 0o640)
	put("files/name with spaces", []byte("spaces\n"), 0o644)
	put("files/ünïcødé-名前", []byte("unicode\n"), 0o644)
	put("files/caf\xe9", []byte("latin-1 name\n"), 0o644)
	put("files/hard-a", []byte("two names\n"), 0o644)
	put("files/tri-1", []byte("three names, then two\n"), 0o644)
	put("files/before-rename", []byte("renamed\n"), 0o644)

	// Rewritten in place: a write across a chunk boundary and an append.
	rmw := mounttest.RandomBytes(3, 3<<20)
	put("files/rmw.bin", rmw, 0o644)
	patch := bytes.Repeat([]byte{'P'}, 100)
	func() {
		fh, err := os.OpenFile(p("files/rmw.bin"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt(patch, 1<<20-50); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		fa, err := os.OpenFile(p("files/rmw.bin"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fa.Write([]byte("appended!!")); err != nil {
			t.Fatal(err)
		}
		if err := fa.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	rmw = append(append([]byte(nil), rmw...), "appended!!"...)
	copy(rmw[1<<20-50:], patch)
	content["files/rmw.bin"] = rmw

	// Shrunk mid-chunk, then grown: the grown part reads as zeros.
	tr := mounttest.RandomBytes(4, 3<<20)
	put("files/truncated.bin", tr, 0o644)
	if err := os.Truncate(p("files/truncated.bin"), 3<<19+3); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p("files/truncated.bin"), 2<<20); err != nil {
		t.Fatal(err)
	}
	content["files/truncated.bin"] = append(append([]byte(nil), tr[:3<<19+3]...), make([]byte, 2<<20-(3<<19+3))...)

	// Sparse: data at 0 and past 9 MiB, holes between; and a file that is
	// all hole.
	func() {
		fh, err := os.Create(p("files/sparse.bin"))
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt([]byte("start"), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := fh.WriteAt([]byte("x"), 9<<20+5); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	sparse := make([]byte, 9<<20+6)
	copy(sparse, "start")
	sparse[9<<20+5] = 'x'
	content["files/sparse.bin"] = sparse
	put("files/all-hole", nil, 0o644)
	if err := os.Truncate(p("files/all-hole"), 4<<20); err != nil {
		t.Fatal(err)
	}
	content["files/all-hole"] = make([]byte, 4<<20)

	// Links.
	if err := os.Link(p("files/hard-a"), p("dirs/a/hard-b")); err != nil {
		t.Fatal(err)
	}
	content["dirs/a/hard-b"] = content["files/hard-a"]
	for _, n := range []string{"files/tri-2", "files/tri-3"} {
		if err := os.Link(p("files/tri-1"), p(n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(p("files/tri-2")); err != nil {
		t.Fatal(err)
	}
	content["files/tri-3"] = content["files/tri-1"]
	if err := os.Rename(p("files/before-rename"), p("dirs/a/b/after-rename")); err != nil {
		t.Fatal(err)
	}
	content["dirs/a/b/after-rename"] = content["files/before-rename"]
	delete(content, "files/before-rename")
	targets := map[string]string{
		"links/rel":      "../files/small.txt",
		"links/abs":      "/etc/passwd",
		"links/dangling": "nowhere/at/all",
		"links/dir":      "../dirs/a",
		"links/long":     strings.Repeat("x/", 500) + "end",
		"dirs/a/b/c/up":  "../../../../files/multi.bin",
	}
	for n, target := range targets {
		if err := os.Symlink(target, p(n)); err != nil {
			t.Fatal(err)
		}
	}

	// Modes and owners.
	for rel, mode := range map[string]os.FileMode{"dirs/sticky": 0o1777, "dirs/setgid": 0o2755, "dirs/private": 0o700} {
		// os.Chmod takes Go's mode bits; syscall.Chmod the POSIX ones.
		if err := syscall.Chmod(p(rel), uint32(mode)); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Chmod(p("files/setuid"), 0o4755); err != nil {
		t.Fatal(err)
	}
	mounttest.Sh(t, m.Dir, "chown 1234:5678 files/owned dirs/setgid && chown -h 1234:5678 links/rel && chown 4321 dirs/a/b")

	// Extended attributes, one of them replaced and one removed.
	setx := func(rel, name string, v []byte) {
		t.Helper()
		if err := syscall.Setxattr(p(rel), name, v, 0); err != nil {
			t.Fatalf("setxattr %s %s: %v", rel, name, err)
		}
	}
	big := strings.Repeat("0123456789abcdef", 256) // 4 KiB
	setx("files/small.txt", "user.greeting", []byte("hello"))
	setx("files/small.txt", "user.binary", []byte("\x00\x01\xfe\xff binary\x00"))
	setx("files/small.txt", "user.big", []byte(big))
	setx("files/small.txt", "user.empty", nil)
	setx("files/multi.bin", "user.replaced", []byte("old"))
	setx("files/multi.bin", "user.replaced", []byte("new value"))
	setx("files/multi.bin", "user.removed", []byte("gone"))
	if err := syscall.Removexattr(p("files/multi.bin"), "user.removed"); err != nil {
		t.Fatal(err)
	}
	setx("dirs/a", "user.dir", []byte("on a directory"))
	setx("files/hard-a", "user.shared", []byte("seen through both names"))
	wantX := map[string]map[string]string{
		"files/small.txt": {"user.greeting": "hello", "user.binary": "\x00\x01\xfe\xff binary\x00", "user.big": big, "user.empty": ""},
		"files/multi.bin": {"user.replaced": "new value"},
		"dirs/a":          {"user.dir": "on a directory"},
		"files/hard-a":    {"user.shared": "seen through both names"},
		"dirs/a/hard-b":   {"user.shared": "seen through both names"},
	}

	// Times last, directories after their contents; the root too.
	mounttest.Sh(t, m.Dir, `
touch -d '2001-02-03 04:05:06.123456789' files/multi.bin files/sparse.bin files/all-hole
touch -m -d '2010-10-10 10:10:10.101010101' files/small.txt
touch -a -d '2000-01-01 00:00:00.000000001' files/small.txt
touch -d '1980-01-01 00:00:00' files/exec.sh
touch -d '2099-12-31 23:59:59.999999999' files/private
touch -h -d '2002-03-04 05:06:07.890123456' links/rel links/dangling links/long
touch -d '2005-05-05 05:05:05.000000005' dirs/a/b/c dirs/a/b dirs/a dirs/empty dirs/sticky
touch -d '2006-06-06 06:06:06.6' files links dirs .
`)

	before := rmtSnapshot(t, m.Dir)
	// What the first mount shows must be what was done, not merely what
	// the second mount shows.
	check := func(snap map[string]rmtEntry, which string) {
		t.Helper()
		for rel, b := range content {
			e, ok := snap[rel]
			if !ok {
				t.Errorf("%s: %s is missing", which, rel)
				continue
			}
			if e.SHA256 != rmtHash(b) || e.Size != int64(len(b)) {
				t.Errorf("%s: %s has %d bytes with sha256 %.16s; want %d bytes with %.16s", which, rel, e.Size, e.SHA256, len(b), rmtHash(b))
			}
		}
		for rel, target := range targets {
			if e := snap[rel]; e.Mode&syscall.S_IFMT != syscall.S_IFLNK || e.Target != target {
				t.Errorf("%s: %s is mode %o with target %q; want a symlink to %q", which, rel, e.Mode, e.Target, target)
			}
		}
		for rel, want := range map[string]uint32{
			"files/small.txt": syscall.S_IFREG | 0o644, "files/exec.sh": syscall.S_IFREG | 0o755,
			"files/setuid": syscall.S_IFREG | 0o4755, "files/private": syscall.S_IFREG | 0o600,
			"files/owned": syscall.S_IFREG | 0o640, "dirs/sticky": syscall.S_IFDIR | 0o1777,
			"dirs/setgid": syscall.S_IFDIR | 0o2755, "dirs/private": syscall.S_IFDIR | 0o700,
		} {
			if got := snap[rel].Mode; got != want {
				t.Errorf("%s: %s has mode %o, want %o", which, rel, got, want)
			}
		}
		for rel, want := range map[string][2]uint32{
			"files/owned": {1234, 5678}, "dirs/setgid": {1234, 5678}, "links/rel": {1234, 5678},
			"dirs/a/b": {4321, 0}, "files/small.txt": {0, 0},
		} {
			if e := snap[rel]; e.Uid != want[0] || e.Gid != want[1] {
				t.Errorf("%s: %s is owned by %d:%d, want %d:%d", which, rel, e.Uid, e.Gid, want[0], want[1])
			}
		}
		mtime := func(s string) int64 {
			tm, err := time.ParseInLocation("2006-01-02 15:04:05.999999999", s, time.Local)
			if err != nil {
				t.Fatal(err)
			}
			return tm.UnixNano()
		}
		for rel, want := range map[string]int64{
			"files/multi.bin": mtime("2001-02-03 04:05:06.123456789"), "files/small.txt": mtime("2010-10-10 10:10:10.101010101"),
			"files/exec.sh": mtime("1980-01-01 00:00:00"), "files/private": mtime("2099-12-31 23:59:59.999999999"),
			"links/rel": mtime("2002-03-04 05:06:07.890123456"), "dirs/a/b/c": mtime("2005-05-05 05:05:05.000000005"),
			"dirs/a": mtime("2005-05-05 05:05:05.000000005"), ".": mtime("2006-06-06 06:06:06.6"),
		} {
			if got := snap[rel].Mtime; got != want {
				t.Errorf("%s: %s has mtime %s, want %s", which, rel, time.Unix(0, got), time.Unix(0, want))
			}
		}
		if got, want := snap["files/small.txt"].Atime, mtime("2000-01-01 00:00:00.000000001"); got != want {
			t.Errorf("%s: files/small.txt has atime %s, want %s", which, time.Unix(0, got), time.Unix(0, want))
		}
		for _, pair := range [][2]string{{"files/hard-a", "dirs/a/hard-b"}, {"files/tri-1", "files/tri-3"}} {
			a, b := snap[pair[0]], snap[pair[1]]
			if a.Ino != b.Ino || a.Nlink != 2 || b.Nlink != 2 {
				t.Errorf("%s: %s and %s are inodes %d and %d with %d and %d links; want one inode with 2", which, pair[0], pair[1], a.Ino, b.Ino, a.Nlink, b.Nlink)
			}
		}
		if _, ok := snap["files/tri-2"]; ok {
			t.Errorf("%s: the removed link files/tri-2 is back", which)
		}
		for rel, want := range wantX {
			got := snap[rel].Xattrs
			if len(got) != len(want) {
				t.Errorf("%s: %s has xattrs %q, want %q", which, rel, got, want)
				continue
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %s xattr %s = %q, want %q", which, rel, k, got[k], v)
				}
			}
		}
	}
	check(before, "first mount")
	if t.Failed() {
		t.FailNow()
	}

	m.Unmount(t)
	m2 := f.Mount(t)
	after := rmtSnapshot(t, m2.Dir)
	check(after, "after remount")
	paths := make([]string, 0, len(before))
	for rel := range before {
		paths = append(paths, rel)
	}
	sort.Strings(paths)
	for _, rel := range paths {
		a, ok := after[rel]
		if !ok {
			t.Errorf("%s is gone after the remount", rel)
			continue
		}
		if b := before[rel]; b.String() != a.String() {
			t.Errorf("%s changed across the remount:\nbefore: %v\nafter:  %v", rel, b, a)
		}
	}
	for rel := range after {
		if _, ok := before[rel]; !ok {
			t.Errorf("%s appeared after the remount: %v", rel, after[rel])
		}
	}
	if len(before) < 35 {
		t.Errorf("the snapshot has only %d entries", len(before))
	}
	// Reading everything again did not change anything either (noatime).
	again := rmtSnapshot(t, m2.Dir)
	for rel, a := range after {
		if again[rel].String() != a.String() {
			t.Errorf("%s changed by being read:\nbefore: %v\nafter:  %v", rel, a, again[rel])
		}
	}
	mounttest.FsckClean(t, f)
}
