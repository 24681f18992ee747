package store_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestChunks(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	cs := s.ChunkSize()
	st := store.Stamp{Version: store.DataVersion(1, 1), Session: "s1"}
	full := bytes.Repeat([]byte{0xab}, int(cs))
	if w, err := s.WriteChunks(ctx, 9, map[int64][]byte{0: full, 2: []byte("tail")}, st); err != nil || len(w.Refused) > 0 || w.Created != 2 {
		t.Fatal(w, err)
	}
	if w, err := s.WriteChunks(ctx, 9, map[int64][]byte{2: []byte("tail2")}, store.Stamp{Version: store.DataVersion(1, 2)}); err != nil || w.Created != 0 {
		t.Fatalf("rewriting a chunk: %+v, %v; want nothing created", w, err)
	}
	got, _, err := s.ReadChunks(ctx, 9, 0, 3)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[0], full) || string(got[2]) != "tail2" {
		t.Fatalf("chunks read back wrong: %d %q", len(got[0]), got[2])
	}
	if _, ok := got[1]; ok {
		t.Fatal("hole read as a chunk")
	}
	if _, err := s.WriteChunks(ctx, 9, map[int64][]byte{1: make([]byte, cs+1)}, st); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("oversized chunk: %v", err)
	}
	if _, err := s.WriteChunks(ctx, 9, map[int64][]byte{1: []byte("x")}, store.Stamp{}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("chunk without a data version: %v", err)
	}
	if n, err := s.DeleteChunks(ctx, 9, 1, 5, store.DataVersion(1, 3)); err != nil || n != 1 {
		t.Fatalf("deleting chunks 1-5 of 0 and 2: %d deleted, %v", n, err)
	}
	got, _, _ = s.ReadChunks(ctx, 9, 0, 3)
	if len(got) != 1 || got[0] == nil {
		t.Fatalf("after delete: %d chunks", len(got))
	}
	if err := store.RawPut(s, ctx, "data", "9.7", map[string]any{"ino": 8, "chunk": 7, "data": "AAAA"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ReadChunks(ctx, 9, 7, 7); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("chunk of another inode: %v, want ErrCorrupt", err)
	}
}

