package test

// Truncation through a descriptor: bytes cut away stay cut, whoever wrote
// them and however they reached the store (held for a batch made in
// memory, written straight to the store, by this mount or another), on
// every mount and after a remount.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// truncCase is one sequence of calls on a new file through one descriptor.
type truncCase struct {
	name string
	do   func(fh *os.File) error
	want []byte
}

// truncCases: write, fsync, cut and grow again, in the shapes a user
// makes (log rotation by truncation, a database shrinking its file).
func truncCases(cs int) []truncCase {
	old := bytes.Repeat([]byte("0123456789"), 4) // 40 bytes
	big := make([]byte, 2*cs+cs/2)
	for i := range big {
		big[i] = byte('a' + i%26)
	}
	grown := func(keep []byte, size int) []byte {
		b := make([]byte, size)
		copy(b, keep)
		return b
	}
	writeSync := func(fh *os.File, b []byte) error {
		if _, err := fh.Write(b); err != nil {
			return err
		}
		return fh.Sync()
	}
	truncs := func(fh *os.File, sizes ...int64) error {
		for _, s := range sizes {
			if err := fh.Truncate(s); err != nil {
				return fmt.Errorf("ftruncate to %d: %w", s, err)
			}
		}
		return nil
	}
	return []truncCase{
		{"cut-in-chunk", func(fh *os.File) error {
			if err := writeSync(fh, old); err != nil {
				return err
			}
			return truncs(fh, 4, 50)
		}, grown(old[:4], 50)},
		{"cut-to-zero", func(fh *os.File) error {
			if err := writeSync(fh, old); err != nil {
				return err
			}
			return truncs(fh, 0, 50)
		}, grown(nil, 50)},
		{"cut-across-chunks", func(fh *os.File) error {
			if err := writeSync(fh, big); err != nil {
				return err
			}
			return truncs(fh, int64(cs/2), int64(len(big)))
		}, grown(big[:cs/2], len(big))},
		{"cut-whole-chunks", func(fh *os.File) error {
			if err := writeSync(fh, big); err != nil {
				return err
			}
			return truncs(fh, int64(cs), int64(len(big)))
		}, grown(big[:cs], len(big))},
		{"unsynced-cut", func(fh *os.File) error {
			if _, err := fh.Write(old); err != nil {
				return err
			}
			return truncs(fh, 4, 50)
		}, grown(old[:4], 50)},
		{"cut-then-write", func(fh *os.File) error {
			if err := writeSync(fh, old); err != nil {
				return err
			}
			if err := truncs(fh, 4); err != nil {
				return err
			}
			_, err := fh.WriteAt([]byte("xy"), 48)
			return err
		}, append(grown(old[:4], 48), 'x', 'y')},
	}
}

