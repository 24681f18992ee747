// The rename journal: its protocol (Journal) and Rename, the owner's run of
// it: the record (step 1), staging (journal_stage.go), the commit point
// (step 3), finishing (journal_finish.go), and DONE with the release of the
// locks (step 5).

package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/esfs/esfs/store"
)

// Journal runs renames as journaled operations and resolves the intents
// they leave on path documents.
//
// A rename, once its locks are granted and its preconditions re-checked:
//
//  1. creates its record PREPARED (op_type=create: a record that already
//     exists means recovery fenced this operation off);
//  2. stages: every new path is created carrying the intent {op, dst},
//     every old path is marked {op, src}, an overwritten target is marked
//     {op, ovr} with the replacing inode beside the old one; every item is
//     confirmed before going on;
//  3. commits: one compare-and-set of the record to COMMITTED (the commit
//     point: readers switch from the old paths to the new ones here);
//  4. finishes: deletes the old paths, strips the intents, and once a
//     refresh + search finds no document carrying the op, sets DONE;
//  5. releases its locks.
//
// Readers resolve an intent through the record: before the commit point
// they see only the old paths, after it only the new ones, never both and
// never neither. Whoever takes over a dead owner's record (bumping its
// epoch with a compare-and-set) rolls it forward if committed and back
// otherwise; every step is idempotent and conditional, so a paused former
// owner that wakes up can only make writes that nobody sees.
type Journal struct {
	b   Backend
	m   *Manager
	log *slog.Logger
	// Session returns the current session of this mount.
	Session func() *Session

	mu sync.Mutex // protects dropLink, done, unfinished and recovering
	// dropLink removes one link from the inode a rename replaced, at most
	// once per rename (see SetDropLink).
	dropLink   func(ctx context.Context, ino uint64) error
	done       map[string]store.OpRecord // records in a final state, which never change
	unfinished map[string]*unfinished    // kept by Rename, retried by the sweeper
	recovering map[string]bool           // operations being recovered by this mount now
}

// NewJournal wires a journal to a lock manager, which it also serves as the
// recovery of dead owners' operations.
func NewJournal(b Backend, m *Manager, session func() *Session, log *slog.Logger) *Journal {
	if log == nil {
		log = slog.Default()
	}
	j := &Journal{b: b, m: m, log: log, Session: session, done: map[string]store.OpRecord{},
		unfinished: map[string]*unfinished{}, recovering: map[string]bool{}}
	j.dropLink = func(ctx context.Context, ino uint64) error {
		_, err := DropLink(ctx, b, ino, nil)
		return err
	}
	m.Recover = j.Recover
	return j
}

// SetDropLink replaces how this session drops the link of an inode a
// rename replaced. Every journal starts with the store-level DropLink,
// which is right for a session that has no file open (an admin command,
// or a mount before it serves anything); a mount sets its own, which
// leaves the inodes it has open to their last close and keeps its cache
// in step, as its unlink does.
func (j *Journal) SetDropLink(drop func(ctx context.Context, ino uint64) error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.dropLink = drop
}

// RenameSpec is a rename whose locks are held and whose preconditions were
// re-checked with realtime reads after the grant.
type RenameSpec struct {
	Op     string
	Src    store.Dentry  // the source path document, as read under the locks
	Dst    string        // the destination path
	Target *store.Dentry // the existing destination document, or nil
	// SrcParent and DstParent are the inodes of the source's and the
	// destination's directories (for their link counts).
	SrcParent, DstParent uint64
	Held                 *Held
	// After are writes of the caller's (directory times) sent with the
	// bulk that ends the rename; best effort, their failures are logged.
	After []store.BulkOp
}

