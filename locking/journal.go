// The rename journal: its protocol (Journal) and Rename, the owner's run of
// it: the record (step 1), staging (journal_stage.go), the commit point
// (step 3), finishing (journal_finish.go), and DONE with the release of the
// locks (step 5).

package locking

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
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
	// readOnly: the journal of a Reader, which resolves intents and
	// writes nothing (no session, no lock manager).
	readOnly bool

	mu lockorder.Mutex // protects dropLink, done, unfinished and recovering
	// dropLink removes one link from the inode a rename replaced, at most
	// once per rename (see SetDropLink).
	dropLink   func(ctx context.Context, ino, dir uint64) error
	done       map[string]store.OpRecord // records in a final state, which never change
	unfinished map[string]*unfinished    // kept by Rename, retried by the sweeper
	recovering map[string]bool           // operations being recovered by this mount now

	later sync.WaitGroup // committed renames finishing in the background
}

// NewJournal wires a journal to a lock manager, which it also serves as the
// recovery of dead owners' operations.
func NewJournal(b Backend, m *Manager, session func() *Session, log *slog.Logger) *Journal {
	if log == nil {
		log = slog.Default()
	}
	j := &Journal{b: b, m: m, log: log, Session: session, done: map[string]store.OpRecord{},
		unfinished: map[string]*unfinished{}, recovering: map[string]bool{}}
	j.dropLink = func(ctx context.Context, ino, dir uint64) error {
		_, err := DropLink(ctx, b, ino, dir, nil)
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
func (j *Journal) SetDropLink(drop func(ctx context.Context, ino, dir uint64) error) {
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
	// bulk that ends the rename, or for a file's rename with its commit;
	// best effort, their failures are logged.
	After []store.BulkOp
	// Ctime, if not 0, is the moved inode's new ctime, set with After.
	Ctime int64
	// SrcAttr, if not nil, is the moved inode as the caller knows it (at
	// a version): a file moved to another directory has its Parents moved
	// at that version, in a request the rename makes anyway.
	SrcAttr *store.Inode
}

// Rename runs the journaled rename of spec. On success the rename is DONE
// and its locks are released. On failure before the commit point the
// rename is rolled back; ErrLeaseLost means this mount lost its session.
//
// kept reports that the journal kept the operation: its locks stay held
// and end is called once the journal has finished (or undone) it and
// released them, retrying from the sweeper: the owner, while alive,
// finishes what it started before anyone else may touch those paths.
// Otherwise the caller releases the locks if err is not nil, and end is
// not called.
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
	later := false // finished in the background: done, as far as the caller knows
	defer func() {
		switch {
		case later && err == nil:
			mt.renames.WithLabelValues("done").Inc()
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
	r := &renameRun{j: j, sess: sess, spec: spec, end: end}
	rec := store.OpRecord{ID: spec.Op, State: store.OpPrepared, Owner: sess.ID(), Epoch: 1,
		Src: spec.Src.Path, Dst: spec.Dst, SrcIno: spec.Src.Ino, SrcType: spec.Src.Type,
		Locks: spec.Held.Refs(), Created: time.Now().UnixNano(), SrcParent: spec.SrcParent, DstParent: spec.DstParent}
	if spec.Target != nil {
		rec.Overwritten, rec.OverwrittenType = spec.Target.Ino, spec.Target.Type
	}
	if err := sess.Check(); err != nil {
		return false, err
	}
	var known []staged
	if spec.Src.Type == store.TypeDir {
		// The refresh that lets the scan below see the whole subtree runs
		// beside the record and the stage of the directory's own path: it
		// needs only the locks, which are held.
		scannable := make(chan error, 1)
		go func() { scannable <- j.b.Refresh(ctx, store.SearchedPaths) }()
		rec, known, kept, err = r.recordAndStage(ctx, rec)
		rerr := <-scannable
		if err != nil {
			return kept, err
		}
		if err := crashPoint("rename-after-record"); err != nil {
			return false, err
		}
		var below []staged
		if rerr == nil {
			below, rerr = j.stageSubtree(ctx, sess, spec)
		}
		if rerr != nil {
			j.log.Warn("rename failed while staging: rolling back", "op", spec.Op, "err", rerr)
			return r.undo(ctx, rec, rerr)
		}
		known = append(known, below...)
	} else {
		rec, known, kept, err = r.recordAndStage(ctx, rec)
		if err != nil {
			return kept, err
		}
		if err := crashPoint("rename-after-record"); err != nil {
			return false, err
		}
	}
	for _, k := range known {
		if k.doc.Intent.Role == store.RoleSrc {
			mt.renamed.Inc()
		}
	}
	if err := crashPoint("rename-before-commit"); err != nil {
		return false, err
	}
	// A rename is told to its caller at the commit point, which then
	// carries the caller's writes (times): its finish and release run in
	// the background, the locks held until they are done (a call of this
	// mount that wants them waits, woken by the release), while readers on
	// every mount resolve the intents through the committed record
	// meanwhile. Before the answer, a directory's staged subtree is made
	// visible to search (a listing of the new path right after the rename,
	// on any mount, must find it whole) and the link counts of the
	// directories it left and joined are moved (a stat of them right after
	// must count it). A rename that replaces something finishes before
	// answering: the replaced file loses its link in the finish, which an
	// fstat of it right after the rename must see (nlink 0).
	later = spec.Target == nil
	dir := spec.Src.Type == store.TypeDir
	var after []store.BulkOp
	var ctimeAt int // where in after the moved inode's ctime is, or -1
	if later {
		after, r.spec.After = spec.After, nil
		after, ctimeAt = r.withCtime(after)
	} else if spec.Ctime != 0 {
		r.spec.After = append(r.spec.After, store.SetCtime(spec.Src.Ino, spec.Ctime))
	}
	var searchable chan error // the staged subtree's refresh, beside the commit
	if later && dir {
		searchable = make(chan error, 1)
		go func() { searchable <- j.b.Refresh(ctx, store.SearchedPaths) }()
	}
	committed, afterRes, kept, err := r.commit(ctx, rec, after)
	if err != nil {
		return kept, err
	}
	if later && ctimeAt >= 0 {
		r.ctimeSet(ctx, afterRes, ctimeAt)
	}
	if err := crashPoint("rename-after-commit"); err != nil {
		return false, err
	}
	if later && dir {
		if err := <-searchable; err != nil {
			j.log.Warn("refreshing a renamed directory's staged subtree failed: finishing before answering", "op", spec.Op, "err", err)
			later = false
		} else if committed, err = j.settleLinks(ctx, committed); err != nil {
			return r.finishFailed(committed, err)
		}
	}
	if later {
		j.later.Add(1)
		go func() {
			defer j.later.Done()
			if kept, _ := r.finish(store.AfterCall(ctx), committed, known); !kept {
				r.end()
			}
		}()
		return true, nil
	}
	return r.finish(ctx, committed, known)
}

// finish is steps 4 and 5 of a committed rename: from here on the rename
// has happened, whatever fails: finishing is cleanup that can be redone,
// and while we own the record the caller is told it succeeded.
func (r *renameRun) finish(ctx context.Context, committed store.OpRecord, known []staged) (bool, error) {
	fin, _, err := r.j.finishDocs(ctx, r.sess, committed, known, r.spec.SrcAttr)
	if err != nil {
		return r.finishFailed(fin, err)
	}
	if err := crashPoint("rename-before-release"); err != nil {
		return false, err
	}
	return r.conclude(ctx, fin)
}

// WaitFinishing waits for the finishes of committed renames running in
// the background (see Rename).
func (j *Journal) WaitFinishing() { j.later.Wait() }

// renameRun is one Rename as its owner runs it, step by step. Each step
// that stops the rename returns what Rename returns: kept, and the error.
type renameRun struct {
	j    *Journal
	sess *Session
	spec RenameSpec
	end  func()
}

// keep hands the operation, as rec last knew it, to the sweeper, its
// locks held (see Rename).
func (r *renameRun) keep(rec store.OpRecord, err error) (bool, error) {
	r.j.keep(rec, r.sess, r.spec.Held, r.end)
	return true, err
}

// undo rolls back rec, which has not committed; if the rollback fails the
// operation is kept, to be undone while its locks are still held.
func (r *renameRun) undo(ctx context.Context, rec store.OpRecord, err error) (bool, error) {
	if rerr := r.j.abort(ctx, rec); rerr != nil {
		r.j.log.Warn("rollback failed; retrying while holding the locks", "op", r.spec.Op, "err", rerr)
		return r.keep(rec, err)
	}
	return false, err
}

// recordAndStage is step 1 and the stage of the rename's own paths in one
// bulk: the record's create, then the stage of the two paths (or the
// target's), a round trip less than one after the other (a directory's
// subtree is staged after it). Elasticsearch applies the
// items of one bulk independently, the record (lock index) and the paths
// (path index) on different shards, so a reader may meet a staged path
// before the record exists: it then fences the operation off (creates its
// record ABORTED, see Journal.record) and resolves the path as an aborted
// operation's, which it now is; the owner, whose create of the record
// fails, undoes what it staged and runs the rename again (ErrRetry). A
// stage whose record did not land, and is not undone here, is left to the
// sweeper (which fences the missing record and undoes it) or to whoever
// meets it.
func (r *renameRun) recordAndStage(ctx context.Context, rec store.OpRecord) (store.OpRecord, []staged, bool, error) {
	j := r.j
	top, docs, err := stageTop(r.spec)
	if err != nil {
		return rec, nil, false, err
	}
	c := store.CreateOp(rec)
	if err := c.Err(); err != nil {
		return rec, nil, false, err
	}
	res, err := j.b.Bulk(ctx, append([]store.BulkOp{c}, top...))
	if err != nil {
		// Unknown outcome: the record and the stage may have landed.
		// Keep the operation, so that it is resolved (undone) before its
		// locks go.
		kept, err := r.keep(rec, err)
		return rec, nil, kept, err
	}
	var known []staged
	var stageErr error
	for i, d := range docs {
		if e := res[i+1].Err; e != nil {
			stageErr = cmp.Or(stageErr, e)
			continue
		}
		d.Ver = res[i+1].Ver
		known = append(known, staged{doc: d})
	}
	if rerr := res[0].Err; rerr != nil {
		if ok, _, err := j.fixKnown(ctx, known, rollbackFix(j.b)); err != nil || !ok {
			j.log.Warn("a rename whose record was refused left staged paths (resolved as an aborted operation's)", "op", r.spec.Op, "err", err)
		}
		if !errors.Is(rerr, store.ErrExists) {
			return rec, nil, false, rerr
		}
		if err := r.sess.Check(); err != nil {
			return rec, nil, false, fmt.Errorf("rename %s was fenced off by recovery: %w", r.spec.Op, err)
		}
		return rec, nil, false, fmt.Errorf("rename %s was fenced off by a reader before its record landed: %w", r.spec.Op, ErrRetry)
	}
	rec.Ver = res[0].Ver
	if stageErr != nil {
		j.log.Warn("rename failed while staging: rolling back", "op", r.spec.Op, "err", stageErr)
		kept, err := r.undo(ctx, rec, stageErr)
		return rec, nil, kept, err
	}
	return rec, known, false, nil
}

// withCtime adds the moved inode's ctime (spec.Ctime) to after, the
// writes sent with the commit, and says where it is (-1: not
// there). A file moved to another directory whose inode the caller knows
// gets it as a compare-and-set of the whole inode at that version, whose
// new version the finish then moves its Parents at (as SrcAttr says):
// an unconditional update would change the version under the finish's
// feet and cost it a read.
func (r *renameRun) withCtime(after []store.BulkOp) ([]store.BulkOp, int) {
	spec := r.spec
	if spec.Ctime == 0 {
		return after, -1
	}
	if a := spec.SrcAttr; a != nil && spec.Src.Type != store.TypeDir && spec.SrcParent != spec.DstParent && a.Ino == spec.Src.Ino && a.Ver.Known() {
		n := *a
		n.Ctime = spec.Ctime
		if o := store.PutInode(n, a.Ver); o.Err() == nil {
			return append(after, o), len(after)
		}
	}
	r.spec.SrcAttr = nil // not known at the version the finish would need
	return append(after, store.SetCtime(spec.Src.Ino, spec.Ctime)), len(after)
}

// ctimeSet learns from res, the results of the writes sent with the
// commit, whether the moved inode's ctime (res[at]) was set: at a known
// version, SrcAttr is now that inode at its new version; a compare-and-set
// refused (someone changed the inode meanwhile) is followed by an
// unconditional update, before the caller hears of the rename, whose
// stat must show the new ctime.
func (r *renameRun) ctimeSet(ctx context.Context, res []store.BulkResult, at int) {
	a := r.spec.SrcAttr
	if a == nil {
		return // an unconditional update, best effort like the times
	}
	r.spec.SrcAttr = nil
	if at < len(res) && res[at].Err == nil {
		n := *a
		n.Ctime, n.Ver = r.spec.Ctime, res[at].Ver
		r.spec.SrcAttr = &n
		return
	}
	if _, err := r.j.b.Write(ctx, store.SetCtime(r.spec.Src.Ino, r.spec.Ctime)); err != nil {
		r.j.log.Warn("setting the ctime of a renamed file failed", "op", r.spec.Op, "ino", r.spec.Src.Ino, "err", err)
	}
}

// commit is step 3, the commit point: one compare-and-set of the record
// to COMMITTED, sent with after (the caller's writes, best effort: their
// failures are logged, and their results returned when known). err is nil
// only when it committed; the record is returned at its new version.
func (r *renameRun) commit(ctx context.Context, rec store.OpRecord, after []store.BulkOp) (store.OpRecord, []store.BulkResult, bool, error) {
	j, spec := r.j, r.spec
	// A lapsed lease means someone may be taking over: do not commit on a
	// lease we cannot vouch for.
	if err := r.sess.Check(); err != nil {
		if rerr := j.abort(ctx, rec); rerr != nil {
			j.log.Warn("rollback failed; recovery of this session will finish it", "op", spec.Op, "err", rerr)
		}
		return rec, nil, false, err
	}
	committed := rec
	committed.State = store.OpCommitted
	v, afterRes, err := r.commitWith(ctx, store.PutOp(committed, rec.Ver), after)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return rec, nil, false, fmt.Errorf("rename %s was taken over before its commit: %w", spec.Op, ErrLeaseLost)
		}
		// Unknown outcome: read the record to learn it.
		cur, gerr := j.b.GetOp(ctx, spec.Op)
		if gerr != nil {
			// Still unknown: the sweeper reads it later and finishes or
			// undoes it; the caller can only be told that we do not know.
			kept, err := r.keep(rec, fmt.Errorf("rename %s: commit outcome unknown: %w", spec.Op, err))
			return rec, nil, kept, err
		}
		if cur.Owner != r.sess.ID() || cur.Epoch != rec.Epoch {
			return rec, nil, false, fmt.Errorf("rename %s was taken over at its commit: %w", spec.Op, ErrLeaseLost)
		}
		if cur.State != store.OpCommitted {
			kept, err := r.undo(ctx, cur, err)
			return rec, nil, kept, err
		}
		v = cur.Ver
	}
	committed.Ver = v
	return committed, afterRes, false, nil
}

// commitWith writes the commit o, with after in the same bulk if any,
// and returns after's results.
func (r *renameRun) commitWith(ctx context.Context, o store.BulkOp, after []store.BulkOp) (store.Version, []store.BulkResult, error) {
	if len(after) == 0 {
		v, err := r.j.b.Write(ctx, o)
		return v, nil, err
	}
	if err := o.Err(); err != nil {
		return store.Version{}, nil, err
	}
	res, err := r.j.b.Bulk(ctx, append([]store.BulkOp{o}, after...))
	if err != nil {
		return store.Version{}, nil, err
	}
	for _, w := range res[1:] {
		if w.Err != nil {
			r.j.log.Warn("a write made with the commit of a rename failed", "op", r.spec.Op, "err", w.Err)
		}
	}
	return res[0].Ver, res[1:], res[0].Err
}

// finishFailed ends a rename whose finish (step 4) failed after the
// commit point.
func (r *renameRun) finishFailed(fin store.OpRecord, err error) (bool, error) {
	j, spec := r.j, r.spec
	if r.sess.Check() != nil || errors.Is(err, store.ErrConflict) {
		// Taken over, or about to be: the new owner finishes the
		// rename and releases our entries. As for any operation whose
		// lock entries vanished (whoever judged us dead may have done
		// conflicting work), the caller hears EIO, although the
		// rename happened.
		j.log.Warn("committed rename left to recovery", "op", spec.Op, "err", err)
		r.end()
		return true, fmt.Errorf("rename %s committed, then was taken over: %v: %w", spec.Op, err, ErrLeaseLost)
	}
	j.log.Warn("finishing a committed rename failed; retrying while holding the locks", "op", spec.Op, "err", err)
	return r.keep(fin, nil)
}

// conclude is step 5: DONE, the release of the locks and the caller's own
// writes (times) go in one bulk. The locks are released only if DONE is in
// the same request, and a DONE that fails means someone took the record
// over, who then releases our entries anyway.
func (r *renameRun) conclude(ctx context.Context, fin store.OpRecord) (bool, error) {
	j, spec := r.j, r.spec
	done := fin
	done.State, done.Aborted = store.OpDone, false
	o := store.PutOp(done, fin.Ver)
	if err := o.Err(); err != nil {
		return false, err
	}
	res, err := j.m.ReleaseWith(ctx, spec.Held, append([]store.BulkOp{o}, spec.After...))
	if res == nil {
		// The request failed as a whole: whether DONE and the release
		// landed is unknown. The sweeper reads the record and ends it.
		j.log.Warn("ending a finished rename failed; retrying while holding the locks", "op", spec.Op, "err", err)
		return r.keep(fin, nil)
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
	for _, w := range res[1:] {
		if w.Err != nil {
			j.log.Warn("a write made with the end of a rename failed", "op", spec.Op, "err", w.Err)
		}
	}
	return false, err
}
