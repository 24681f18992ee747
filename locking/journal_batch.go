// Batches: what a mount made in memory under write delegations, flushed
// as one journaled operation so that every other reader sees all of it or
// none of it.

package locking

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/esfs/esfs/store"
)

// BatchSpec is one flush of a write delegation's holder: entries made in
// memory, in directories it holds for writing (or made in the batch).
type BatchSpec struct {
	Op string
	// Under are the write delegations of the directories that already
	// exist and gain entries in the batch. Each holder entry is marked
	// with the batch (compare-and-set) in the record's bulk: a mount
	// declared dead meanwhile has lost its entry, so its batch never
	// starts; one declared dead later has the batch settled by whoever
	// drops its entry (Manager.HolderGone).
	Under []*Delegation
	// Inodes and Names are the new inodes and path documents. The names
	// are staged with the intent {Op, RoleDst}: readers see them once the
	// record commits, all at once.
	Inodes []store.Inode
	Names  []store.Dentry
	// Removed are stored names the batch removes (an unlink, an rmdir),
	// with their inode and type; Flush reads their versions. They are
	// staged with the intent {Op, RoleSrc}: readers see them until the
	// record commits, then not. Their inodes lose a link once committed
	// (OpRecord.DropInos). A name found gone or naming another inode is
	// left out: under the write delegation only damage or a repair does
	// that, and the batch must still land.
	Removed []store.Dentry
	// Moved are stored names a rename in the batch moves away (the
	// source of a rename of a stored file): staged as Removed are, but
	// their inodes keep their link, which the rename's new name (in Names,
	// or in Replaced) takes over.
	Moved []store.Dentry
	// Replaced are stored names a rename in the batch replaces: Ino is the
	// inode named now, Intent.NewIno and NewType the one moved there. They
	// are staged with the intent {Op, RoleOvr}: readers see the old inode
	// until the record commits, the new one after; the old inode loses a
	// link once committed.
	Replaced []store.Dentry
	// Data are the chunk writes of the new files, which land with them.
	Data []store.BulkOp
	// Born are the write delegations of the directories the batch makes
	// (Delegations.BornInBatch): their lock documents are written in the
	// stage and must land there, as the inodes and names must. A
	// directory that became visible without its delegation's document
	// could be changed by other mounts without a recall, while this mount
	// (and its kernel) answer its names from memory.
	Born []*Delegation
	// Stage are more writes sent in the stage bulk (directories' times
	// and link counts, moved files' ctimes); Staged gets their results.
	// They land before the commit point: a batch rolled back leaves a
	// count too high, never too low, which fsck repairs.
	Stage  []store.BulkOp
	Staged func([]store.BulkResult)
	// Created gets the versions Inodes were created at, in their order,
	// once every one of them landed in the stage. (They are what is
	// stored only if the batch then commits.)
	Created func([]store.Version)
	// DirLinks are the counts the stage sets on existing directories
	// (compare-and-set items of Stage): a rollback puts them back.
	DirLinks []store.DirLinkChange
	// Moves are the stored files the batch renames into another
	// directory: their Parents follow them once the batch has committed
	// (in the record, for whoever finishes it; see journal_parents.go).
	// Unmoved, once the batch has committed, gets those whose Parents are
	// not known to have moved before Flush returns (the sweeper or a
	// taker moves them later): whatever the caller holds of their
	// attributes under the new directory must go.
	Moves   []store.ParentMove
	Unmoved func([]uint64)
	// Damaged gets each stored name of Removed, Moved or Replaced whose
	// document is damaged (err is its store.DocError): its change is left
	// out and the rest of the batch goes on. Trying again cannot cure it
	// (the document stays damaged until it is mended or removed), and a
	// batch failing on it for ever would keep its delegations, and every
	// other mount out of their directories.
	Damaged func(d store.Dentry, err error)
}

