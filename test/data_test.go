package test

// File data: writes are buffered per open file and sent in 1 MiB chunks
// (and whenever 32 MiB are buffered), reads fetch chunks ahead, and data
// writes are fenced: a chunk bulk that its sender gave up on and that lands
// later must never put older bytes over newer ones, whoever wrote them.
// (fsck_test.go checks that fsck finds the chunks dead writers left.)

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
)

// TestDataSmallWritesCountAgainstDirtyLimit: a file written sequentially in pieces
// smaller than a chunk (as cp and most programs write) is sent to the
// cluster once the mount's 32 MiB of buffered data is passed, not only at
// close: every piece counts against the limit. (Once only the first piece
// of each chunk counted, and a copy buffered the whole file in the daemon:
// 1.4 GiB of memory for a 256 MiB file.)
func TestDataSmallWritesCountAgainstDirtyLimit(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	const piece, total = 64 << 10, 48 << 20
	data := make([]byte, total)
	for i := range data {
		data[i] = byte(i*7 + i>>16)
	}
	fh, err := os.Create(m.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	for off := 0; off < total; off += piece {
		if _, err := fh.Write(data[off : off+piece]); err != nil {
			t.Fatal(err)
		}
	}
	st, err := fh.Stat()
	if err != nil {
		t.Fatal(err)
	}
	ino := st.Sys().(*syscall.Stat_t).Ino
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	chunks, _, err := f.Store.ReadChunks(ctx, ino, 0, total/f.Store.ChunkSize()-1)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d of %d chunks stored before close", len(chunks), total/f.Store.ChunkSize())
	if int64(len(chunks))*f.Store.ChunkSize() < 32<<20 {
		t.Errorf("only %d chunks of 1 MiB stored after %d MiB written without close: the 32 MiB dirty limit was passed unnoticed",
			len(chunks), total>>20)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(m.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the file read back differs from what was written")
	}
}

// TestDataReadAheadSeesNewerWrites: a sequential reader makes the mount fetch the
// chunks ahead of it in the background; a write (and its flush) to one of
// those chunks meanwhile must not be hidden by the older bytes read ahead,
// through the same descriptor or another, on this mount or another.
func TestDataReadAheadSeesNewerWrites(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	other := f.Mount(t)
	const mib = 1 << 20
	old := bytes.Repeat([]byte("o"), 12*mib)
	if err := os.WriteFile(m.Path("big"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(m.Path("big"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	buf := make([]byte, 2*mib)
	if _, err := r.ReadAt(buf, 0); err != nil { // sequential from 0: read-ahead starts
		t.Fatal(err)
	}
	w, err := os.OpenFile(m.Path("big"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fresh := bytes.Repeat([]byte("n"), mib)
	if _, err := w.WriteAt(fresh, 5*mib); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	for off := int64(2 * mib); off < 12*mib; off += int64(len(buf)) {
		if _, err := r.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		for i, b := range buf {
			want := byte('o')
			if p := off + int64(i); p >= 5*mib && p < 6*mib {
				want = 'n'
			}
			if b != want {
				t.Fatalf("byte %d reads %q, want %q (read-ahead kept bytes older than a write)", off+int64(i), b, want)
			}
		}
	}
	got, err := os.ReadFile(other.Path("big"))
	if err != nil || !bytes.Equal(got[5*mib:6*mib], fresh) || !bytes.Equal(got[:5*mib], old[:5*mib]) {
		t.Errorf("the other mount reads %d bytes (%v), not the written ones", len(got), err)
	}
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
// and returns the fault, whose request lands mounttest.LateDelay after it was sent.
func fenceHeld(t *testing.T, fp *mounttest.FaultProxy, what string, write func() error) *mounttest.Fault {
	t.Helper()
	late := fp.Add(&mounttest.Fault{Match: mounttest.BulkTo("-data"), Delay: mounttest.LateDelay, Reset: true})
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

// TestDataLateChunkWriteNeverWins: the fault proxy holds mount A's chunk bulk
// past its deadline (A's fsync reports EIO) and lets it land after newer
// writes of the same bytes: by mount B; by A itself, retrying; and by B's
// truncation, which a later growth of the file would expose. The newer
// state wins on both mounts and after a remount, and A's failed bytes are
// not sent again when A closes the file.
func TestDataLateChunkWriteNeverWins(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, testenv.URL(t))
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout", mounttest.LateTimeout.String())
	b := mounttest.MountUncached(t, f, nil)
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
		mounttest.WaitLanded(t, late)
		fenceSame(t, "B after the late bulk landed", mounttest.MustReadFile(t, b.Path("x")), fill('B'))
		fenceSame(t, "A after the late bulk landed", mounttest.MustReadFile(t, a.Path("x")), fill('B'))
		got := make([]byte, size)
		if _, err := fh.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		fenceSame(t, "A through the descriptor whose write failed", got, fill('B'))
		if err := fh.Close(); err != nil {
			t.Logf("A's close: %v", err)
		}
		fenceSame(t, "B after A closed", mounttest.MustReadFile(t, b.Path("x")), fill('B'))
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
		mounttest.WaitLanded(t, late)
		if err := fh.Close(); err != nil {
			t.Fatal(err)
		}
		fenceSame(t, "A after its late first bulk landed", mounttest.MustReadFile(t, a.Path("y")), fill('2'))
		fenceSame(t, "B after A's late first bulk landed", mounttest.MustReadFile(t, b.Path("y")), fill('2'))
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
		mounttest.WaitLanded(t, late)
		want := append(bytes.Repeat([]byte("o"), mib/2), make([]byte, 3*mib/2)...)
		fenceSame(t, "B after the late bulk landed past the cut", mounttest.MustReadFile(t, b.Path("z")), want)
		if err := fh.Close(); err != nil {
			t.Logf("A's close: %v", err)
		}
		fenceSame(t, "B after A closed", mounttest.MustReadFile(t, b.Path("z")), want)
	})

	// After a remount nothing changed, and both mounts are alive.
	if a.Exited() || b.Exited() {
		t.Fatal("a mount exited")
	}
	c := mounttest.MountUncached(t, f, nil)
	fenceSame(t, "x after a remount", mounttest.MustReadFile(t, c.Path("x")), fill('B'))
	fenceSame(t, "y after a remount", mounttest.MustReadFile(t, c.Path("y")), fill('2'))
	if got := mounttest.MustReadFile(t, c.Path("z")); len(got) != 2<<20 || !bytes.Equal(got[1<<20:], make([]byte, 1<<20)) {
		t.Errorf("z after a remount: the cut part does not read as zeros")
	}
}

// TestDataFailedFlushForgetsItsSize: a descriptor whose fsync failed
// (every chunk bulk refused, 503) lost the writes it had buffered, and was
// told so. Its file is then what is stored: an fstat through it shows what
// another mount wrote since, not the size of the lost writes, and its
// close does not write that size afterwards (which grew the other mount's
// file with zeros). (Campaign seed 720786204: an fstat showed 562 bytes,
// the size of a descriptor whose flush had failed, after another mount had
// written 11657.)
func TestDataFailedFlushForgetsItsSize(t *testing.T) {
	f := mounttest.NewFS(t)
	fp := mounttest.NewFaultProxy(t, f.URL)
	a := mounttest.MountUncached(t, f, nil, "--es-url", fp.URL, "--es-timeout=5s")
	b := mounttest.MountUncached(t, f, nil)
	if err := os.WriteFile(b.Path("x"), bytes.Repeat([]byte{'0'}, 100), 0o644); err != nil {
		t.Fatal(err)
	}
	fh, err := os.OpenFile(a.Path("x"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	if _, err := fh.WriteAt(bytes.Repeat([]byte{'A'}, 5000), 100); err != nil {
		t.Fatal(err)
	}
	chunks := mounttest.BulkTo("-data")
	var refusing atomic.Bool
	refusing.Store(true)
	fp.Intercept(func(w http.ResponseWriter, r *http.Request, body []byte) bool {
		if refusing.Load() && chunks(r.Method, r.URL.Path, body) {
			w.WriteHeader(http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	if err := fh.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("fsync whose chunk writes were all refused: %v, want EIO", err)
	}
	refusing.Store(false)
	want := bytes.Repeat([]byte{'B'}, 300)
	if err := os.WriteFile(b.Path("x"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	if st, err := fh.Stat(); err != nil || st.Size() != int64(len(want)) {
		t.Errorf("fstat through the descriptor whose writes were lost, after another mount wrote %d bytes: %v, %v", len(want), st.Size(), err)
	}
	if err := fh.Close(); err != nil {
		t.Errorf("close after the failed fsync reported the loss: %v, want 0 (reported once)", err)
	}
	for _, m := range []*mounttest.Mount{b, a} {
		if got := mounttest.MustReadFile(t, m.Path("x")); !bytes.Equal(got, want) {
			t.Errorf("x on %s after the close: %d bytes (%q...), want the other mount's %d", m.Dir, len(got), got[:min(len(got), 8)], len(want))
		}
	}
}
