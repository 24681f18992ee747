package locking

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	// DropLink removes one link from an inode replaced by a rename (the fs
	// layer owns inodes). It is called at most once per rename.
	DropLink func(ctx context.Context, ino uint64) error
	// Session returns the current session of this mount.
	Session func() *Session

	mu         sync.Mutex                // protects done and unfinished
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
	m.Recover = j.Recover
	return j
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
// released them, retrying from the sweeper (only the journal frees entries: the
// owner, while alive, finishes what it started before anyone else may
// touch those paths). Otherwise the caller releases the locks if err is
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
			// entries vanished, the caller hears EIO (another mount may have done
			// conflicting work meanwhile), although the rename happened.
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
		// after the record). Fence it so a late create cannot start it.
		cur = u.rec
		cur.State, cur.Aborted = store.OpDone, true
		if _, err := j.b.CreateOp(ctx, cur); err != nil && !errors.Is(err, store.ErrExists) {
			return false, err
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
		err = j.settle(ctx, cur)
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

// staged is one path document the rename wrote, with the version the write
// returned: the owner finishes or undoes exactly these without a search.
type staged struct {
	doc store.Dentry
}

// stageInFlight bounds the stage bulks of one directory rename in flight.
const stageInFlight = 4

// stage writes every intent of the rename and confirms each item.
func (j *Journal) stage(ctx context.Context, sess *Session, spec RenameSpec) ([]staged, error) {
	var out []staged
	src := spec.Src
	top := make([]store.BulkOp, 0, 2)
	var topDocs []store.Dentry
	if spec.Target != nil {
		t := *spec.Target
		t.Intent = store.Intent{Op: spec.Op, Role: store.RoleOvr, NewIno: src.Ino, NewType: src.Type}
		o, err := j.b.OpPutDentry(t, spec.Target.Ver)
		if err != nil {
			return nil, err
		}
		top, topDocs = append(top, o), append(topDocs, t)
	} else {
		d := store.Dentry{Path: spec.Dst, Ino: src.Ino, Type: src.Type, Intent: store.Intent{Op: spec.Op, Role: store.RoleDst}}
		o, err := j.b.OpCreateDentry(d)
		if err != nil {
			return nil, err
		}
		top, topDocs = append(top, o), append(topDocs, d)
	}
	s := src
	s.Intent = store.Intent{Op: spec.Op, Role: store.RoleSrc}
	o, err := j.b.OpPutDentry(s, src.Ver)
	if err != nil {
		return nil, err
	}
	top, topDocs = append(top, o), append(topDocs, s)
	vers, err := j.bulkAll(ctx, top)
	if err != nil {
		return nil, err
	}
	for i, d := range topDocs {
		d.Ver = vers[i]
		out = append(out, staged{doc: d})
	}
	if src.Type != store.TypeDir {
		return out, nil
	}
	// The subtree: scan a refreshed snapshot. Nothing can be added below
	// src while we hold our locks, so the snapshot is the whole subtree.
	if err := j.b.Refresh(ctx); err != nil {
		return nil, err
	}
	sc := j.b.ScanTree(src.Path, store.DefaultPageSize)
	defer sc.Close()
	// Each page's bulk is sent while the next page is read, a few at a
	// time: a subtree of N documents costs about N/1000/stageInFlight
	// round trips instead of N/1000 scans and bulks one after the other.
	var (
		mu       sync.Mutex // protects out and firstErr
		firstErr error
		wg       sync.WaitGroup
		inflight = make(chan struct{}, stageInFlight)
	)
	flush := func(ops []store.BulkOp, docs []store.Dentry) {
		defer wg.Done()
		defer func() { <-inflight }()
		vers, err := j.bulkAll(ctx, ops)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			return
		}
		for i, d := range docs {
			d.Ver = vers[i]
			out = append(out, staged{doc: d})
		}
	}
	failed := func() error {
		mu.Lock()
		defer mu.Unlock()
		return firstErr
	}
	finish := func(err error) ([]staged, error) {
		wg.Wait()
		if err == nil {
			err = failed()
		}
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	pages := 0
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return finish(err)
		}
		if len(bad) > 0 {
			return finish(fmt.Errorf("cannot move a subtree with a corrupt document: %w", bad[0]))
		}
		if page == nil {
			return finish(nil)
		}
		if err := failed(); err != nil {
			return finish(nil)
		}
		if err := sess.Check(); err != nil {
			return finish(err)
		}
		ops := make([]store.BulkOp, 0, 2*len(page))
		docs := make([]store.Dentry, 0, 2*len(page))
		for _, d := range page {
			if d.Path == src.Path {
				continue
			}
			if d.Intent.Op != "" {
				vis, ok, err := j.Visible(ctx, d)
				if err != nil {
					return finish(err)
				}
				if !ok {
					continue // garbage of a finished or aborted operation
				}
				d = store.Dentry{Path: vis.Path, Ino: vis.Ino, Type: vis.Type, Ver: d.Ver}
			}
			nd := store.Dentry{Path: spec.Dst + d.Path[len(src.Path):], Ino: d.Ino, Type: d.Type,
				Intent: store.Intent{Op: spec.Op, Role: store.RoleDst}}
			c, err := j.b.OpCreateDentry(nd)
			if err != nil {
				return finish(err)
			}
			marked := d
			marked.Intent = store.Intent{Op: spec.Op, Role: store.RoleSrc}
			mk, err := j.b.OpPutDentry(marked, d.Ver)
			if err != nil {
				return finish(err)
			}
			ops, docs = append(ops, c, mk), append(docs, nd, marked)
		}
		inflight <- struct{}{}
		wg.Add(1)
		go flush(ops, docs)
		pages++
		if pages == 2 {
			wg.Wait() // two pages staged, and no more: the crash point's state
			if err := crashPoint("rename-mid-stage"); err != nil {
				return finish(err)
			}
		}
	}
}

