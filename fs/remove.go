package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/esfs/esfs/store"
)

// remove deletes the path name of directory parent (unlink, or rmdir if
// wantDir): its path document (with compare-and-set on the version just
// read), then one link of its inode.
func (f *FS) remove(ctx context.Context, parent dirRef, name string, wantDir bool) error {
	if f.opts.ReadOnly {
		return syscall.EROFS
	}
	if err := store.CheckName(name); err != nil {
		return err
	}
	dir, path, txn, err := f.lockEntry(ctx, parent, name)
	if err != nil {
		return err
	}
	err = f.removeLocked(ctx, parent, dir, path, wantDir)
	f.end(ctx, txn, &err)
	f.delegs.changedHere(parent.ino(), name, dirEntry{absent: true}, err == nil)
	return err
}

func (f *FS) removeLocked(ctx context.Context, parent dirRef, dir, path string, wantDir bool) error {
	if err := f.checkDirAt(ctx, parent.ino(), dir, true); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		sn, err := f.resolveFresh(ctx, path)
		if err != nil {
			return err
		}
		if wantDir && sn.Type != store.TypeDir {
			return syscall.ENOTDIR
		}
		if !wantDir && sn.Type == store.TypeDir {
			return syscall.EISDIR
		}
		if wantDir {
			empty, err := f.isEmptyDir(ctx, path)
			if err != nil {
				return err
			}
			if !empty {
				return syscall.ENOTEMPTY
			}
		}
		opPath := store.DeleteDentry(path, sn.Ver)
		if err := opPath.Err(); err != nil {
			return err
		}
		subdirs := 0
		if sn.Type == store.TypeDir {
			subdirs = -1
		}
		// The directory's times, and its count for a subdirectory, ride
		// with the delete.
		opParent, pl, err := f.dirLinksOp(ctx, parent.ino(), subdirs, now())
		if err != nil {
			return err
		}
		f.cache.InvalidatePath(path)
		f.noteWrite()
		res, err := f.st.Bulk(ctx, []store.BulkOp{opPath, opParent})
		if err != nil {
			return err
		}
		f.settleDirLinks(ctx, pl, res[1], res[0].Err == nil)
		err = res[0].Err
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue // changed between our read and delete: look again
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%q changed while being removed: %w", path, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		return f.dropLink(ctx, sn.Ino)
	}
}

// isEmptyDir reports whether a directory has no entries. The search must
// see every committed child, so it refreshes first.
func (f *FS) isEmptyDir(ctx context.Context, path string) (bool, error) {
	if err := f.st.Refresh(ctx); err != nil {
		return false, err
	}
	f.refreshed.Store(f.writes.Load())
	sc := f.co.View.List(path, 16)
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return false, err
		}
		if len(bad) > 0 {
			return false, bad[0] // a corrupt child still makes it non-empty
		}
		if page == nil {
			return true, nil
		}
		if len(page) > 0 {
			return false, nil
		}
	}
}
