package test

// Data writes are fenced (issue 11, item 5): a chunk bulk that its sender
// gave up on and that lands later must never put older bytes over newer
// ones, whoever wrote them; and fsck finds what dead writers left (item 6).

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"golang.org/x/sys/unix"
)

// fenceRead reads a file through a fresh open.
func fenceRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fenceSame fails unless got is want, naming the bytes it holds.
func fenceSame(t *testing.T, where string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		desc := func(b []byte) string {
			if len(b) == 0 {
				return "nothing"
			}
			return fmt.Sprintf("%d bytes starting %q", len(b), b[:min(len(b), 8)])
		}
		t.Errorf("%s: %s, want %s", where, desc(got), desc(want))
	}
}

// fenceHeld arms the fault proxy to hold the next chunk bulk of the mount
// behind it past its deadline, runs write (which must then fail with EIO),
// and returns the fault, whose request lands lateDelay after it was sent.
func fenceHeld(t *testing.T, fp *mounttest.FaultProxy, what string, write func() error) *mounttest.Fault {
	t.Helper()
	late := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("-data"), Delay: lateDelay, Reset: true})
	start := time.Now()
	err := write()
	t.Logf("%s whose chunk bulk was held: %v after %s", what, err, time.Since(start).Round(time.Millisecond))
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("%s whose chunk bulk never answered: %v, want EIO", what, err)
	}
	return late
}

// fenceBeforeLanding fails the test if the held request has landed
// already: what the test did meanwhile must come before it.
func fenceBeforeLanding(t *testing.T, late *mounttest.Fault) {
	t.Helper()
	select {
	case <-late.Fired():
		t.Fatalf("the held bulk landed before the newer write was done: the test proves nothing (raise lateDelay)")
	default:
	}
}

