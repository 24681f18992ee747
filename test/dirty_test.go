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