// TestChunkVersionsFence: a chunk write or delete whose data version is
// not above the stored one is refused, so a request that lands late can
// never overwrite a newer write, nor bring back a chunk deleted after it.
func TestChunkVersionsFence(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	write := func(gen, counter uint64, data string) []int64 {
		t.Helper()
		w, err := s.WriteChunks(ctx, 11, map[int64][]byte{0: []byte(data)}, store.Stamp{Version: store.DataVersion(gen, counter), Session: "w"})
		if err != nil {
			t.Fatal(err)
		}
		return w.Refused
	}
	read := func() string {
		t.Helper()
		got, _, err := s.ReadChunks(ctx, 11, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, ok := got[0]
		if !ok {
			return "(absent)"
		}
		return string(b)
	}
	if r := write(2, 1, "newer"); len(r) != 0 {
		t.Fatalf("first write refused: %v", r)
	}
	if r := write(1, 9, "older generation"); len(r) != 1 || r[0] != 0 {
		t.Fatalf("a write of an older generation: refused %v, want [0]", r)
	}
	if r := write(2, 1, "same version again"); len(r) != 1 {
		t.Fatalf("a write of the same version: refused %v, want [0]", r)
	}
	if got := read(); got != "newer" {
		t.Fatalf("chunk holds %q after late writes, want %q", got, "newer")
	}
	if r := write(2, 2, "retry"); len(r) != 0 || read() != "retry" {
		t.Fatalf("the writer's next request: refused %v, chunk %q", r, read())
	}
	if _, err := s.DeleteChunks(ctx, 11, 0, 0, store.DataVersion(3, 1)); err != nil {
		t.Fatal(err)
	}
	if r := write(2, 3, "late, after the delete"); len(r) != 1 || read() != "(absent)" {
		t.Fatalf("a late write after a newer delete: refused %v, chunk %q", r, read())
	}
	// A delete older than the stored write leaves it (that write is later).
	if r := write(4, 1, "after the delete"); len(r) != 0 {
		t.Fatalf("a newer write after the delete refused: %v", r)
	}
	if _, err := s.DeleteChunks(ctx, 11, 0, 0, store.DataVersion(3, 2)); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != "after the delete" {
		t.Fatalf("an older delete removed a newer write: %q", got)
	}
	// A delete of a chunk never written fences it too, while the
	// tombstone lives.
	if _, err := s.DeleteChunks(ctx, 11, 5, 5, store.DataVersion(5, 1)); err != nil {
		t.Fatal(err)
	}
	w, err := s.WriteChunks(ctx, 11, map[int64][]byte{5: []byte("late")}, store.Stamp{Version: store.DataVersion(4, 2)})
	if err != nil || len(w.Refused) != 1 {
		t.Fatalf("a late write into a range deleted before it was stored: refused %v, %v", w.Refused, err)
	}
}

// TestDeleteChunksCostsWhatIsStored: deleting a range of a billion chunks
// (a 1 PiB sparse file) finds the few stored ones by search, including one
// written a moment before (the delete refreshes), in a few requests and
// little memory; chunks before the range stay.
func TestDeleteChunksCostsWhatIsStored(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	last := store.MaxFileSize/s.ChunkSize() - 1
	st := store.Stamp{Version: store.DataVersion(1, 1)}
	nums := []int64{0, 3, 1000, 1 << 20, last - 1, last}
	for _, n := range nums {
		if _, err := s.WriteChunks(ctx, 12, map[int64][]byte{n: []byte(fmt.Sprint(n))}, st); err != nil {
			t.Fatal(err)
		}
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	if n, err := s.DeleteChunks(ctx, 12, 1, last, store.DataVersion(1, 2)); err != nil || n != 5 {
		t.Fatalf("%d deleted, %v; want 5", n, err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	t.Logf("deleting chunks 1..%d (5 stored) took %s and allocated %d KiB", last, time.Since(start).Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10)
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("deleting a sparse range allocated %d MiB: its cost follows the range, not what is stored", grew>>20)
	}
	for _, n := range nums {
		got, _, err := s.ReadChunks(ctx, 12, n, n)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := got[n]; ok != (n == 0) {
			t.Errorf("chunk %d stored: %v after deleting 1..%d", n, ok, last)
		}
	}
}

// TestChunkScan: fsck's scan lists every chunk with its writer's session
// and version, without the bytes; a delete at a listed version fails once
// the chunk was written again.
func TestChunkScan(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	big := uint64(1<<62 + 12345) // loses its last digits as a float64
	for _, w := range []struct {
		ino uint64
		n   int64
	}{{big, 0}, {big, 7}, {13, 2}} {
		if _, err := s.WriteChunks(ctx, w.ino, map[int64][]byte{w.n: []byte("x")}, store.Stamp{Version: store.DataVersion(1, 1), Session: "abc123"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Refresh(ctx, store.SearchedAll); err != nil {
		t.Fatal(err)
	}
	sc := s.ScanChunks()
	var refs []store.ChunkRef
	for {
		page, err := sc.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if page == nil {
			break
		}
		refs = append(refs, page...)
	}
	if len(refs) != 3 || refs[0].Ino != 13 || refs[0].Chunk != 2 || refs[1].Ino != big || refs[2].Chunk != 7 || refs[2].Sess != "abc123" || !refs[2].Ver.Known() {
		t.Fatalf("scan: %+v", refs)
	}
	if _, err := s.WriteChunks(ctx, big, map[int64][]byte{7: []byte("y")}, store.Stamp{Version: store.DataVersion(1, 2)}); err != nil {
		t.Fatal(err)
	}
	res, err := s.Bulk(ctx, []store.BulkOp{store.DeleteChunkRef(refs[1]), store.DeleteChunkRef(refs[2])})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, store.ErrConflict) {
		t.Fatalf("deletes at listed versions: %v %v", res[0].Err, res[1].Err)
	}
}

// TestDecodeChunkFast: the fast decoder of chunk documents agrees with
// encoding/json on what it accepts, and declines what it cannot read
// exactly (escapes, other forms), which then goes to encoding/json.
func TestDecodeChunkFast(t *testing.T) {
	bin := []byte{0, 1, 2, 250, 251, '"', '\\', 'x'}
	for _, c := range []struct {
		src  string
		fast bool
		want []byte
	}{
		{`{"ino":123,"chunk":4,"data":"` + base64.StdEncoding.EncodeToString(bin) + `"}`, true, bin},
		{`{"ino":123,"chunk":4,"data":""}`, true, []byte{}},
		{`{"ino":123,"chunk":4,"text":"plain words"}`, true, []byte("plain words")},
		{`{"ino":123,"chunk":4,"sess":"5f3d87f0","data":"AAEC"}`, true, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"sess":"5f3d87f0","text":"plain words"}`, true, []byte("plain words")},
		{`{"ino":123,"chunk":4,"sess":"a\"b","data":"AAEC"}`, false, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"text":"two\nlines \u003c"}`, false, []byte("two\nlines <")},
		{`{"chunk":4,"ino":123,"data":"AAEC"}`, false, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"data":"AAEC" }`, false, []byte{0, 1, 2}},
		{`{"ino":123,"chunk":4,"data":"!!!"}`, false, nil},
	} {
		got, ok := store.DecodeChunkFast([]byte(c.src))
		if ok != c.fast {
			t.Errorf("%s: fast %v, want %v", c.src, ok, c.fast)
			continue
		}
		if !ok {
			var v struct {
				Data []byte  `json:"data"`
				Text *string `json:"text"`
			}
			if err := json.Unmarshal([]byte(c.src), &v); err != nil {
				if c.want != nil {
					t.Errorf("%s: %v", c.src, err)
				}
				continue
			}
			if v.Text != nil {
				v.Data = []byte(*v.Text)
			}
			if !bytes.Equal(v.Data, c.want) {
				t.Errorf("%s: json reads %q, want %q", c.src, v.Data, c.want)
			}
			continue
		}
		if got.Ino != 123 || got.Chunk != 4 {
			t.Errorf("%s: ino %d chunk %d", c.src, got.Ino, got.Chunk)
		}
		data := got.Data
		if got.Text != nil {
			data = []byte(*got.Text)
		}
		if !bytes.Equal(data, c.want) {
			t.Errorf("%s: %q, want %q", c.src, data, c.want)
		}
	}
}

// TestDeleteChunksReportsRefused: TryDeleteChunks names the chunks that a
// write of a version at least as high holds, and removes the others; a
// truncate decides from that whether to cut again under a newer
// generation.
func TestDeleteChunksReportsRefused(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	if _, err := s.WriteChunks(ctx, 13, map[int64][]byte{0: []byte("old"), 1: []byte("new")}, store.Stamp{Version: store.DataVersion(1, 1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteChunks(ctx, 13, map[int64][]byte{1: []byte("newer")}, store.Stamp{Version: store.DataVersion(3, 1)}); err != nil {
		t.Fatal(err)
	}
	d, err := s.TryDeleteChunks(ctx, 13, 0, 2, store.DataVersion(2, 1))
	if err != nil || d.Count != 1 || len(d.Refused) != 1 || d.Refused[0] != 1 {
		t.Fatalf("deleting chunks 0-2 at generation 2 over 0 (gen 1) and 1 (gen 3): %+v, %v; want 1 deleted, [1] refused", d, err)
	}
	// The same version as the stored one is refused too: only a higher one
	// wins.
	d, err = s.TryDeleteChunks(ctx, 13, 1, 1, store.DataVersion(3, 1))
	if err != nil || len(d.Refused) != 1 {
		t.Fatalf("deleting at the stored version: %+v, %v; want refused", d, err)
	}
}

// TestGetInodeAndChunk: an inode and one of its chunks in one read; a
// chunk not stored is nil, an inode not stored ErrNotFound.
func TestGetInodeAndChunk(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	n := store.Inode{Ino: 14, Type: store.TypeFile, Mode: 0o644, Nlink: 1, Size: 5}
	if _, _, _, err := s.GetInodeAndChunk(ctx, 14, 0); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an inode not stored: %v, want ErrNotFound", err)
	}
	if _, err := s.Write(ctx, store.CreateInode(n)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.WriteChunks(ctx, 14, map[int64][]byte{0: []byte("hello")}, store.Stamp{Version: store.DataVersion(1, 1)}); err != nil {
		t.Fatal(err)
	}
	v1 := store.DataVersion(1, 1)
	got, data, ver, err := s.GetInodeAndChunk(ctx, 14, 0)
	if err != nil || got.Size != 5 || !got.Ver.Known() || string(data) != "hello" || ver != v1 {
		t.Fatalf("inode and chunk 0: %+v %q version %d %v, want version %d", got, data, ver, err, v1)
	}
	if _, data, ver, err := s.GetInodeAndChunk(ctx, 14, 3); err != nil || data != nil || ver != 0 {
		t.Fatalf("a chunk not stored: %q version %d %v, want nil, 0", data, ver, err)
	}
}

// TestChunkVersionsAsRead: a chunk is read with the data version it was written
// at, and InodeAndChunkVersions gives the same without the bytes: a
// rewrite raises it, a deletion makes it 0, and so does a chunk never
// written. What a mount checks the chunks it kept against (fs/vfs/clean.go).
func TestChunkVersionsAsRead(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	if _, err := s.Write(ctx, store.CreateInode(store.Inode{Ino: 15, Type: store.TypeFile, Mode: 0o644, Nlink: 1, Size: 10})); err != nil {
		t.Fatal(err)
	}
	v1, v2 := store.DataVersion(1, 2), store.DataVersion(2, 1)
	if _, err := s.WriteChunks(ctx, 15, map[int64][]byte{0: []byte("zero"), 1: []byte("one")}, store.Stamp{Version: v1}); err != nil {
		t.Fatal(err)
	}
	data, vers, err := s.ReadChunks(ctx, 15, 0, 2)
	if err != nil || string(data[0]) != "zero" || vers[0] != v1 || vers[1] != v1 || vers[2] != 0 {
		t.Fatalf("read chunks 0-2: %v, versions %v, %v; want %d, %d, 0", data, vers, err, v1, v1)
	}
	check := func(when string, want map[int64]int64) {
		t.Helper()
		n, got, err := s.InodeAndChunkVersions(ctx, 15, []int64{0, 1, 2})
		if err != nil || n.Ino != 15 || len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
			t.Fatalf("%s: inode %d, versions %v, %v; want %v", when, n.Ino, got, err, want)
		}
	}
	check("as written", map[int64]int64{0: v1, 1: v1, 2: 0})
	if _, err := s.WriteChunks(ctx, 15, map[int64][]byte{1: []byte("ONE")}, store.Stamp{Version: v2}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteChunks(ctx, 15, 0, 0, v2); err != nil {
		t.Fatal(err)
	}
	check("after a rewrite of 1 and a deletion of 0", map[int64]int64{0: 0, 1: v2, 2: 0})
	if _, _, err := s.InodeAndChunkVersions(ctx, 16, []int64{0}); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an inode not stored: %v, want ErrNotFound", err)
	}
}
