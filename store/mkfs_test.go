package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestMkfsIdempotentStrictAndRoot(t *testing.T) {
	s := testenv.Store(t) // first mkfs
	ctx := ctxT(t)
	if err := s.Admin().Mkfs(ctx, store.MkfsOptions{}); err != nil {
		t.Fatalf("second mkfs: %v", err)
	}
	for _, which := range []string{"paths", "inodes", "data", "locks", "sessions"} {
		dyn, props, err := store.RawMapping(s, ctx, which)
		if err != nil {
			t.Fatal(err)
		}
		if dyn != "strict" {
			t.Errorf("%s: dynamic=%q, want strict", which, dyn)
		}
		if len(props) == 0 {
			t.Errorf("%s: no properties", which)
		}
	}
	_, props, _ := store.RawMapping(s, ctx, "paths")
	if props["path"]["type"] != "keyword" || props["path"]["ignore_above"] != nil {
		t.Errorf("path field: %v, want a keyword without ignore_above", props["path"])
	}
	// Strict: a document with an unknown field is refused.
	err := store.RawPut(s, ctx, "paths", "x", map[string]any{"path": "/x", "surprise": 1})
	if !errors.Is(err, store.ErrRejected) {
		t.Errorf("unknown field: got %v, want ErrRejected", err)
	}
	root, err := s.GetDentry(ctx, "/")
	if err != nil || root.Ino != store.RootIno || root.Type != store.TypeDir {
		t.Fatalf("root dentry: %+v, %v", root, err)
	}
	ri, err := s.GetInode(ctx, store.RootIno)
	if err != nil || ri.Type != store.TypeDir || ri.Mode != 0o755 {
		t.Fatalf("root inode: %+v, %v", ri, err)
	}
	if s.ChunkSize() != store.DefaultChunkSize {
		t.Errorf("chunk size %d", s.ChunkSize())
	}
}

func TestMkfsRefusesConflictingMapping(t *testing.T) {
	s := testenv.Unformatted(t)
	ctx := ctxT(t)
	err := store.RawCreateIndex(s, ctx, "paths", map[string]any{"mappings": map[string]any{
		"dynamic": "strict", "_meta": map[string]any{"esfs_format": store.FormatVersion},
		"properties": map[string]any{"path": map[string]any{"type": "text"}}}})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Admin().Mkfs(ctx, store.MkfsOptions{})
	if !errors.Is(err, store.ErrMapping) || !strings.Contains(err.Error(), "path is text, want keyword") {
		t.Fatalf("got %v, want ErrMapping naming the path field", err)
	}
}

func TestMkfsRefusesForeignIndex(t *testing.T) {
	s := testenv.Unformatted(t)
	ctx := ctxT(t)
	if err := store.RawCreateIndex(s, ctx, "inodes", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Admin().Mkfs(ctx, store.MkfsOptions{}); !errors.Is(err, store.ErrMapping) {
		t.Fatalf("got %v, want ErrMapping for an index esfs did not make", err)
	}
}

func TestOpenWithoutMkfs(t *testing.T) {
	s := testenv.Unformatted(t)
	err := s.Open(ctxT(t))
	if !errors.Is(err, store.ErrNoIndex) || !strings.Contains(err.Error(), "esfs mkfs") {
		t.Fatalf("got %v, want ErrNoIndex telling to run mkfs", err)
	}
}

// TestDataIndexKeepsTombstones: mkfs sets gc_deletes on the data index,
// and Open sets it again where it was changed (or made by an older esfs).
func TestDataIndexKeepsTombstones(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	get := func() string {
		t.Helper()
		v, err := store.RawSetting(s, ctx, "data", "index.gc_deletes")
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := get(); got != store.DataGCDeletes {
		t.Fatalf("gc_deletes after mkfs: %q, want %q", got, store.DataGCDeletes)
	}
	if err := store.RawPutSetting(s, ctx, "data", "index.gc_deletes", "60s"); err != nil {
		t.Fatal(err)
	}
	if err := s.Open(ctx); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != store.DataGCDeletes {
		t.Fatalf("gc_deletes after Open: %q, want %q", got, store.DataGCDeletes)
	}
}

// TestDataIndexCodec: on a cluster whose best_compression is zstd (8.14
// on), mkfs makes the data index with it (the data_floor bench rows say
// why); on older ones, the default (best_compression is DEFLATE there).
func TestDataIndexCodec(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	got, err := store.RawSetting(s, ctx, "data", "index.codec")
	if err != nil {
		t.Fatal(err)
	}
	major, minor, ok := store.ClusterVersion(s, ctx)
	if !ok {
		t.Fatal("the cluster's version could not be read")
	}
	want := ""
	if major > 8 || major == 8 && minor >= 14 {
		want = "best_compression"
	}
	if got != want {
		t.Errorf("the data index's codec after mkfs on Elasticsearch %d.%d: %q, want %q", major, minor, got, want)
	}
}
