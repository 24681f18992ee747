// Recovery: a rename its owner could not finish or undo at once is kept
// and retried by the owner's sweeper; one whose owner died is taken over
// (a compare-and-set of its record) and rolled forward or back.

package locking

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/esfs/esfs/store"
)

// unfinished is an operation its owner could not finish or undo at once.
type unfinished struct {
	rec  store.OpRecord // as last known; the record is re-read before acting
	sess *Session
	held *Held
	end  func()
}

func (j *Journal) keep(rec store.OpRecord, sess *Session, held *Held, end func()) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.unfinished[rec.ID] = &unfinished{rec: rec, sess: sess, held: held, end: end}
}

// Unfinished is the number of operations this mount still has to finish.
func (j *Journal) Unfinished() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.unfinished)
}

// RetryUnfinished tries again to finish or undo every operation kept by
// Rename, then releases its locks. An operation whose session was lost, or
// whose record someone else took over, is dropped: recovery owns it.
func (j *Journal) RetryUnfinished(ctx context.Context) {
	j.mu.Lock()
	todo := make([]*unfinished, 0, len(j.unfinished))
	for _, u := range j.unfinished {
		todo = append(todo, u)
	}
	j.mu.Unlock()
	for _, u := range todo {
		finished, err := j.retry(ctx, u)
		if err != nil {
			j.log.Warn("an unfinished rename still fails; retrying later", "op", u.rec.ID, "err", err)
		}
		if finished {
			j.mu.Lock()
			delete(j.unfinished, u.rec.ID)
			j.mu.Unlock()
			u.end()
		}
	}
}

func (j *Journal) retry(ctx context.Context, u *unfinished) (finished bool, err error) {
	if err := u.sess.Check(); err != nil {
		return true, nil // fenced: whoever declares us dead recovers it
	}
	cur, err := j.b.GetOp(ctx, u.rec.ID)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// The record was never written: nothing was staged (stage comes
		// after the record), or a file's stage rode with the record's
		// create (recordAndStage), which readers resolve as an aborted
		// operation's. Fence it so a late create cannot start it, and
		// undo such a stage.
		cur = u.rec
		cur.State, cur.Aborted = store.OpDone, true
		if _, err := j.b.Write(ctx, store.CreateOp(cur)); err != nil && !errors.Is(err, store.ErrExists) {
			return false, err
		}
		if u.rec.SrcType != store.TypeDir {
			if err := j.resolveDocs(ctx, u.rec.ID, rollbackFix(j.b)); err != nil {
				return false, err
			}
		}
		return false, nil // read it again next time
	case err != nil:
		return false, err
	case cur.Owner != u.sess.ID() || cur.Epoch != u.rec.Epoch:
		return true, nil // taken over: the new owner releases our entries
	}
	if cur.State == store.OpPrepared {
		err = j.abort(ctx, cur)
	} else {
		err = j.settle(ctx, u.sess, cur)
	}
	if err != nil {
		return false, err
	}
	if err := j.m.Release(ctx, u.held); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			return true, nil
		}
		return false, err
	}
	j.log.Info("finished a rename that had failed halfway", "op", cur.ID, "state", cur.State)
	return true, nil
}

// Recover takes over the record of a dead owner (compare-and-set: new
// owner, epoch+1), rolls it forward or back, and releases its locks.
func (j *Journal) Recover(ctx context.Context, rec store.OpRecord) error {
	sess := j.Session()
	if err := sess.Check(); err != nil {
		return err
	}
	if !j.startRecovery(rec.ID) {
		return nil // another goroutine of this mount is on it
	}
	defer j.endRecovery(rec.ID)
	from := rec.Owner
	took := rec
	took.Owner, took.Epoch = sess.ID(), rec.Epoch+1
	if rec.State == store.OpPrepared {
		took.State = store.OpAborted
	}
	if rec.State != store.OpDone {
		v, err := j.b.Write(ctx, store.PutOp(took, rec.Ver))
		if errors.Is(err, store.ErrConflict) {
			return nil // someone else moved it on: the caller looks again
		}
		if err != nil {
			return err
		}
		took.Ver = v
		j.log.Warn("took over an operation of a dead mount", "op", rec.ID, "state", rec.State, "from", from, "epoch", took.Epoch)
		if err := j.settle(ctx, sess, took); err != nil {
			return err
		}
		j.m.metrics.recovered.Inc()
	}
	return j.releaseRecorded(ctx, from, rec)
}

// settle rolls an operation forward (COMMITTED) or back (ABORTED), as
// whoever owns its record (session sess); in other states there is
// nothing to do.
func (j *Journal) settle(ctx context.Context, sess *Session, rec store.OpRecord) error {
	switch rec.State {
	case store.OpCommitted:
		done, err := j.finish(ctx, sess, rec, nil)
		if err == nil {
			j.remember(done)
		}
		return err
	case store.OpAborted:
		return j.rollback(ctx, rec)
	}
	return nil
}

// releaseRecorded removes session's entries of operation rec from the
// lock documents its record lists.
func (j *Journal) releaseRecorded(ctx context.Context, session string, rec store.OpRecord) error {
	reqs := make([]Request, len(rec.Locks))
	for i, l := range rec.Locks {
		reqs[i] = Request{ID: l.ID, Path: l.Path, Mode: l.Mode}
	}
	return j.m.ReleaseOp(ctx, session, rec.ID, reqs)
}

// Resume goes on with an operation this session took over earlier but
// could not finish then (its finish or rollback failed, or ran out of
// time): nobody else will, since its owner, this mount, is alive.
func (j *Journal) Resume(ctx context.Context, rec store.OpRecord) error {
	sess := j.Session()
	if err := sess.Check(); err != nil {
		return err
	}
	if rec.Owner != sess.ID() || rec.State == store.OpPrepared {
		return fmt.Errorf("operation %s is not a takeover of this session", rec.ID)
	}
	if !j.startRecovery(rec.ID) {
		return nil
	}
	defer j.endRecovery(rec.ID)
	j.log.Info("resuming the recovery of an operation", "op", rec.ID, "state", rec.State)
	if err := j.settle(ctx, sess, rec); err != nil {
		return err
	}
	// The locks are still entered under the session that began the
	// operation, which its id names.
	from := rec.ID
	if i := strings.LastIndexByte(from, '-'); i > 0 {
		from = from[:i]
	}
	return j.releaseRecorded(ctx, from, rec)
}

func (j *Journal) startRecovery(op string) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.recovering[op] {
		return false
	}
	j.recovering[op] = true
	return true
}

func (j *Journal) endRecovery(op string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	delete(j.recovering, op)
}