// bulkAll sends ops and requires every item to succeed; it returns the
// versions written.
func (j *Journal) bulkAll(ctx context.Context, ops []store.BulkOp) ([]store.Version, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	res, err := j.b.Bulk(ctx, ops)
	if err != nil {
		return nil, err
	}
	vers := make([]store.Version, len(res))
	for i, r := range res {
		if r.Err != nil {
			return nil, r.Err
		}
		vers[i] = r.Ver
	}
	return vers, nil
}

// fixKnown applies fix to the documents the owner staged, at the versions
// its writes returned. It reports false when any of them changed since (a
// takeover, or damage): the caller then falls back to the search.
func (j *Journal) fixKnown(ctx context.Context, docs []staged, fix func(store.Dentry) (store.BulkOp, bool, error)) (bool, error) {
	ops := make([]store.BulkOp, 0, len(docs))
	for _, s := range docs {
		o, ok, err := fix(s.doc)
		if err != nil {
			return false, err
		}
		if ok {
			ops = append(ops, o)
		}
	}
	res, err := j.b.Bulk(ctx, ops)
	if err != nil {
		return false, err
	}
	for _, r := range res {
		if r.Err != nil {
			return false, nil
		}
	}
	return true, nil
}

func finishFix(b Backend) func(store.Dentry) (store.BulkOp, bool, error) {
	return func(d store.Dentry) (store.BulkOp, bool, error) {
		switch d.Intent.Role {
		case store.RoleSrc:
			o, err := b.OpDeleteDentry(d.Path, d.Ver)
			return o, true, err
		case store.RoleDst:
			c := d
			c.Intent = store.Intent{}
			o, err := b.OpPutDentry(c, d.Ver)
			return o, true, err
		case store.RoleOvr:
			c := d
			c.Ino, c.Type, c.Intent = d.Intent.NewIno, d.Intent.NewType, store.Intent{}
			o, err := b.OpPutDentry(c, d.Ver)
			return o, true, err
		}
		return store.BulkOp{}, false, nil
	}
}

