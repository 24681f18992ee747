// Step 4 of a rename: finishing. After the commit point the old paths are
// deleted and the intents stripped, by the owner from what it staged or by
// anyone from a refreshed search, and the record is set DONE.

package locking

import (
	"context"
	"fmt"

	"github.com/esfs/esfs/store"
)

// fixKnown applies fix to the documents the owner staged, at the versions
// its writes returned, and sends extra (the caller's writes) with the
// last of them, whose results it returns. It reports false when any of the
// documents changed since (a takeover, or damage): the caller then falls
// back to the search. The fixes go fixBatch at a time: a directory of
// 100,000 entries would otherwise hold 200,000 operations, encoded, at
// once (56 MiB of a mount's memory at its peak).
func (j *Journal) fixKnown(ctx context.Context, docs []staged, fix func(store.Dentry) (store.BulkOp, bool, error), extra ...store.BulkOp) (bool, []store.BulkResult, error) {
	ok := true
	for len(docs) > 0 || extra != nil {
		part := docs[:min(len(docs), fixBatch)]
		docs = docs[len(part):]
		ops := make([]store.BulkOp, 0, len(part)+len(extra))
		for _, s := range part {
			o, fixed, err := fix(s.doc)
			if err != nil {
				return false, nil, err
			}
			if fixed {
				ops = append(ops, o)
			}
		}
		n := len(ops)
		if len(docs) == 0 {
			ops = append(ops, extra...)
		}
		res, err := j.b.Bulk(ctx, ops)
		if err != nil {
			return false, nil, err
		}
		for _, r := range res[:n] {
			if r.Err != nil {
				ok = false
			}
		}
		if len(docs) == 0 {
			return ok, res[n:], nil
		}
	}
	return ok, nil, nil
}

// fixBatch: the staged documents fixKnown fixes in one call to Bulk (which
// sends them as several requests in parallel).
const fixBatch = 20000

func finishFix(b Backend) func(store.Dentry) (store.BulkOp, bool, error) {
	return func(d store.Dentry) (store.BulkOp, bool, error) {
		switch d.Intent.Role {
		case store.RoleSrc:
			o := store.DeleteDentry(d.Path, d.Ver)
			return o, true, o.Err()
		case store.RoleDst:
			c := d
			c.Intent = store.Intent{}
			o := store.PutDentry(c, d.Ver)
			return o, true, o.Err()
		case store.RoleOvr:
			c := d
			c.Ino, c.Type, c.Intent = d.Intent.NewIno, d.Intent.NewType, store.Intent{}
			o := store.PutDentry(c, d.Ver)
			return o, true, o.Err()
		}
		return store.BulkOp{}, false, nil
	}
}

// finish rolls a committed rename forward until no document carries it,
// then sets it DONE. Idempotent: a taker and a woken former owner may run
// it at the same time; only the record's current owner can set DONE.
// known, when the owner passes what it staged (every item confirmed, none
// resent), is finished directly; no other document can carry the op. Else,
// or if one of them changed, a refreshed search finds them all. sess is
// the session that owns the record now.
func (j *Journal) finish(ctx context.Context, sess *Session, rec store.OpRecord, known []staged) (store.OpRecord, error) {
	rec, _, err := j.finishDocs(ctx, sess, rec, known, nil)
	if err != nil {
		return rec, err
	}
	return j.setDone(ctx, rec, false)
}

// finishDocs is finish short of DONE: when it returns nil, no document
// carries the operation, the files it moved have their new Parents (see
// journal_parents.go), and the record (returned, at its new version if it
// changed) is still COMMITTED; missed are the moved files whose Parents
// are not known to be moved when it fails. moved, if not
// nil, is a moved file's inode as the owner knows it: its Parents are moved
// at that version in the bulk that finishes the documents, saving a read
// when nobody changed it.
func (j *Journal) finishDocs(ctx context.Context, sess *Session, rec store.OpRecord, known []staged, moved *store.Inode) (_ store.OpRecord, missed []uint64, err error) {
	ok := false
	moves := rec.ParentMoves()
	if known != nil {
		var extra []store.BulkOp
		k := -1
		for i, m := range moves {
			if o, fits := parentOp(m, moved); fits && k < 0 {
				extra, k = append(extra, o), i
			}
		}
		var res []store.BulkResult
		if ok, res, err = j.fixKnown(ctx, known, finishFix(j.b), extra...); err != nil {
			return rec, nil, err
		}
		if k >= 0 && len(res) == 1 && res[0].Err == nil {
			moves = append(moves[:k:k], moves[k+1:]...)
		}
	}
	if err := crashPoint("rename-mid-finish"); err != nil {
		return rec, nil, err
	}
	if !ok {
		if err := j.resolveDocs(ctx, rec.ID, finishFix(j.b)); err != nil {
			return rec, nil, err
		}
	} else if rec.SrcType == store.TypeDir {
		// Make the finished subtree visible to search before DONE: a
		// listing of the new directory (found by a realtime lookup) must
		// not come back empty because search still has the stage's state.
		if err := j.b.Refresh(ctx, store.SearchedPaths); err != nil {
			return rec, nil, err
		}
	}
	if missed = j.moveParents(ctx, sess, rec.ID, moves); len(missed) > 0 {
		return rec, missed, fmt.Errorf("recording the new directory of %d moved files: not done yet", len(missed))
	}
	rec, err = j.settleLinks(ctx, rec)
	return rec, missed, err
}

// settleLinks drops the link of what the operation replaced or removed
// and moves the link counts of the directories a directory left and
// joined, each at most once whoever does it: the record is marked first,
// in one compare-and-set for both, and a crash in between leaves counts
// that fsck repairs. It returns the record at its new version.
func (j *Journal) settleLinks(ctx context.Context, rec store.OpRecord) (store.OpRecord, error) {
	drop := (rec.Overwritten != 0 || len(rec.DropInos) > 0) && !rec.LinkDropped
	links := dirLinkDeltas(rec)
	move := len(links) > 0 && !rec.DirLinksMoved
	if !drop && !move {
		return rec, nil
	}
	marked := rec
	marked.LinkDropped = rec.LinkDropped || drop
	marked.DirLinksMoved = rec.DirLinksMoved || move
	v, err := j.b.Write(ctx, store.PutOp(marked, rec.Ver))
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
	if drop && rec.Overwritten != 0 {
		j.mu.Lock()
		dropLink := j.dropLink
		j.mu.Unlock()
		if err := dropLink(ctx, rec.Overwritten, rec.DstParent); err != nil {
			j.log.Warn("could not drop the link of a replaced inode (fsck reclaims it)", "ino", rec.Overwritten, "err", err)
		}
	}
	if drop && len(rec.DropInos) > 0 {
		j.dropLinks(ctx, rec.DropInos)
	}
	return rec, nil
}

// setDone marks the record DONE (aborted or not), at its version.
func (j *Journal) setDone(ctx context.Context, rec store.OpRecord, aborted bool) (store.OpRecord, error) {
	d := rec
	d.State, d.Aborted = store.OpDone, aborted
	v, err := j.b.Write(ctx, store.PutOp(d, rec.Ver))
	if err != nil {
		return rec, fmt.Errorf("setting operation %s done: %w", rec.ID, err)
	}
	d.Ver = v
	return d, nil
}
