// Step 2 of a rename: staging. Every path the rename creates, removes or
// replaces is written carrying the operation's intent, each item confirmed,
// before the commit point; a directory's subtree is staged a page at a time.

package locking

import (
	"context"
	"fmt"
	"sync"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// staged is one path document the rename wrote, with the version the write
// returned: the owner finishes or undoes exactly these without a search.
type staged struct {
	doc store.Dentry
}

// stageInFlight bounds the stage bulks of one directory rename in flight.
const stageInFlight = 4

// stageSubtree writes the intents of every path below the directory the
// rename moves, and confirms each item; the caller staged the directory's
// own path, and refreshed the path index once its locks were granted.
// Nothing can be added below src while the locks are held, so a scan
// without a snapshot sees the whole subtree.
func (j *Journal) stageSubtree(ctx context.Context, sess *Session, spec RenameSpec) ([]staged, error) {
	var out []staged
	src := spec.Src
	sc := j.b.ScanTree(src.Path, store.DefaultPageSize).Unsnapshotted()
	defer sc.Close()
	// Each page's bulk is sent while the next page is read, a few at a
	// time: a subtree of N documents costs about N/1000/stageInFlight
	// round trips instead of N/1000 scans and bulks one after the other.
	var (
		mu       lockorder.Mutex // protects out and firstErr
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
				vis, ok, err := j.visible(ctx, d)
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
			c := store.CreateDentry(nd)
			if err := c.Err(); err != nil {
				return finish(err)
			}
			marked := d
			marked.Intent = store.Intent{Op: spec.Op, Role: store.RoleSrc}
			mk := store.PutDentry(marked, d.Ver)
			if err := mk.Err(); err != nil {
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

// stageTop is the stage of the rename's own paths: the new path created
// (or the target marked), the source marked; each op's document beside it.
func stageTop(spec RenameSpec) ([]store.BulkOp, []store.Dentry, error) {
	src := spec.Src
	top := make([]store.BulkOp, 0, 2)
	var topDocs []store.Dentry
	if spec.Target != nil {
		t := *spec.Target
		t.Intent = store.Intent{Op: spec.Op, Role: store.RoleOvr, NewIno: src.Ino, NewType: src.Type}
		o := store.PutDentry(t, spec.Target.Ver)
		if err := o.Err(); err != nil {
			return nil, nil, err
		}
		top, topDocs = append(top, o), append(topDocs, t)
	} else {
		d := store.Dentry{Path: spec.Dst, Ino: src.Ino, Type: src.Type, Intent: store.Intent{Op: spec.Op, Role: store.RoleDst}}
		o := store.CreateDentry(d)
		if err := o.Err(); err != nil {
			return nil, nil, err
		}
		top, topDocs = append(top, o), append(topDocs, d)
	}
	s := src
	s.Intent = store.Intent{Op: spec.Op, Role: store.RoleSrc}
	o := store.PutDentry(s, src.Ver)
	if err := o.Err(); err != nil {
		return nil, nil, err
	}
	top, topDocs = append(top, o), append(topDocs, s)
	return top, topDocs, nil
}
