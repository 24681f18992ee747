package store_test

import (
	"errors"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestNoWriteCreatesAnIndex: once the filesystem's indices are gone (as
// esfs destroy leaves them, for a mount frozen across it), every kind of
// write esfs makes, alone and in a bulk, fails with ErrNoIndex, and none
// makes Elasticsearch create an index: not the creates, overwrites and
// partial updates, not the chunk writes and deletes with an external
// version (which auto-create their index even with require_alias).
func TestNoWriteCreatesAnIndex(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	if err := s.Admin().DeleteFilesystem(ctx); err != nil {
		t.Fatal(err)
	}
	v := store.Version{SeqNo: 1, PrimaryTerm: 1}
	st := store.Stamp{Version: store.DataVersion(3, 1), Session: "s"}
	lock := store.LockDoc{ID: "L1", Path: "/a", Holders: []store.Holder{{Session: "s", Op: "s-1"}}}
	ops := map[string]store.BulkOp{
		"CreateDentry":  store.CreateDentry(dentry("/a", 9, store.TypeFile)),
		"PutDentry":     store.PutDentry(dentry("/a", 9, store.TypeFile), v),
		"DeleteDentry":  store.DeleteDentry("/a", v),
		"CreateInode":   store.CreateInode(store.Inode{Ino: 9, Type: store.TypeFile, Mode: 0o644, Nlink: 1}),
		"PutInode":      store.PutInode(store.Inode{Ino: 9, Type: store.TypeFile, Mode: 0o644, Nlink: 1}, v),
		"DeleteInode":   store.DeleteInode(9, v),
		"TouchInode":    store.TouchInode(9, 1, 2),
		"SetCtime":      store.SetCtime(9, 3),
		"WriteChunk":    store.WriteChunk(9, 0, []byte("abc"), st),
		"DeleteChunk":   store.DeleteChunkOps(9, 0, 0, store.DataVersion(4, 0))[0],
		"WriteLock":     store.WriteLock(store.LockWrite{Doc: lock}),
		"DeleteLock":    store.WriteLock(store.LockWrite{Doc: store.LockDoc{ID: "L1", Path: "/a", Found: true, Ver: v}, Delete: true}),
		"RecallDeleg":   store.RecallDeleg("s", "L1", 5),
		"CreateOp":      store.CreateOp(store.OpRecord{ID: "o1", State: store.OpPrepared, SrcType: store.TypeFile}),
		"CreateSession": store.CreateSession(store.SessionDoc{ID: "s", LeaseMs: 1000}),
		"PutSession":    store.PutSession(store.SessionDoc{ID: "s", LeaseMs: 1000}, v),
		"DeleteSession": store.DeleteSession("s", v),
	}
	var all []store.BulkOp
	for name, o := range ops {
		if err := o.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := s.Write(ctx, o); !errors.Is(err, store.ErrNoIndex) {
			t.Errorf("%s alone: %v, want ErrNoIndex", name, err)
		}
		all = append(all, o)
	}
	res, err := s.Bulk(ctx, all)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !errors.Is(r.Err, store.ErrNoIndex) {
			t.Errorf("bulk item %d: %v, want ErrNoIndex", i, r.Err)
		}
	}
	if _, err := s.DeleteChunks(ctx, 9, 0, 3, store.DataVersion(4, 0)); !errors.Is(err, store.ErrNoIndex) {
		t.Errorf("DeleteChunks: %v, want ErrNoIndex", err)
	}
	infos, err := s.Admin().Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.Exists {
			t.Errorf("index %s exists again after the writes", i.Name)
		}
	}
}
