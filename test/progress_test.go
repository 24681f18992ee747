package test

// The progress of esfs import and export on a terminal: a line that fits
// a narrow one, cleared at each redraw, whose final state counts all of
// the transfer: a sparse file's data, not its holes.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/esfs/esfs/test/mounttest"
	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal of cols columns: its master, which the
// test reads, and its slave, the esfs binary's stderr.
func openPty(t *testing.T, cols uint16) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil { // unlockpt
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN) // ptsname
	if err != nil {
		t.Fatal(err)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetWinsize(int(slave.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 24, Col: cols}); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

// onTerminal runs the esfs binary with its stdout and stderr on a
// terminal of cols columns and returns what the terminal received.
func onTerminal(t *testing.T, f *mounttest.FS, cols uint16, args ...string) string {
	t.Helper()
	master, slave := openPty(t, cols)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, f.Bin, append([]string{args[0], "--es-url", f.URL, "--index", f.Index}, args[1:]...)...)
	cmd.Env = append(os.Environ(), "ELASTICSEARCH_URL=")
	cmd.Stdout, cmd.Stderr = slave, slave
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close() // the child's copy is the last: the master reads EIO once it exits
	read := make(chan string)
	go func() {
		b, err := io.ReadAll(master)
		if err != nil && !errors.Is(err, unix.EIO) {
			b = append(b, fmt.Sprintf("\n(reading the terminal: %v)", err)...)
		}
		read <- string(b)
	}()
	err := cmd.Wait()
	out := <-read
	if err != nil {
		t.Fatalf("esfs %s on a terminal of %d columns: %v\n%q", strings.Join(args, " "), cols, err, out)
	}
	return out
}

var ansiSequence = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")

// redraws returns the lines the progress drew in place (what follows each
// carriage return that does not end a line), without their escape
// sequences, and checks that each fits cols columns and begins by erasing
// the line. It fails the test if there are none.
func redraws(t *testing.T, what, out string, cols int) []string {
	t.Helper()
	var drawn []string
	for _, line := range strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n") {
		segs := strings.Split(line, "\r")
		for _, seg := range segs[1:] {
			if !strings.HasPrefix(seg, "\x1b[K") {
				t.Errorf("%s: a redraw that does not erase the line first: %q", what, seg)
			}
			plain := ansiSequence.ReplaceAllString(seg, "")
			if w := utf8.RuneCountInString(plain); w > cols {
				t.Errorf("%s: a line of %d columns on a terminal of %d: %q", what, w, cols, plain)
			}
			drawn = append(drawn, plain)
		}
	}
	if len(drawn) == 0 {
		t.Fatalf("%s: no progress drawn on a terminal:\n%q", what, out)
	}
	return drawn
}

// localData counts what a local tree holds: its entries, and the bytes of
// data of its regular files (each file once, whatever its links; the
// extents SEEK_DATA and SEEK_HOLE report, not the holes).
func localData(t *testing.T, root string) (entries, data int64) {
	t.Helper()
	seen := map[uint64]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		fh, err := os.Open(p)
		if err != nil {
			return err
		}
		defer fh.Close()
		for off := int64(0); off < st.Size; {
			from, err := unix.Seek(int(fh.Fd()), off, unix.SEEK_DATA)
			if errors.Is(err, unix.ENXIO) {
				break
			}
			if err != nil {
				return err
			}
			to, err := unix.Seek(int(fh.Fd()), from, unix.SEEK_HOLE)
			if err != nil {
				return err
			}
			data += to - from
			off = to
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return entries, data
}

// TestTransferProgress: esfs import and export of a tree with a 2 GiB
// sparse file and hundreds of small ones, on a terminal of 40 columns
// and one of 132: every redrawn line fits the terminal and erases the
// last, and the final one says 100% of the data the local files hold
// (import) and every entry and the data written (export). Where stderr is
// no terminal, nothing is drawn.
func TestTransferProgress(t *testing.T) {
	f := mounttest.NewFS(t)
	src := filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	makeTree(t, src)
	// Data at its start, in its middle and at its end; holes between.
	mounttest.Sh(t, src, `
set -e
truncate -s 2G a/big-sparse
head -c 300000 /dev/urandom | dd of=a/big-sparse conv=notrunc 2>/dev/null
head -c 1500000 /dev/urandom | dd of=a/big-sparse bs=1M seek=1024 conv=notrunc 2>/dev/null
printf 'the end' | dd of=a/big-sparse bs=1 seek=$((2*1024*1024*1024-7)) conv=notrunc 2>/dev/null
`)
	entries, data := localData(t, src)
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(src, "a", "big-sparse"), &st); err != nil || st.Blocks*512 > 64<<20 {
		t.Fatalf("the local filesystem made no sparse file: %d blocks (%v)", st.Blocks, err)
	}
	if data >= 1<<30 {
		t.Fatalf("%d bytes of data: the MiB below assume less than a GiB", data)
	}
	mb := func(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }
	t.Logf("the tree: %d entries, %d bytes of data (%s MiB)", entries, data, mb(data))

	for _, cols := range []int{40, 132} {
		out := onTerminal(t, f, uint16(cols), "import", src, fmt.Sprintf("/in%d", cols))
		drawn := redraws(t, fmt.Sprintf("import at %d columns", cols), out, cols)
		last := drawn[len(drawn)-1]
		t.Logf("import at %d columns: %d redraws, the last %q", cols, len(drawn), last)
		want := []string{"] 100% ", "import: ", mb(data) + "/" + mb(data) + " MiB"}
		if cols > 100 {
			want = append(want, fmt.Sprintf(" %d/%d entries, ", entries, entries))
		}
		for _, w := range want {
			if !strings.Contains(last, w) {
				t.Errorf("import at %d columns: the final state %q lacks %q", cols, last, w)
			}
		}
		if !strings.Contains(out, "imported "+src) {
			t.Errorf("import at %d columns: no summary:\n%q", cols, out)
		}

		dst := filepath.Join(t.TempDir(), "out")
		out = onTerminal(t, f, uint16(cols), "export", fmt.Sprintf("/in%d", cols), dst)
		drawn = redraws(t, fmt.Sprintf("export at %d columns", cols), out, cols)
		last = drawn[len(drawn)-1]
		t.Logf("export at %d columns: %d redraws, the last %q", cols, len(drawn), last)
		// Export writes the chunks esfs stores, holes left out: whole
		// chunks around a sparse file's data, which the copy holds as data.
		gotEntries, written := localData(t, dst)
		if gotEntries != entries {
			t.Errorf("export: %d entries in the copy, want %d", gotEntries, entries)
		}
		if w := fmt.Sprintf("export: %d entries, %s MiB", entries, mb(written)); !strings.Contains(last, w) {
			t.Errorf("export at %d columns: the final state %q lacks %q", cols, last, w)
		}
		if strings.Contains(last, "%") {
			t.Errorf("export at %d columns: a percentage without a total: %q", cols, last)
		}
	}

	// Where stderr is no terminal: no bar, no escape sequence, the summary.
	r := mounttest.Run(t, mounttest.Cmd{Bin: f.Bin, Args: []string{"import", "--es-url", f.URL, "--index", f.Index, src, "/piped"}, Env: []string{"ELASTICSEARCH_URL="}})
	if r.Code != 0 || strings.ContainsAny(r.Out, "\r\x1b") || !strings.Contains(r.Out, "imported "+src) {
		t.Errorf("import into a pipe: status %d:\n%q", r.Code, r.Out)
	}
}
