package store_test

import (
	"errors"
	"testing"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// TestBlockSessions: while destroy's block is on, no session can register
// (the error says the index is blocked, not that privileges are missing),
// sessions can still be listed, and the block comes off.
func TestBlockSessions(t *testing.T) {
	s := testenv.Store(t)
	ctx := ctxT(t)
	if err := s.Admin().BlockSessions(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := s.Write(ctx, store.CreateSession(store.SessionDoc{ID: "blocked", LeaseMs: 1000}))
	if !errors.Is(err, store.ErrBlocked) || errors.Is(err, store.ErrForbidden) {
		t.Fatalf("registering a session under the block: %v, want ErrBlocked", err)
	}
	if _, err := s.ListSessions(ctx); err != nil {
		t.Fatalf("listing sessions under the block: %v", err)
	}
	infos, err := s.Admin().Inspect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range infos {
		if i.WriteBlocked != (i.Role == "session") {
			t.Errorf("%s: write blocked %v", i.Name, i.WriteBlocked)
		}
	}
	if err := s.Open(ctx); !errors.Is(err, store.ErrDestroying) {
		t.Errorf("Open under the block: %v, want ErrDestroying", err)
	}
	if err := s.Admin().UnblockSessions(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(ctx, store.CreateSession(store.SessionDoc{ID: "after", LeaseMs: 1000})); err != nil {
		t.Fatalf("registering a session after the block: %v", err)
	}
}