func rollbackFix(b Backend) func(store.Dentry) (store.BulkOp, bool, error) {
	return func(d store.Dentry) (store.BulkOp, bool, error) {
		switch d.Intent.Role {
		case store.RoleDst:
			o, err := b.OpDeleteDentry(d.Path, d.Ver)
			return o, true, err
		case store.RoleSrc, store.RoleOvr:
			c := d
			c.Intent = store.Intent{}
			o, err := b.OpPutDentry(c, d.Ver)
			return o, true, err
		}
		return store.BulkOp{}, false, nil
	}
}

// finish rolls a committed rename forward until no document carries it,
// then sets it DONE. Idempotent: a taker and a woken former owner may run
// it at the same time; only the record's current owner can set DONE.
// known, when the owner passes what it staged (every item confirmed, none
// resent), is finished directly; no other document can carry the op. Else,
// or if one of them changed, a refreshed search finds them all.
func (j *Journal) finish(ctx context.Context, rec store.OpRecord, known []staged) (store.OpRecord, error) {
	rec, err := j.finishDocs(ctx, rec, known)
	if err != nil {
		return rec, err
	}
	return j.setDone(ctx, rec, false)
}

// finishDocs is finish short of DONE: when it returns, no document carries
// the operation, and the record (returned, at its new version if it
// changed) is still COMMITTED.
func (j *Journal) finishDocs(ctx context.Context, rec store.OpRecord, known []staged) (store.OpRecord, error) {
	ok := false
	if known != nil {
		var err error
		if ok, err = j.fixKnown(ctx, known, finishFix(j.b)); err != nil {
			return rec, err
		}
	}
	if err := crashPoint("rename-mid-finish"); err != nil {
		return rec, err
	}
	if !ok {
		if err := j.resolveDocs(ctx, rec.ID, finishFix(j.b)); err != nil {
			return rec, err
		}
	} else if rec.SrcType == store.TypeDir {
		// Make the finished subtree visible to search before DONE: a
		// listing of the new directory (found by a realtime lookup) must
		// not come back empty because search still has the stage's state.
		if err := j.b.Refresh(ctx); err != nil {
			return rec, err
		}
	}
	drop := rec.Overwritten != 0 && !rec.LinkDropped
	links := dirLinkDeltas(rec)
	move := len(links) > 0 && !rec.DirLinksMoved
	if drop || move {
		// Marked first, in one compare-and-set for both: each happens at
		// most once, whoever finishes, and a crash in between leaves
		// counts that fsck repairs.
		marked := rec
		marked.LinkDropped = rec.LinkDropped || drop
		marked.DirLinksMoved = rec.DirLinksMoved || move
		v, err := j.b.PutOp(ctx, marked, rec.Ver)
		if err != nil {
			return rec, fmt.Errorf("marking the replaced inode's link as dropped and the directories' links as moved: %w", err)
		}
		marked.Ver = v
		rec = marked
		if err := crashPoint("rename-after-links-marked"); err != nil {
			return rec, err
		}
		if move {
			j.moveDirLinks(ctx, links)
		}
		if drop && j.DropLink != nil {
			if err := j.DropLink(ctx, rec.Overwritten); err != nil {
				j.log.Warn("could not drop the link of a replaced inode (fsck reclaims it)", "ino", rec.Overwritten, "err", err)
			}
		}
	}
	return rec, nil
}

// dirLinkDeltas is what a rename does to directories' link counts: a
// directory moved to another parent takes one link (its "..") from the
// old parent to the new one, and a replaced directory takes one from the
// destination's parent.
func dirLinkDeltas(rec store.OpRecord) map[uint64]int {
	out := map[uint64]int{}
	if rec.SrcType == store.TypeDir && rec.SrcParent != 0 && rec.DstParent != 0 && rec.SrcParent != rec.DstParent {
		out[rec.SrcParent]--
		out[rec.DstParent]++
	}
	if rec.Overwritten != 0 && rec.OverwrittenType == store.TypeDir && rec.DstParent != 0 {
		out[rec.DstParent]--
	}
	for ino, d := range out {
		if d == 0 {
			delete(out, ino)
		}
	}
	return out
}