// TestTruncateCutBytesStayCut: a file written and fsynced through a
// descriptor, then cut by ftruncate and grown again, reads zeros where
// the cut bytes were: on the writing mount, on other mounts and after a
// remount. In a directory the writing mount made (a write delegation:
// the file's chunks went with its batch), in one another mount made, and
// on a mount without write delegations. (The chunks a batch wrote and
// the truncate's own chunk writes once shared a data version, so the cut
// was refused as if a newer writer had rewritten the chunk: the 40 old
// bytes came back.)
func TestTruncateCutBytesStayCut(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	b := f.Mount(t)
	c := f.Mount(t, "--write-delegations=false")
	for _, m := range []*mounttest.Mount{a, b, c} {
		if err := os.Mkdir(m.Path(filepath.Base(m.Dir)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	byA, byB, byC := filepath.Base(a.Dir), filepath.Base(b.Dir), filepath.Base(c.Dir)
	b.Sync(t)
	c.Sync(t)
	type written struct {
		path string // relative to a mount point
		want []byte
	}
	var all []written
	cs := int(f.Store.ChunkSize())
	const rounds = 4
	for _, w := range []struct {
		what string
		m    *mounttest.Mount
		dir  string
	}{
		{"a directory the mount made", a, byA},
		{"a directory another mount made", a, byB},
		{"a mount without write delegations", c, byC},
	} {
		for r := 0; r < rounds; r++ {
			for _, tc := range truncCases(cs) {
				rel := filepath.Join(w.dir, fmt.Sprintf("%s-%d", tc.name, r))
				fh, err := os.OpenFile(w.m.Path(rel), os.O_CREATE|os.O_RDWR|os.O_EXCL, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				err = tc.do(fh)
				if cerr := fh.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Fatalf("%s, %s: %v", w.what, rel, err)
				}
				if got, err := os.ReadFile(w.m.Path(rel)); err != nil || !bytes.Equal(got, tc.want) {
					t.Errorf("%s, %s on the writing mount: %s", w.what, rel, differs(got, tc.want, err))
				}
				all = append(all, written{rel, tc.want})
			}
		}
	}
	// Every mount: at once with read delegations (the writers' closes
	// recalled them); within the staleness bound without.
	check := func(ms ...*mounttest.Mount) {
		t.Helper()
		var bad []string
		mounttest.WaitFor(t, "the cut files on every mount", staleBound+slack+10*time.Second, func() bool {
			bad = bad[:0]
			for _, m := range ms {
				for _, w := range all {
					got, err := os.ReadFile(m.Path(w.path))
					if err != nil || !bytes.Equal(got, w.want) {
						bad = append(bad, fmt.Sprintf("%s on %s: %s", w.path, m.Dir, differs(got, w.want, err)))
					}
				}
			}
			if len(bad) > 0 {
				t.Logf("%d wrong, first: %s", len(bad), bad[0])
			}
			return len(bad) == 0
		})
	}
	check(a, b, c)
	a.Unmount(t)
	b.Unmount(t)
	c.Unmount(t)
	check(f.Mount(t))
}

// differs says how got is not want, in short.
func differs(got, want []byte, err error) string {
	if err != nil {
		return err.Error()
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			end := min(i+16, len(got))
			return fmt.Sprintf("byte %d on: %q, want %q", i, strings.ToValidUTF8(string(got[i:end]), "?"), want[i:end])
		}
	}
	return "equal"
}

// TestTruncateCutsAnotherMountsEarlierWrite: mount A writes a file
// through a descriptor it keeps open (its writer holds a data
// generation), mount B then rewrites the file and closes it (under a
// newer generation), and A truncates through its old descriptor and
// grows the file again: B's bytes past the cut are gone, in the chunk
// the cut falls in and in the chunks past it. (A's cut, stamped with its
// older generation, was refused and taken for a later write of B's,
// though B's write had landed before the truncate began.)
func TestTruncateCutsAnotherMountsEarlierWrite(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	b := f.Mount(t)
	cs := int(f.Store.ChunkSize())
	for _, tc := range []struct {
		name   string
		length int // of what each mount writes
		cut    int
	}{
		{"in-chunk", 40, 4},
		{"across-chunks", 2*cs + cs/2, cs / 2},
		{"whole-chunks", 2*cs + cs/2, cs},
		{"to-zero", 2*cs + cs/2, 0},
	} {
		fill := func(c byte) []byte { return bytes.Repeat([]byte{c}, tc.length) }
		fh, err := os.Create(a.Path(tc.name))
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.Write(fill('a')); err != nil {
			t.Fatal(err)
		}
		if err := fh.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.Path(tc.name), fill('b'), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := fh.Truncate(int64(tc.cut)); err != nil {
			t.Fatal(err)
		}
		if err := fh.Truncate(int64(tc.length)); err != nil {
			t.Fatal(err)
		}
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, tc.length)
		copy(want, fill('b')[:tc.cut])
		for _, m := range []*mounttest.Mount{a, b} {
			mounttest.WaitFor(t, tc.name+" on "+m.Dir, staleBound+slack, func() bool {
				got, err := os.ReadFile(m.Path(tc.name))
				if err != nil || !bytes.Equal(got, want) {
					t.Logf("%s on %s: %s", tc.name, m.Dir, differs(got, want, err))
					return false
				}
				return true
			})
		}
	}
}

// TestTruncateAndAppendOfAnotherMountStand: a file open on one mount
// while another mount appends to it or truncates it (and closes): the
// first mount's later writes and its close keep the other's change, as
// on one machine where it does not overlap them, and as NFS's
// close-to-open: the close writes the size only as far as its own writes
// reach (never back over a truncate, never shrinking an append), the
// bytes of its chunks it did not write are the file's as stored when they
// go, and an O_APPEND write appends at the end the other mount left.
// (The close once wrote the size it knew, and the chunks as it had read
// them: the other mount's append came out cut off or zeroed, its
// truncated bytes came back.)
func TestTruncateAndAppendOfAnotherMountStand(t *testing.T) {
	f := mounttest.NewFS(t)
	a := f.Mount(t)
	b := f.Mount(t)
	c := f.Mount(t, "--delegations=false")
	orig := []byte(strings.Repeat("0123456789", 10))
	cat := func(parts ...string) []byte { return []byte(strings.Join(parts, "")) }
	zeros := func(n int) string { return string(make([]byte, n)) }
	type step func(t *testing.T, mine *os.File, theirs string)
	write := func(s string, off int64) step {
		return func(t *testing.T, mine *os.File, _ string) {
			if _, err := mine.WriteAt([]byte(s), off); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendMine := func(s string) step {
		return func(t *testing.T, mine *os.File, _ string) {
			if _, err := mine.Write([]byte(s)); err != nil {
				t.Fatal(err)
			}
		}
	}
	syncMine := func(t *testing.T, mine *os.File, _ string) {
		if err := mine.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	appendTheirs := func(s string) step {
		return func(t *testing.T, _ *os.File, theirs string) {
			fh, err := os.OpenFile(theirs, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fh.Write([]byte(s)); err != nil {
				t.Fatal(err)
			}
			if err := fh.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	truncateTheirs := func(size int64) step {
		return func(t *testing.T, _ *os.File, theirs string) {
			if err := os.Truncate(theirs, size); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		flags int
		steps []step
		want  []byte
	}{
		{"write-then-their-append", os.O_RDWR, []step{write("AAAAA", 0), appendTheirs("BBBBB")},
			cat("AAAAA", string(orig[5:]), "BBBBB")},
		{"write-then-their-truncate", os.O_RDWR, []step{write("AAAAA", 20), truncateTheirs(0)},
			cat(zeros(20), "AAAAA")},
		{"write-then-their-cut", os.O_RDWR, []step{write("AAAAA", 90), truncateTheirs(50)},
			cat(string(orig[:50]), zeros(40), "AAAAA")},
		// Every byte the file held rewritten, and another mount's append
		// after it in the same chunk: the chunk holds bytes the writer did
		// not write after all.
		{"overwrite-then-their-append", os.O_RDWR, []step{write(strings.Repeat("A", len(orig)), 0), appendTheirs("BBBBB")},
			cat(strings.Repeat("A", len(orig)), "BBBBB")},
		{"append-across-their-append", os.O_WRONLY | os.O_APPEND, []step{appendMine("a1"), syncMine, appendTheirs("b1"), appendMine("a2")},
			cat(string(orig), "a1", "b1", "a2")},
		{"append-across-their-truncate", os.O_WRONLY | os.O_APPEND, []step{appendMine("a1"), syncMine, truncateTheirs(0), appendMine("a2")},
			cat("a2")},
		{"append-after-their-append", os.O_WRONLY | os.O_APPEND, []step{appendTheirs("b1"), appendMine("a1")},
			cat(string(orig), "b1", "a1")},
		{"append-after-their-truncate", os.O_WRONLY | os.O_APPEND, []step{truncateTheirs(10), appendMine("a1")},
			cat(string(orig[:10]), "a1")},
	}
	for _, p := range []struct {
		what        string
		mine, their *mounttest.Mount
		dir         string
	}{
		{"in a directory the writer made", a, b, "byA"},
		{"in a directory the other mount made", a, b, "byB"},
		{"on a mount without delegations", c, b, "byC"},
	} {
		maker := p.mine
		if p.dir == "byB" {
			maker = p.their
		}
		if err := os.Mkdir(maker.Path(p.dir), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			t.Run(p.dir+"/"+tc.name, func(t *testing.T) {
				rel := filepath.Join(p.dir, tc.name)
				if err := os.WriteFile(p.mine.Path(rel), orig, 0o644); err != nil {
					t.Fatal(err)
				}
				mine, err := os.OpenFile(p.mine.Path(rel), tc.flags, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer mine.Close()
				for _, s := range tc.steps {
					s(t, mine, p.their.Path(rel))
				}
				if err := mine.Close(); err != nil {
					t.Fatalf("%s: close: %v", p.what, err)
				}
				for _, m := range []*mounttest.Mount{p.mine, p.their} {
					// Without delegations a mount may show what it cached
					// for the documented bound.
					mounttest.WaitFor(t, fmt.Sprintf("%s, on %s", p.what, m.Dir), staleBound+slack, func() bool {
						got, err := os.ReadFile(m.Path(rel))
						if err != nil || !bytes.Equal(got, tc.want) {
							t.Logf("%s, on %s: %s", p.what, m.Dir, differs(got, tc.want, err))
							return false
						}
						return true
					})
				}
			})
		}
	}
}
