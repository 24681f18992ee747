package test

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// TestDirtyLimitCountsSmallWrites: a file written sequentially in pieces
// smaller than a chunk (as cp and most programs write) is sent to the
// cluster once the mount's 32 MiB of buffered data is passed, not only at
// close: every piece counts against the limit. (Once only the first piece
// of each chunk counted, and a copy buffered the whole file in the daemon:
// 1.4 GiB of memory for a 256 MiB file.)
func TestDirtyLimitCountsSmallWrites(t *testing.T) {
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
	chunks, err := f.Store.ReadChunks(ctx, ino, 0, total/f.Store.ChunkSize()-1)
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

// TestReadAheadSeesWrites: a sequential reader makes the mount fetch the
// chunks ahead of it in the background; a write (and its flush) to one of
// those chunks meanwhile must not be hidden by the older bytes read ahead,
// through the same descriptor or another, on this mount or another.
func TestReadAheadSeesWrites(t *testing.T) {
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
