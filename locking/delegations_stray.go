package locking

import (
	"context"

	"github.com/esfs/esfs/store"
)

// pendingLocked: a grant (or a birth) of the delegation of lock document
// id is under way here. Caller holds ds.mu.
func (ds *Delegations) pendingLocked(id string) bool {
	for ino := range ds.pending {
		if store.DelegLockID(ino) == id {
			return true
		}
	}
	return false
}

// releaseStray answers a recall of lock document id, on which this mount
// holds no delegation and grants none: an entry of this session's there
// under a delegation's lease op is one whose write this mount gave up on
// (an answer lost, a request held past its deadline that landed after the
// cleanup looked: campaign seed 278378662, a directory born with a create
// whose answer was lost), which nothing else would ever release while the
// session lives, holding every other mount's change of the directory to
// its lock timeout. It goes now.
func (ds *Delegations) releaseStray(ctx context.Context, sess *Session, id string) {
	docs, err := ds.c.b.GetLocks(ctx, []string{id})
	if err != nil || len(docs) == 0 || !docs[0].Found {
		return
	}
	doc := docs[0]
	ops := map[string]bool{}
	for _, h := range doc.Holders {
		if h.Session == sess.ID() && isLeaseOp(h.Op) {
			ops[h.Op] = true
		}
	}
	for _, w := range doc.Waiters {
		if w.Session == sess.ID() && isLeaseOp(w.Op) {
			ops[w.Op] = true
		}
	}
	for op := range ops {
		ds.c.log.Warn("releasing a delegation entry this mount never knew it held (its write's answer was lost)", "dir", doc.Path, "op", op)
		ds.c.Locks.releaseUnknown(sess, op, []Request{{ID: id, Path: doc.Path}})
	}
}