// TestLateChunkWriteNeverWins: the fault proxy holds mount A's chunk bulk
// past its deadline (A's fsync reports EIO) and lets it land after newer
// writes of the same bytes: by mount B; by A itself, retrying; and by B's
// truncation, which a later growth of the file would expose. The newer
// state wins on both mounts and after a remount, and A's failed bytes are
// not sent again when A closes the file.
func TestLateChunkWriteNeverWins(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a := crMount(t, f, nil, "--es-url", fp.URL, "--es-timeout", lateTimeout.String())
	b := crMount(t, f, nil)
	const size = 64 << 10
	fill := func(c byte) []byte { return bytes.Repeat([]byte{c}, size) }

	t.Run("other mount", func(t *testing.T) {
		if err := os.WriteFile(b.Path("x"), fill('0'), 0o644); err != nil {
			t.Fatal(err)
		}
		fh, err := os.OpenFile(a.Path("x"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt(fill('A'), 0); err != nil {
			t.Fatal(err)
		}
		late := fenceHeld(t, fp, "A's fsync", fh.Sync)
		if err := os.WriteFile(b.Path("x"), fill('B'), 0o644); err != nil {
			t.Fatal(err)
		}
		fenceBeforeLanding(t, late)
		lateWaitFired(t, late)
		fenceSame(t, "B after the late bulk landed", fenceRead(t, b.Path("x")), fill('B'))
		fenceSame(t, "A after the late bulk landed", fenceRead(t, a.Path("x")), fill('B'))
		got := make([]byte, size)
		if _, err := fh.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		fenceSame(t, "A through the descriptor whose write failed", got, fill('B'))
		if err := fh.Close(); err != nil {
			t.Logf("A's close: %v", err)
		}
		fenceSame(t, "B after A closed", fenceRead(t, b.Path("x")), fill('B'))
	})

	t.Run("same mount retrying", func(t *testing.T) {
		if err := os.WriteFile(a.Path("y"), fill('0'), 0o644); err != nil {
			t.Fatal(err)
		}
		fh, err := os.OpenFile(a.Path("y"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt(fill('1'), 0); err != nil {
			t.Fatal(err)
		}
		late := fenceHeld(t, fp, "A's first fsync", fh.Sync)
		if _, err := fh.WriteAt(fill('2'), 0); err != nil {
			t.Fatal(err)
		}
		if err := fh.Sync(); err != nil {
			t.Fatalf("A's second fsync: %v", err)
		}
		fenceBeforeLanding(t, late)
		lateWaitFired(t, late)
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		fenceSame(t, "A after its late first bulk landed", fenceRead(t, a.Path("y")), fill('2'))
		fenceSame(t, "B after A's late first bulk landed", fenceRead(t, b.Path("y")), fill('2'))
	})

	t.Run("truncated meanwhile", func(t *testing.T) {
		const mib = 1 << 20
		if err := os.WriteFile(b.Path("z"), bytes.Repeat([]byte("o"), 2*mib), 0o644); err != nil {
			t.Fatal(err)
		}
		fh, err := os.OpenFile(a.Path("z"), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer fh.Close()
		if _, err := fh.WriteAt(fill('A'), mib); err != nil {
			t.Fatal(err)
		}
		late := fenceHeld(t, fp, "A's fsync into the second chunk", fh.Sync)
		if err := os.Truncate(b.Path("z"), mib/2); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(b.Path("z"), 2*mib); err != nil {
			t.Fatal(err)
		}
		fenceBeforeLanding(t, late)
		lateWaitFired(t, late)
		want := append(bytes.Repeat([]byte("o"), mib/2), make([]byte, 3*mib/2)...)
		fenceSame(t, "B after the late bulk landed past the cut", fenceRead(t, b.Path("z")), want)
		if err := fh.Close(); err != nil {
			t.Logf("A's close: %v", err)
		}
		fenceSame(t, "B after A closed", fenceRead(t, b.Path("z")), want)
	})

	// After a remount nothing changed, and both mounts are alive.
	if a.Exited() || b.Exited() {
		t.Fatal("a mount exited")
	}
	c := crMount(t, f, nil)
	fenceSame(t, "x after a remount", fenceRead(t, c.Path("x")), fill('B'))
	fenceSame(t, "y after a remount", fenceRead(t, c.Path("y")), fill('2'))
	if got := fenceRead(t, c.Path("z")); len(got) != 2<<20 || !bytes.Equal(got[1<<20:], make([]byte, 1<<20)) {
		t.Errorf("z after a remount: the cut part does not read as zeros")
	}
}

// fsckRun runs esfs fsck (with args) and returns its output and exit
// status.
func fsckRun(t *testing.T, f *mounttest.FS, args ...string) (string, int) {
	t.Helper()
	out, err := f.Run(append([]string{"fsck", "--lease", crLease.String()}, args...)...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out, 0
	case errors.As(err, &ee):
		return out, ee.ExitCode()
	}
	t.Fatalf("esfs fsck: %v\n%s", err, out)
	return "", 0
}

// TestFsckLeftoverData: esfs fsck finds data chunks that dead writers
// left: a mount killed between a flush's chunks and its inode (the crash
// point flush-after-chunks), whose file then reads as empty, and whose
// chunks become those of no inode once another mount removes the file;
// and a mount killed with data sent but never flushed. --repair removes
// them; the unflushed chunks of a live writer are in flight, untouched,
// and its file is whole when it closes it.
func TestFsckLeftoverData(t *testing.T) {
	f := mounttest.NewFS(t)
	b := crMount(t, f, nil)
	data := func(n int, seed byte) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(i*7) + seed
		}
		return out
	}

	// Two files whose flush dies between chunks and inode.
	var crashed []uint64
	for _, name := range []string{"gone", "empty"} {
		m := crMount(t, f, []string{"ESFS_CRASH_POINT=flush-after-chunks"})
		err := os.WriteFile(m.Path(name), data(3<<20, 1), 0o644)
		if _, ok := m.WaitExit(time.Minute); !ok {
			t.Fatalf("the mount did not die at its flush (write: %v)", err)
		}
		m.Kill()
		crashed = append(crashed, inoOf(t, b.Path(name)))
		if got := storedChunks(t, f, crashed[len(crashed)-1]); len(got) != 3 {
			t.Fatalf("%s: %d chunks stored by the killed flush, want 3", name, len(got))
		}
	}
	if err := os.Remove(b.Path("gone")); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(b.Path("empty")); err != nil || st.Size() != 0 {
		t.Fatalf("the file whose flush died: %v, %v", st, err)
	}

	// A mount killed with 32 MiB sent and its inode never updated.
	k := crMount(t, f, nil)
	kh, err := os.Create(k.Path("killed"))
	if err != nil {
		t.Fatal(err)
	}
	for off := 0; off < 40<<20; off += 1 << 20 {
		if _, err := kh.Write(data(1<<20, 2)); err != nil {
			t.Fatal(err)
		}
	}
	killedIno := inoOf(t, k.Path("killed"))
	k.Kill()
	kh.Close()
	if got := storedChunks(t, f, killedIno); len(got) < 32 {
		t.Fatalf("the killed writer had stored %d chunks, want at least 32", len(got))
	}

	// A live writer, with 32 MiB sent and not flushed. It is another
	// process: every fork of this one (fsck, a mount) would close a copy
	// of the descriptor, and each close flushes.
	c := crMount(t, f, nil)
	live := bytes.Repeat(data(1<<20, 3), 40)
	writer := exec.Command("python3", "-c", `
import sys
blk = bytes(((i * 7) + 3) & 255 for i in range(1 << 20))
f = open(sys.argv[1], "wb", buffering=0)
for _ in range(40):
    f.write(blk)
print("written", flush=True)
sys.stdin.read()
f.close()
print("closed", flush=True)
`, c.Path("live"))
	stdin, err := writer.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := writer.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	writer.Stderr = os.Stderr
	if err := writer.Start(); err != nil {
		t.Skipf("no python3 for the live writer: %v", err)
	}
	defer writer.Process.Kill()
	line := make([]byte, 8)
	if _, err := io.ReadFull(stdout, line); err != nil || string(line) != "written\n" {
		t.Fatalf("the live writer: %q, %v", line, err)
	}
	liveIno := inoOf(t, c.Path("live"))
	liveChunks := storedChunks(t, f, liveIno)
	if len(liveChunks) < 32 {
		t.Fatalf("the live writer stored %d chunks before its flush, want at least 32", len(liveChunks))
	}

	out, code := fsckRun(t, f)
	t.Logf("esfs fsck:\n%s", out)
	if code != 4 {
		t.Errorf("esfs fsck exit status %d, want 4 (problems left)", code)
	}
	for _, want := range []string{
		fmt.Sprintf("leftover data: inode %d: 3 data chunks (0..2) of an inode that does not exist", crashed[0]),
		fmt.Sprintf("leftover data: inode %d: 3 data chunks (0..2) past its size of 0 bytes", crashed[1]),
		fmt.Sprintf("leftover data: inode %d: ", killedIno),
		fmt.Sprintf("in flight: inode %d: %d data chunks", liveIno, len(liveChunks)),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("esfs fsck does not say %q", want)
		}
	}
	if strings.Contains(out, fmt.Sprintf("leftover data: inode %d", liveIno)) {
		t.Errorf("the live writer's chunks are called leftovers")
	}

	out, code = fsckRun(t, f, "--repair")
	t.Logf("esfs fsck --repair:\n%s", out)
	if code != 1 {
		t.Errorf("esfs fsck --repair exit status %d, want 1 (all repaired)", code)
	}
	for _, ino := range append(crashed, killedIno) {
		if got := storedChunks(t, f, ino); len(got) != 0 {
			t.Errorf("inode %d: chunks %v left after repair", ino, got)
		}
	}
	if got := storedChunks(t, f, liveIno); len(got) < len(liveChunks) {
		t.Errorf("the live writer's chunks: %d left of %d after repair", len(got), len(liveChunks))
	}
	stdin.Close()
	if err := writer.Wait(); err != nil {
		t.Fatalf("the live writer's close: %v", err)
	}
	if got := fenceRead(t, b.Path("live")); !bytes.Equal(got, live) {
		t.Errorf("the live writer's file after fsck --repair and its close: %d bytes, differs from what was written", len(got))
	}
	if out, code := fsckRun(t, f); code != 0 {
		t.Errorf("esfs fsck after repair: exit status %d\n%s", code, out)
	}
	var st unix.Stat_t
	if err := unix.Stat(b.Path("live"), &st); err != nil || st.Blocks*512 < int64(len(live)) {
		t.Errorf("the live file's st_blocks %d for %d bytes (%v)", st.Blocks, len(live), err)
	}
	if b.Exited() || c.Exited() {
		t.Fatal("a live mount exited")
	}
}
