// Resolving intents: what readers see of a path document that carries a
// rename's intent (through the operation's record), and the search-driven
// settling of every document of an operation, or of a stray one.

package locking

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/esfs/esfs/store"
)

// resolveDocs applies fix to every path document carrying op until a
// refreshed search finds none. Conflicts (a concurrent finisher, or a late
// write of a former owner) just mean another round.
func (j *Journal) resolveDocs(ctx context.Context, op string, fix func(store.Dentry) (store.BulkOp, bool, error)) error {
	for round := 0; ; round++ {
		if err := j.b.Refresh(ctx, store.SearchedPaths); err != nil {
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

// ResolveStray settles a document that carries the intent of a finished
// operation as the operation's outcome says: deleted if readers do not see
// it, else stripped of the intent. Conditional on the version read.
func (j *Journal) ResolveStray(ctx context.Context, d store.Dentry) error {
	vis, ok, err := j.visible(ctx, d)
	if err != nil {
		return err
	}
	var o store.BulkOp
	if !ok {
		o = store.DeleteDentry(d.Path, d.Ver)
	} else {
		fixed := vis
		fixed.Intent = store.Intent{}
		o = store.PutDentry(fixed, d.Ver)
	}
	if err := o.Err(); err != nil {
		return err
	}
	res, err := j.b.Bulk(ctx, []store.BulkOp{o})
	if err == nil {
		err = res[0].Err
	}
	return err
}

// visible resolves a path document's intent through its operation record:
// it returns the document as readers must see it, or ok=false when it is
// not part of the tree. Readers outside the journal go through the View.
func (j *Journal) visible(ctx context.Context, d store.Dentry) (store.Dentry, bool, error) {
	if d.Intent.Op == "" {
		return d, true, nil
	}
	rec, err := j.record(ctx, d.Intent.Op)
	if err != nil {
		return d, false, err
	}
	return visibleAs(d, rec)
}

// visibleAs is the rule by which an intent is resolved, for a record already
// read: before the commit point readers see the old names and the replaced
// target, after it the new names and the target's new inode. After DONE no
// legitimate document carries the operation: a new name still carrying it
// is a stray.
func visibleAs(d store.Dentry, rec store.OpRecord) (store.Dentry, bool, error) {
	committed := rec.State == store.OpCommitted || (rec.State == store.OpDone && !rec.Aborted)
	switch d.Intent.Role {
	case store.RoleSrc:
		return d, !committed, nil
	case store.RoleDst:
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
	if errors.Is(err, store.ErrNotFound) && j.readOnly {
		// Not yet written (or collected long after DONE, when only
		// strays carry the op): not committed, which is all a reader
		// needs. Not remembered: its owner may still write it.
		return store.OpRecord{ID: op, State: store.OpDone, Aborted: true}, nil
	}
	if errors.Is(err, store.ErrNotFound) {
		sess := j.Session()
		aborted := store.OpRecord{ID: op, State: store.OpDone, Aborted: true, Owner: sess.ID(), Epoch: 1,
			SrcType: store.TypeFile, Created: time.Now().UnixNano()}
		if _, cerr := j.b.Write(ctx, store.CreateOp(aborted)); cerr != nil && !errors.Is(cerr, store.ErrExists) {
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