// Rename runs the journaled rename of spec. On success the rename is DONE
// and its locks are released. On failure before the commit point the
// rename is rolled back; ErrLeaseLost means this mount lost its session.
//
// kept reports that the journal kept the operation: its locks stay held
// and end is called once the journal has finished (or undone) it and
// released them, retrying from the sweeper: the owner, while alive,
// finishes what it started before anyone else may touch those paths. Otherwise the caller releases the locks if err is
// not nil, and end is not called.
func (j *Journal) Rename(ctx context.Context, sess *Session, spec RenameSpec, end func()) (kept bool, err error) {
	// In flight until end runs: at once, or for a kept operation when the
	// sweeper has finished it.
	mt := j.m.metrics
	mt.inFlight.Inc()
	var ended sync.Once
	callerEnd := end
	end = func() {
		ended.Do(mt.inFlight.Dec)
		callerEnd()
	}
	defer func() {
		switch {
		case kept:
			mt.renames.WithLabelValues("kept").Inc()
		case err != nil:
			mt.renames.WithLabelValues("failed").Inc()
		default:
			mt.renames.WithLabelValues("done").Inc()
		}
		if !kept {
			ended.Do(mt.inFlight.Dec)
		}
	}()
	rec := store.OpRecord{ID: spec.Op, State: store.OpPrepared, Owner: sess.ID(), Epoch: 1,
		Src: spec.Src.Path, Dst: spec.Dst, SrcIno: spec.Src.Ino, SrcType: spec.Src.Type,
		Locks: spec.Held.Refs(), Created: time.Now().UnixNano(), SrcParent: spec.SrcParent, DstParent: spec.DstParent}
	if spec.Target != nil {
		rec.Overwritten, rec.OverwrittenType = spec.Target.Ino, spec.Target.Type
	}
	if err := sess.Check(); err != nil {
		return false, err
	}
	v, err := j.b.CreateOp(ctx, rec)
	if errors.Is(err, store.ErrExists) {
		return false, fmt.Errorf("rename %s was fenced off by recovery: %w", spec.Op, ErrLeaseLost)
	}
	if err != nil {
		// Unknown outcome: the record may exist. Keep the operation, so
		// that it is resolved (undone) before its locks go.
		j.keep(rec, sess, spec.Held, end)
		return true, err
	}
	rec.Ver = v
	if err := crashPoint("rename-after-record"); err != nil {
		return false, err
	}
	known, err := j.stage(ctx, sess, spec)
	if err != nil {
		j.log.Warn("rename failed while staging: rolling back", "op", spec.Op, "err", err)
		if rerr := j.abort(ctx, rec); rerr != nil {
			j.log.Warn("rollback failed; retrying while holding the locks", "op", spec.Op, "err", rerr)
			j.keep(rec, sess, spec.Held, end)
			return true, err
		}
		return false, err
	}
	for _, k := range known {
		if k.doc.Intent.Role == store.RoleSrc {
			mt.renamed.Inc()
		}
	}
	if err := crashPoint("rename-before-commit"); err != nil {
		return false, err
	}
	// The commit point. A lapsed lease means someone may be taking over:
	// do not commit on a lease we cannot vouch for.
	if err := sess.Check(); err != nil {
		if rerr := j.abort(ctx, rec); rerr != nil {
			j.log.Warn("rollback failed; recovery of this session will finish it", "op", spec.Op, "err", rerr)
		}
		return false, err
	}
	committed := rec
	committed.State = store.OpCommitted
	v, err = j.b.PutOp(ctx, committed, rec.Ver)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return false, fmt.Errorf("rename %s was taken over before its commit: %w", spec.Op, ErrLeaseLost)
		}
		// Unknown outcome: read the record to learn it.
		cur, gerr := j.b.GetOp(ctx, spec.Op)
		if gerr != nil {
			// Still unknown: the sweeper reads it later and finishes or
			// undoes it; the caller can only be told that we do not know.
			j.keep(rec, sess, spec.Held, end)
			return true, fmt.Errorf("rename %s: commit outcome unknown: %w", spec.Op, err)
		}
		if cur.Owner != sess.ID() || cur.Epoch != rec.Epoch {
			return false, fmt.Errorf("rename %s was taken over at its commit: %w", spec.Op, ErrLeaseLost)
		}
		if cur.State != store.OpCommitted {
			if rerr := j.abort(ctx, cur); rerr != nil {
				j.log.Warn("rollback failed; retrying while holding the locks", "op", spec.Op, "err", rerr)
				j.keep(cur, sess, spec.Held, end)
				return true, err
			}
			return false, err
		}
		v = cur.Ver
	}
	committed.Ver = v
	if err := crashPoint("rename-after-commit"); err != nil {
		return false, err
	}
	// From here on the rename has happened, whatever fails: finishing is
	// cleanup that can be redone, and while we own the record the caller
	// is told it succeeded.
	fin, err := j.finishDocs(ctx, committed, known)
	if err != nil {
		if sess.Check() != nil || errors.Is(err, store.ErrConflict) {
			// Taken over, or about to be: the new owner finishes the
			// rename and releases our entries. As for any operation whose
			// lock entries vanished (whoever judged us dead may have done
			// conflicting work), the caller hears EIO, although the
			// rename happened.
			j.log.Warn("committed rename left to recovery", "op", spec.Op, "err", err)
			end()
			return true, fmt.Errorf("rename %s committed, then was taken over: %v: %w", spec.Op, err, ErrLeaseLost)
		}
		j.log.Warn("finishing a committed rename failed; retrying while holding the locks", "op", spec.Op, "err", err)
		j.keep(fin, sess, spec.Held, end)
		return true, nil
	}
	if err := crashPoint("rename-before-release"); err != nil {
		return false, err
	}
	// DONE, the release of the locks and the caller's own writes (times)
	// go in one bulk: the locks are released only if DONE is in the same
	// request, and a DONE that fails means someone took the record over,
	// who then releases our entries anyway.
	done := fin
	done.State, done.Aborted = store.OpDone, false
	o, err := j.b.OpPutOp(done, fin.Ver)
	if err != nil {
		return false, err
	}
	res, err := j.m.ReleaseWith(ctx, spec.Held, append([]store.BulkOp{o}, spec.After...))
	if res == nil {
		// The request failed as a whole: whether DONE and the release
		// landed is unknown. The sweeper reads the record and ends it.
		j.log.Warn("ending a finished rename failed; retrying while holding the locks", "op", spec.Op, "err", err)
		j.keep(fin, sess, spec.Held, end)
		return true, nil
	}
	if res[0].Err != nil {
		j.log.Warn("a finished rename's record was taken over before DONE", "op", spec.Op, "err", res[0].Err)
		if err == nil {
			err = fmt.Errorf("rename %s was taken over before DONE: %v: %w", spec.Op, res[0].Err, ErrLeaseLost)
		}
	} else {
		done.Ver = res[0].Ver
		j.remember(done)
	}
	for _, r := range res[1:] {
		if r.Err != nil {
			j.log.Warn("a write made with the end of a rename failed", "op", spec.Op, "err", r.Err)
		}
	}
	return false, err
}