// Flush runs the batch of spec: the record with the marks of the holder
// entries, the stage, the commit point, the finish and DONE: five round
// trips whatever the batch's size. It returns nil once the batch is
// visible; ErrLeaseLost when this mount was fenced (nothing of the batch
// becomes visible); another error when the batch was rolled back (nothing
// visible) or its outcome is left to recovery (err wraps ErrBatchUnknown).
//
// Rolled back means settled for good: the record is DONE (or was never
// created, and cannot be any more), so nothing of this try can change
// the store later. Whenever that is not certain the error wraps
// ErrBatchUnknown, and the owner settles the try (SettleBatch) before it
// tries the same inodes again: a try rolled back after the next one
// landed would delete that one's inodes, and their data.
func (j *Journal) Flush(ctx context.Context, sess *Session, spec BatchSpec) error {
	inos := make([]uint64, len(spec.Inodes))
	for i, a := range spec.Inodes {
		inos[i] = a.Ino
	}
	if err := sess.Check(); err != nil {
		return err
	}
	if err := j.readStored(ctx, &spec); err != nil {
		return err // nothing sent: the batch stays pending
	}
	moving := map[uint64]bool{}
	for _, d := range spec.Moved {
		moving[d.Ino] = true
	}
	spec.Moves = slices.DeleteFunc(slices.Clone(spec.Moves), func(m store.ParentMove) bool { return !moving[m.Ino] })
	var drop []uint64
	for _, d := range spec.Removed {
		drop = append(drop, d.Ino)
	}
	for _, d := range spec.Replaced {
		drop = append(drop, d.Ino)
	}
	if len(spec.Names) == 0 && len(spec.Removed) == 0 && len(spec.Moved) == 0 && len(spec.Replaced) == 0 {
		return nil // every removal was found done already
	}
	rec := store.OpRecord{ID: spec.Op, State: store.OpPrepared, Owner: sess.ID(), Epoch: 1, SrcType: store.TypeFile,
		NewInos: inos, DropInos: drop, DirLinks: spec.DirLinks, Moves: spec.Moves, Created: time.Now().UnixNano()}
	rec, err := j.batchRecord(ctx, sess, rec, spec.Under)
	if err != nil {
		return err
	}
	if err := batchCrashPoint("batch-after-record", spec); err != nil {
		return err
	}
	known, err := j.stageBatch(ctx, spec)
	if err != nil {
		j.log.Warn("a batch failed while staging: rolling back", "op", spec.Op, "err", err)
		if rerr := j.abort(ctx, rec); rerr != nil {
			return fmt.Errorf("batch %s: %v; its rollback failed too (recovery of this session settles it): %v: %w", spec.Op, err, rerr, ErrBatchUnknown)
		}
		return err
	}
	if err := batchCrashPoint("batch-before-commit", spec); err != nil {
		return err
	}
	if err := sess.Check(); err != nil {
		if rerr := j.abort(ctx, rec); rerr != nil {
			j.log.Warn("rollback of a fenced batch failed; recovery of this session finishes it", "op", spec.Op, "err", rerr)
		}
		return err
	}
	committed := rec
	committed.State = store.OpCommitted
	v, err := j.b.Write(ctx, store.PutOp(committed, rec.Ver))
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("batch %s was taken over before its commit: %w", spec.Op, ErrLeaseLost)
	}
	if err != nil {
		cur, gerr := j.b.GetOp(ctx, spec.Op)
		switch {
		case gerr != nil:
			return fmt.Errorf("batch %s: commit outcome unknown: %v: %w", spec.Op, err, ErrBatchUnknown)
		case cur.Owner != sess.ID() || cur.Epoch != rec.Epoch:
			return fmt.Errorf("batch %s was taken over at its commit: %w", spec.Op, ErrLeaseLost)
		case cur.State != store.OpCommitted:
			if rerr := j.abort(ctx, cur); rerr != nil {
				return fmt.Errorf("batch %s: %v; rollback: %v: %w", spec.Op, err, rerr, ErrBatchUnknown)
			}
			return err
		}
		v = cur.Ver
	}
	committed.Ver = v
	if err := batchCrashPoint("batch-after-commit", spec); err != nil {
		return err
	}
	// Committed: the batch is visible. Finishing strips the intents, which
	// anyone can redo; a failure here loses nothing.
	fin, missed, err := j.finishDocs(ctx, sess, committed, known, nil)
	if err != nil {
		missed = missed[:0]
		for _, m := range spec.Moves {
			missed = append(missed, m.Ino)
		}
	}
	if len(missed) > 0 && spec.Unmoved != nil {
		spec.Unmoved(missed)
	}
	if err == nil {
		fin, err = j.setDone(ctx, fin, false)
	}
	if err != nil {
		j.log.Warn("finishing a committed batch failed; the sweeper or recovery finishes it", "op", spec.Op, "err", err)
		j.keepBatch(committed, sess)
		return nil
	}
	j.remember(fin)
	return nil
}

