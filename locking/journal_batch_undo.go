package locking

// A batch kept for its settle, undone (its inodes and their chunks deleted)
// when it is rolled back, and settled after the fact; see journal_batch.go.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esfs/esfs/store"
)

// keepBatch hands a committed batch that could not be finished to the
// sweeper (RetryUnfinished), which finishes it and sets it DONE.
func (j *Journal) keepBatch(rec store.OpRecord, sess *Session) {
	j.keep(rec, sess, &Held{Op: rec.ID, Session: sess.ID()}, func() {})
}

// undoBatch removes the inodes of a batch rolled back (nothing names
// them), and puts back the link counts its stage set. A count is put back
// only if it is still the one the stage set: under the write delegation
// nobody else adds or removes subdirectories there, and a stage item that
// never landed left the count as it was.
func (j *Journal) undoBatch(ctx context.Context, rec store.OpRecord) error {
	for _, c := range rec.DirLinks {
		a, err := j.b.GetInode(ctx, c.Ino)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if a.Nlink != c.After {
			continue
		}
		a.Nlink = c.Before
		if _, err := j.b.Write(ctx, store.PutInode(a, a.Ver)); err != nil && !errors.Is(err, store.ErrConflict) {
			return err
		}
	}
	return j.deleteBatchInodes(ctx, rec)
}

// deleteBatchInodes removes the inodes of a batch rolled back.
func (j *Journal) deleteBatchInodes(ctx context.Context, rec store.OpRecord) error {
	for _, ino := range rec.NewInos {
		a, err := j.b.GetInode(ctx, ino)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if err := DeleteUnlinked(ctx, j.b, a); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// SettleBatch learns the outcome of this session's batch op whose Flush
// ended with ErrBatchUnknown, rolling it back if it never committed. It
// returns whether the batch is visible.
func (j *Journal) SettleBatch(ctx context.Context, sess *Session, op string) (visible bool, err error) {
	rec, err := j.b.GetOp(ctx, op)
	if errors.Is(err, store.ErrNotFound) {
		// Never created: fence it, so that a late create cannot start it.
		if err := j.fenceBatch(ctx, store.OpRecord{ID: op, Owner: sess.ID(), Epoch: 1, SrcType: store.TypeFile, Created: time.Now().UnixNano()}); err != nil {
			return false, err
		}
		if rec, err = j.b.GetOp(ctx, op); err != nil {
			return false, err
		}
	}
	if err != nil {
		return false, err
	}
	switch {
	case rec.State == store.OpCommitted && rec.Owner == sess.ID() && rec.Epoch == 1:
		// Visible, and not finished: nobody else finishes a live owner's
		// batch, so the sweeper's retries do (see Flush).
		j.keepBatch(rec, sess)
		return true, nil
	case rec.State == store.OpCommitted || (rec.State == store.OpDone && !rec.Aborted):
		return true, nil
	case (rec.State == store.OpPrepared || rec.State == store.OpAborted) && rec.Owner == sess.ID() && rec.Epoch == 1:
		// Ours, not committed: rolled back now, or, if a rollback of ours
		// went ABORTED and failed after that, its rollback finished (a
		// takeover would own the record under a new epoch).
		if err := j.abort(ctx, rec); err != nil {
			return false, err
		}
		return false, nil
	case rec.State == store.OpDone:
		return false, nil
	}
	// Taken over, and being settled by whoever took it.
	return false, fmt.Errorf("batch %s is being recovered by %s: %w", op, rec.Owner, ErrLeaseLost)
}
