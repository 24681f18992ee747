// Rolling back a rename that did not reach its commit point: the record
// goes ABORTED, every document it staged is undone, and it is set DONE.

package locking

import (
	"context"
	"fmt"

	"github.com/esfs/esfs/store"
)

func rollbackFix(b Backend) func(store.Dentry) (store.BulkOp, bool, error) {
	return func(d store.Dentry) (store.BulkOp, bool, error) {
		switch d.Intent.Role {
		case store.RoleDst:
			o := store.DeleteDentry(d.Path, d.Ver)
			return o, true, o.Err()
		case store.RoleSrc, store.RoleOvr:
			c := d
			c.Intent = store.Intent{}
			o := store.PutDentry(c, d.Ver)
			return o, true, o.Err()
		}
		return store.BulkOp{}, false, nil
	}
}

// abort rolls back a rename that has not committed: first the record goes
// to ABORTED (so that readers ignore its new paths at once), then its
// documents are undone, then it is DONE.
func (j *Journal) abort(ctx context.Context, rec store.OpRecord) error {
	if rec.State == store.OpPrepared {
		a := rec
		a.State = store.OpAborted
		v, err := j.b.Write(ctx, store.PutOp(a, rec.Ver))
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
	if rec.IsBatch() {
		if err := j.undoBatch(ctx, rec); err != nil {
			return err
		}
	}
	_, err := j.setDone(ctx, rec, true)
	return err
}