// batchCrashPoint is crashPoint at a step of a batch; a batch that
// changes stored names (removes, moves or replaces them) also has the
// step's point prefixed "removing-", so that a test can let the batches
// that make its tree land and stop at the one that changes it.
func batchCrashPoint(name string, spec BatchSpec) error {
	if len(spec.Removed)+len(spec.Moved)+len(spec.Replaced) > 0 {
		if err := crashPoint("removing-" + name); err != nil {
			return err
		}
	}
	return crashPoint(name)
}

// ErrBatchUnknown: whether a batch became visible is not known now; the
// journal (the owner's sweeper, or recovery) settles it later.
var ErrBatchUnknown = errors.New("outcome of the batch unknown")

// readStored reads the stored names spec changes (Removed, Moved,
// Replaced), in one mget, and sets them as stored: their versions are
// what the stage's compare-and-set needs. Under the write delegation
// nobody else changes them, so one gone or naming another inode is damage
// or a repair's doing: a removal or a move of it is left out (there is
// nothing left to remove), and a replaced name that is gone is made anew.
// A damaged one (a store.DocError) is left out too, told to spec.Damaged.
func (j *Journal) readStored(ctx context.Context, spec *BatchSpec) error {
	lists := []*[]store.Dentry{&spec.Removed, &spec.Moved, &spec.Replaced}
	var paths []string
	for _, l := range lists {
		for _, d := range *l {
			paths = append(paths, d.Path)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	res, err := j.b.GetDentries(ctx, paths)
	if err != nil {
		return err
	}
	k := 0
	for li, l := range lists {
		kept := make([]store.Dentry, 0, len(*l))
		for _, want := range *l {
			r := res[k]
			k++
			var de *store.DocError
			switch {
			case errors.As(r.Err, &de):
				if spec.Damaged != nil {
					spec.Damaged(want, r.Err)
				}
				continue
			case r.Err != nil && !errors.Is(r.Err, store.ErrNotFound):
				return r.Err
			case r.Err == nil && r.Dentry.Ino == want.Ino && r.Dentry.Intent.Op == "":
				got := r.Dentry
				got.Intent = want.Intent
				kept = append(kept, got)
				continue
			}
			j.log.Warn("a stored name a batch changes is gone, or names another inode: left alone", "op", spec.Op,
				"path", want.Path, "ino", want.Ino, "found", r.Dentry.Ino, "intent", r.Dentry.Intent.Op, "err", r.Err)
			if li == 2 && errors.Is(r.Err, store.ErrNotFound) {
				spec.Names = append(spec.Names, store.Dentry{Path: want.Path, Ino: want.Intent.NewIno, Type: want.Intent.NewType})
			}
		}
		*l = kept
	}
	return nil
}

// batchRecord is a batch's first step: its record, created PREPARED, and
// the mark of each holder entry in under, in one bulk.
func (j *Journal) batchRecord(ctx context.Context, sess *Session, rec store.OpRecord, under []*Delegation) (store.OpRecord, error) {
	ops := []store.BulkOp{store.CreateOp(rec)}
	for _, d := range under {
		ops = append(ops, store.WriteLock(store.LockWrite{Doc: d.markedDoc(rec.ID)}))
	}
	res, err := j.b.Bulk(ctx, ops)
	if err != nil {
		// Unknown: the record may exist, unmarked or marked. Fence it off
		// (done and aborted), so that nothing of it can start later.
		if ferr := j.fenceBatch(ctx, rec); ferr != nil {
			return rec, fmt.Errorf("batch %s: %v; fencing it off: %v: %w", rec.ID, err, ferr, ErrBatchUnknown)
		}
		return rec, err
	}
	if res[0].Err != nil {
		if errors.Is(res[0].Err, store.ErrExists) {
			return rec, fmt.Errorf("batch %s was fenced off by recovery: %w", rec.ID, ErrLeaseLost)
		}
		// Not created: fenced off as well, so that nothing can create
		// it later (a failure here leaves nothing to settle).
		_ = j.fenceBatch(ctx, rec)
		return rec, res[0].Err
	}
	rec.Ver = res[0].Ver
	for i, d := range under {
		r := res[1+i]
		if r.Err == nil {
			d.noteMarked(rec.ID, r.Ver)
			continue
		}
		// A waiting marker or a recall changed the document since we
		// last wrote it: mark it again from a fresh read, unless our
		// entry is gone (we were declared dead: the batch must not land).
		if err := j.remark(ctx, sess, d, rec.ID); err != nil {
			aborted := rec
			aborted.State, aborted.Aborted = store.OpDone, true
			if _, werr := j.b.Write(ctx, store.PutOp(aborted, rec.Ver)); werr != nil {
				j.log.Warn("could not fence a batch whose delegation could not be marked", "op", rec.ID, "err", werr)
				if !errors.Is(err, ErrLeaseLost) {
					return rec, fmt.Errorf("batch %s: %v; fencing it off: %v: %w", rec.ID, err, werr, ErrBatchUnknown)
				}
			}
			return rec, err
		}
	}
	return rec, nil
}

// remark marks d's holder entry with batch op from a fresh read.
func (j *Journal) remark(ctx context.Context, sess *Session, d *Delegation, op string) error {
	for attempt := 0; attempt < 20; attempt++ {
		docs, err := j.b.GetLocks(ctx, []string{store.DelegLockID(d.Ino)})
		if err != nil {
			return err
		}
		d.refresh(docs[0])
		if !hasOwn(docs[0], sess.ID(), d.op) {
			return fmt.Errorf("write delegation of directory %d is gone: %w", d.Ino, ErrLeaseLost)
		}
		v, err := j.b.Write(ctx, store.WriteLock(store.LockWrite{Doc: d.markedDoc(op)}))
		if err == nil {
			d.noteMarked(op, v)
			return nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		store.Backoff(ctx, attempt, recallBackoff)
	}
	return fmt.Errorf("marking the write delegation of directory %d: the document keeps changing", d.Ino)
}

// fenceBatch makes sure a batch whose record's outcome is unknown can
// never start: done and aborted, whether or not the record exists. An
// error: that is not certain.
func (j *Journal) fenceBatch(ctx context.Context, rec store.OpRecord) error {
	fenced := rec
	fenced.State, fenced.Aborted = store.OpDone, true
	_, err := j.b.Write(ctx, store.CreateOp(fenced))
	if err == nil || !errors.Is(err, store.ErrExists) {
		return err
	}
	cur, err := j.b.GetOp(ctx, rec.ID)
	if err != nil {
		return err
	}
	if cur.State != store.OpPrepared {
		return nil // settled already, or being settled by a takeover
	}
	cur.State, cur.Aborted = store.OpDone, true
	if _, err := j.b.Write(ctx, store.PutOp(cur, cur.Ver)); err != nil {
		j.log.Warn("could not fence a batch of unknown outcome", "op", rec.ID, "err", err)
		return err
	}
	return nil
}

// stageBatch writes the batch's inodes and its names with their intent,
// and the caller's writes; every inode and name must land.
func (j *Journal) stageBatch(ctx context.Context, spec BatchSpec) ([]staged, error) {
	ops := make([]store.BulkOp, 0, len(spec.Data)+len(spec.Inodes)+len(spec.Names)+len(spec.Removed)+len(spec.Moved)+len(spec.Replaced)+len(spec.Stage))
	ops = append(ops, spec.Data...)
	for _, a := range spec.Inodes {
		ops = append(ops, store.CreateInode(a))
	}
	docs := make([]store.Dentry, 0, len(spec.Names)+len(spec.Removed)+len(spec.Moved)+len(spec.Replaced))
	for _, d := range spec.Names {
		d.Intent = store.Intent{Op: spec.Op, Role: store.RoleDst}
		docs = append(docs, d)
		ops = append(ops, store.CreateDentry(d))
	}
	for _, d := range append(spec.Removed[:len(spec.Removed):len(spec.Removed)], spec.Moved...) {
		marked := d
		marked.Intent = store.Intent{Op: spec.Op, Role: store.RoleSrc}
		docs = append(docs, marked)
		ops = append(ops, store.PutDentry(marked, d.Ver))
	}
	for _, d := range spec.Replaced {
		marked := d
		marked.Intent = store.Intent{Op: spec.Op, Role: store.RoleOvr, NewIno: d.Intent.NewIno, NewType: d.Intent.NewType}
		docs = append(docs, marked)
		ops = append(ops, store.PutDentry(marked, d.Ver))
	}
	for _, d := range spec.Born {
		ops = append(ops, d.BornDoc(spec.Op))
	}
	ops = append(ops, spec.Stage...)
	for _, o := range ops {
		if err := o.Err(); err != nil {
			return nil, err
		}
	}
	res, err := j.b.Bulk(ctx, ops)
	if spec.Staged != nil {
		if err != nil {
			spec.Staged(nil)
		} else {
			spec.Staged(res[len(spec.Data)+len(spec.Inodes)+len(docs)+len(spec.Born):])
		}
	}
	if err != nil {
		return nil, err
	}
	for i := range spec.Data {
		if err := res[i].Err; err != nil {
			return nil, fmt.Errorf("batch %s: data: %w", spec.Op, err)
		}
	}
	res = res[len(spec.Data):]
	for i, a := range spec.Inodes {
		if err := res[i].Err; err != nil {
			return nil, fmt.Errorf("batch %s: inode %d: %w", spec.Op, a.Ino, err)
		}
	}
	if spec.Created != nil {
		vers := make([]store.Version, len(spec.Inodes))
		for i := range spec.Inodes {
			vers[i] = res[i].Ver
		}
		spec.Created(vers)
	}
	known := make([]staged, len(docs))
	for i, d := range docs {
		r := res[len(spec.Inodes)+i]
		if r.Err != nil {
			// Under a write delegation nobody else makes names here; one
			// that exists is the garbage of an operation that finished
			// or aborted, or damage: refuse the batch rather than guess.
			return nil, fmt.Errorf("batch %s: path %q: %w", spec.Op, d.Path, r.Err)
		}
		d.Ver = r.Ver
		known[i] = staged{doc: d}
	}
	res = res[len(spec.Inodes)+len(docs):]
	for i, d := range spec.Born {
		if err := res[i].Err; err != nil {
			return nil, fmt.Errorf("batch %s: the write delegation of the directory made at %q: %w", spec.Op, d.Path, err)
		}
	}
	// Landed (whether the batch then commits or not: the next try of one
	// rolled back overwrites them).
	for i, d := range spec.Born {
		d.landed(res[i].Ver)
	}
	return known, nil
}
