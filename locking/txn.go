// Txn: one operation of a mount holding its locks, from Begin to its
// release (at once, or after a rename's finish in the background).

package locking

import (
	"context"
	"errors"
	"sync"

	"github.com/esfs/esfs/store"
)

// Txn is one operation holding its locks.
type Txn struct {
	c    *Coordinator
	Sess *Session
	Op   string
	n    int64
	Held *Held
	done bool
	// then runs once the operation has ended: its locks released, after
	// its last write (for a rename finished in the background, then).
	then  []func()
	ended sync.Once
}

// Then has fn run once the operation has ended and its locks are
// released, the finish of a rename included (see Journal.Rename): a
// caller's lease on the shared locks, say, which must outlive every write.
func (t *Txn) Then(fn func()) { t.then = append(t.then, fn) }

// endOp ends the operation in the session, then runs t.then; once.
func (t *Txn) endOp() {
	t.ended.Do(func() {
		t.Sess.EndOp(t.n)
		for _, fn := range t.then {
			fn()
		}
	})
}

// Begin takes the locks of one operation.
func (c *Coordinator) Begin(ctx context.Context, reqs []Request) (*Txn, error) {
	sess := c.live(ctx)
	op, n := sess.BeginOp()
	held, err := c.Locks.Acquire(ctx, sess, op, reqs)
	if err != nil {
		sess.EndOp(n)
		return nil, err
	}
	return &Txn{c: c, Sess: sess, Op: op, n: n, Held: held}, nil
}

// End releases the operation's locks. The release is also the check that
// nobody judged us dead meanwhile: then the operation must report EIO even
// if its writes went through, since someone may have done conflicting work.
func (t *Txn) End(ctx context.Context) error {
	if t.done {
		return nil
	}
	t.done = true
	defer t.endOp()
	ctx = context.WithoutCancel(ctx)
	return t.c.Locks.Release(ctx, t.Held)
}

// EndWith is End with writes of the caller's (ops) sent in the release's
// bulk, ahead of the lock writes, so that they cost no round trip of their
// own. It returns their results, or nil when the bulk failed as a whole
// (their outcome is unknown then).
func (t *Txn) EndWith(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error) {
	if t.done {
		return nil, errors.New("transaction already ended")
	}
	t.done = true
	defer t.endOp()
	ctx = context.WithoutCancel(ctx)
	return t.c.Locks.ReleaseWith(ctx, t.Held, ops)
}

// Rename runs a journaled rename under the transaction's locks; on success
// the journal has released them.
func (t *Txn) Rename(ctx context.Context, spec RenameSpec) error {
	spec.Op, spec.Held = t.Op, t.Held
	kept, err := t.c.Journal.Rename(ctx, t.Sess, spec, t.endOp)
	switch {
	case kept:
		t.done = true // the journal releases the locks and ends the op
	case err == nil:
		t.done = true
		t.endOp()
	}
	return err
}
