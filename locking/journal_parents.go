// What a finished rename does to the Parents of the files it moved (see
// store.Inode.Parents): the directory whose delegations a change of their
// attributes recalls follows them.

package locking

import (
	"context"
	"errors"

	"github.com/esfs/esfs/store"
)

// A moved file's Parents are written after the commit point and before
// the operation's locks (a rename's change locks of both directories, a
// batch's write delegations) are given back. While they are held no other
// mount holds a read delegation on either directory; once they go, a
// mount that takes one on the new directory reads the file's inode after
// the move, Parents included. A change of the attributes that read the
// inode before the move writes over it at the version it read, which the
// move changed: its compare-and-set fails, it reads again, and then
// recalls the new directory.
//
// The write is a compare-and-set at a version read while the operation's
// owner could still vouch for its session (Session.Check between the read
// and the write): a paused owner that wakes after its operation was taken
// over and finished, and the file moved on, cannot write an old
// directory back, which would leave the holders of the file's directory
// unrecalled. A move that cannot be made now keeps the operation (its
// locks held) for its sweeper or its taker to finish; one that can never
// be made (a damaged inode) leaves the old Parents, stale but safe (no
// mount caches the file's attributes under a directory that does not
// hold its name, see store.Inode.Parents); esfs fsck reports them and
// --repair sets them.

// parentTries bounds the rounds of moveParents against attribute changes
// landing meanwhile.
const parentTries = 10

// parentOp is the compare-and-set that applies m to known, the moved
// inode as the caller last read it (nil or without a version: unknown).
// ok is false when there is none to make.
func parentOp(m store.ParentMove, known *store.Inode) (store.BulkOp, bool) {
	if known == nil || known.Ino != m.Ino || !known.Ver.Known() {
		return store.BulkOp{}, false
	}
	n, changed := known.MoveParent(m)
	if !changed {
		return store.BulkOp{}, false
	}
	o := store.PutInode(n, known.Ver)
	return o, o.Err() == nil
}

// moveParents applies moves to the inodes they name: one read of them
// all, one bulk of compare-and-sets, and again for those another change
// came first to. It returns the inodes whose move may be worth trying
// again (a request that failed, changes that kept coming first, this
// session unable to vouch for itself): the caller keeps the operation,
// its locks held, for its sweeper or its taker to finish. A file that is
// gone needs nothing, and one whose inode cannot be read or written (a
// damaged document) keeps its old Parent, which is safe.
func (j *Journal) moveParents(ctx context.Context, sess *Session, op string, moves []store.ParentMove) (missed []uint64) {
	unmoved := func() []uint64 {
		out := make([]uint64, len(moves))
		for i, m := range moves {
			out[i] = m.Ino
		}
		return out
	}
	for attempt := 0; len(moves) > 0; attempt++ {
		if attempt == parentTries {
			return append(missed, unmoved()...)
		}
		inos := make([]uint64, len(moves))
		for i, m := range moves {
			inos[i] = m.Ino
		}
		res, err := j.b.GetInodes(ctx, inos)
		if err != nil {
			j.log.Debug("reading moved files to record their directory", "op", op, "err", err)
			return append(missed, unmoved()...)
		}
		var ops []store.BulkOp
		var opMoves []store.ParentMove
		for i, r := range res {
			if r.Err != nil {
				if !errors.Is(r.Err, store.ErrNotFound) { // else gone: nothing to record
					// Damaged: no try will do better (fsck reports it).
					j.log.Warn("reading a moved file to record its directory", "op", op, "ino", moves[i].Ino, "err", r.Err)
				}
				continue
			}
			if o, ok := parentOp(moves[i], &r.Inode); ok {
				ops, opMoves = append(ops, o), append(opMoves, moves[i])
			}
		}
		moves = opMoves
		if len(ops) == 0 {
			return missed
		}
		if err := sess.Check(); err != nil {
			// See above: whoever took the operation over moves them.
			return append(missed, unmoved()...)
		}
		out, err := j.b.Bulk(ctx, ops)
		if err != nil {
			j.log.Debug("recording moved files' directory", "op", op, "err", err)
			return append(missed, unmoved()...)
		}
		moves = moves[:0:0]
		for i, r := range out {
			switch {
			case errors.Is(r.Err, store.ErrConflict):
				moves = append(moves, opMoves[i])
			case r.Err != nil && !errors.Is(r.Err, store.ErrNotFound):
				// Refused for good (a mapping without the field, say):
				// the old Parent stays, which is safe.
				j.log.Warn("recording a moved file's directory", "op", op, "ino", opMoves[i].Ino, "err", r.Err)
			}
		}
		if len(moves) > 0 {
			store.Backoff(ctx, attempt, store.InodeBackoff)
		}
	}
	return missed
}