// moveDirLinks applies link count changes to directories, each a
// read-modify-write of its own, all at once. A failure is logged: the
// count is then off, for fsck to repair, but the rename has happened.
func (j *Journal) moveDirLinks(ctx context.Context, deltas map[uint64]int) {
	var wg sync.WaitGroup
	for ino, d := range deltas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := j.b.AddDirLinks(ctx, ino, d, 0); err != nil && !errors.Is(err, store.ErrNotFound) {
				j.log.Warn("could not move a directory link count of a rename (esfs fsck --repair counts it)", "ino", ino, "delta", d, "err", err)
			}
		}()
	}
	wg.Wait()
}

// abort rolls back a rename that has not committed: first the record goes
// to ABORTED (so that readers ignore its new paths at once), then its
// documents are undone, then it is DONE.
func (j *Journal) abort(ctx context.Context, rec store.OpRecord) error {
	if rec.State == store.OpPrepared {
		a := rec
		a.State = store.OpAborted
		v, err := j.b.PutOp(ctx, a, rec.Ver)
		if err != nil {
			return err
		}
		a.Ver = v
		rec = a
	}
	if rec.State != store.OpAborted {
		return fmt.Errorf("operation %s is %s, not abortable", rec.ID, rec.State)
	}
	// The caller still holds the operation's locks and releases them.
	return j.rollback(ctx, rec)
}

func (j *Journal) rollback(ctx context.Context, rec store.OpRecord) error {
	if err := j.resolveDocs(ctx, rec.ID, rollbackFix(j.b)); err != nil {
		return err
	}
	_, err := j.setDone(ctx, rec, true)
	return err
}

// resolveDocs applies fix to every path document carrying op until a
// refreshed search finds none. Conflicts (a concurrent finisher, or a late
// write of a former owner) just mean another round.
func (j *Journal) resolveDocs(ctx context.Context, op string, fix func(store.Dentry) (store.BulkOp, bool, error)) error {
	for round := 0; ; round++ {
		if err := j.b.Refresh(ctx); err != nil {
			return err
		}
		sc := j.b.ScanOp(op, store.DefaultPageSize)
		found := 0
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil {
				sc.Close()
				return err
			}
			if len(bad) > 0 {
				sc.Close()
				return fmt.Errorf("operation %s: %w", op, bad[0])
			}
			if page == nil {
				break
			}
			found += len(page)
			ops := make([]store.BulkOp, 0, len(page))
			for _, d := range page {
				o, ok, err := fix(d)
				if err != nil {
					sc.Close()
					return err
				}
				if ok {
					ops = append(ops, o)
				}
			}
			res, err := j.b.Bulk(ctx, ops)
			if err != nil {
				sc.Close()
				return err
			}
			for _, r := range res {
				if r.Err != nil && !errors.Is(r.Err, store.ErrConflict) && !errors.Is(r.Err, store.ErrNotFound) {
					sc.Close()
					return r.Err
				}
			}
			if err := crashPoint("resolve-after-first-page"); err != nil {
				sc.Close()
				return err
			}
		}
		sc.Close()
		if found == 0 {
			return nil
		}
		if round > 50 {
			return fmt.Errorf("operation %s: documents keep changing", op)
		}
	}
}

// resolveStray settles a document that carries the intent of a finished
// operation as the operation's outcome says: deleted if readers do not see
// it, else stripped of the intent. Conditional on the version read.
func (j *Journal) resolveStray(ctx context.Context, d store.Dentry) error {
	vis, ok, err := j.Visible(ctx, d)
	if err != nil {
		return err
	}
	var o store.BulkOp
	if !ok {
		o, err = j.b.OpDeleteDentry(d.Path, d.Ver)
	} else {
		fixed := vis
		fixed.Intent = store.Intent{}
		o, err = j.b.OpPutDentry(fixed, d.Ver)
	}
	if err != nil {
		return err
	}
	res, err := j.b.Bulk(ctx, []store.BulkOp{o})
	if err == nil {
		err = res[0].Err
	}
	return err
}

