package locking_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

// writeCounting counts every write sent through it.
type writeCounting struct {
	*store.Store
	writes atomic.Int64
}

func (w *writeCounting) Write(ctx context.Context, o store.BulkOp) (store.Version, error) {
	w.writes.Add(1)
	return w.Store.Write(ctx, o)
}

func (w *writeCounting) Bulk(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error) {
	w.writes.Add(1)
	return w.Store.Bulk(ctx, ops)
}

// TestReaderWritesNothing: a Reader resolves the intents of an operation
// without a record as not committed (the old name seen, the new one not)
// without creating the record, and judges a silent session dead after its
// lease plus half of it without declaring it (its document is not
// fenced): it sends no write at all.
func TestReaderWritesNothing(t *testing.T) {
	st := testenv.Store(t)
	ctx := ctxT(t)
	const lease = time.Second
	frozen, err := locking.StartSession(ctx, st, locking.SessionConfig{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	frozen.Freeze()
	op, _ := frozen.BeginOp()
	for _, d := range []store.Dentry{
		{Path: "/old", Ino: 7, Type: store.TypeFile, Intent: store.Intent{Op: op, Role: store.RoleSrc}},
		{Path: "/new", Ino: 7, Type: store.TypeFile, Intent: store.Intent{Op: op, Role: store.RoleDst}},
	} {
		if _, err := st.Write(ctx, store.CreateDentry(d)); err != nil {
			t.Fatal(err)
		}
	}

	b := &writeCounting{Store: st}
	r := locking.NewReader(b, 0, nil)
	for path, want := range map[string]bool{"/old": true, "/new": false} {
		e, err := r.View.Get(ctx, path)
		if err != nil || e.Found != want {
			t.Errorf("%s of a rename without a record: found %v (%v), want %v", path, e.Found, err, want)
		}
	}
	if _, err := st.GetOp(ctx, op); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the reader wrote the record of %s: %v", op, err)
	}

	start := time.Now()
	if err := r.JudgeSessions(ctx, true); err != nil {
		t.Fatal(err)
	}
	dead, err := r.Dead(ctx, frozen.ID())
	if err != nil || !dead {
		t.Errorf("a session silent for %s (lease %s) is not judged dead: %v, %v", time.Since(start).Round(time.Millisecond), lease, dead, err)
	}
	if d, err := st.GetSession(ctx, frozen.ID()); err != nil || d.Dead {
		t.Errorf("the reader declared the session dead (its document: %+v, %v)", d, err)
	}
	if n := b.writes.Load(); n != 0 {
		t.Errorf("the reader sent %d writes, want none", n)
	}
}