// setDone marks the record DONE (aborted or not), at its version.
func (j *Journal) setDone(ctx context.Context, rec store.OpRecord, aborted bool) (store.OpRecord, error) {
	d := rec
	d.State, d.Aborted = store.OpDone, aborted
	v, err := j.b.PutOp(ctx, d, rec.Ver)
	if err != nil {
		return rec, fmt.Errorf("setting operation %s done: %w", rec.ID, err)
	}
	d.Ver = v
	return d, nil
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
		v, err := j.b.PutOp(ctx, took, rec.Ver)
		if errors.Is(err, store.ErrConflict) {
			return nil // someone else moved it on: the caller looks again
		}
		if err != nil {
			return err
		}
		took.Ver = v
		j.log.Warn("took over an operation of a dead mount", "op", rec.ID, "state", rec.State, "from", from, "epoch", took.Epoch)
		if err := j.settle(ctx, took); err != nil {
			return err
		}
		j.m.metrics.recovered.Inc()
	}
	return j.releaseRecorded(ctx, from, rec)
}

// settle rolls an operation forward (COMMITTED) or back (ABORTED), as
// whoever owns its record; in other states there is nothing to do.
func (j *Journal) settle(ctx context.Context, rec store.OpRecord) error {
	switch rec.State {
	case store.OpCommitted:
		done, err := j.finish(ctx, rec, nil)
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
	if err := j.settle(ctx, rec); err != nil {
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

// Visible resolves a path document's intent through its operation record:
// it returns the document as readers must see it, or ok=false when it is
// not part of the tree.
func (j *Journal) Visible(ctx context.Context, d store.Dentry) (store.Dentry, bool, error) {
	if d.Intent.Op == "" {
		return d, true, nil
	}
	rec, err := j.record(ctx, d.Intent.Op)
	if err != nil {
		return d, false, err
	}
	committed := rec.State == store.OpCommitted || (rec.State == store.OpDone && !rec.Aborted)
	switch d.Intent.Role {
	case store.RoleSrc:
		return d, !committed, nil
	case store.RoleDst:
		// After DONE no legitimate document carries the op: a stray.
		return d, rec.State == store.OpCommitted, nil
	case store.RoleOvr:
		if committed {
			d.Ino, d.Type = d.Intent.NewIno, d.Intent.NewType
		}
		return d, true, nil
	}
	return d, false, fmt.Errorf("path %q has role %q: %w", d.Path, d.Intent.Role, store.ErrCorrupt)
}

// record reads an operation record; records in a final state are cached.
// A missing record is created ABORTED (never concluded from one stale read)
// so that its owner, if it is merely slow, cannot start it afterwards.
func (j *Journal) record(ctx context.Context, op string) (store.OpRecord, error) {
	j.mu.Lock()
	rec, ok := j.done[op]
	j.mu.Unlock()
	if ok {
		return rec, nil
	}
	rec, err := j.b.GetOp(ctx, op)
	if errors.Is(err, store.ErrNotFound) {
		sess := j.Session()
		aborted := store.OpRecord{ID: op, State: store.OpDone, Aborted: true, Owner: sess.ID(), Epoch: 1,
			SrcType: store.TypeFile, Created: time.Now().UnixNano()}
		if _, cerr := j.b.CreateOp(ctx, aborted); cerr != nil && !errors.Is(cerr, store.ErrExists) {
			return rec, cerr
		}
		rec, err = j.b.GetOp(ctx, op)
	}
	if err != nil {
		return rec, err
	}
	if rec.State == store.OpDone {
		j.remember(rec)
	}
	return rec, nil
}

func (j *Journal) remember(rec store.OpRecord) {
	if rec.State != store.OpDone {
		return
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.done) > 100000 {
		j.done = map[string]store.OpRecord{}
	}
	j.done[rec.ID] = rec
}
