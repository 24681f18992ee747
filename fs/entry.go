package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// checkDirAt checks that path p names this directory inode.
func (n *node) checkDirAt(ctx context.Context, p string, fresh bool) error {
	if p == "/" {
		return nil
	}
	var d store.Node
	var err error
	if fresh {
		d, err = n.f.resolveFresh(ctx, p)
	} else {
		d, err = n.f.resolve(ctx, p)
	}
	if errors.Is(err, store.ErrNotFound) {
		return errnoErr(syscall.ESTALE, "directory %q is gone", p)
	}
	if err != nil {
		return err
	}
	if d.Ino != n.ino() {
		return errnoErr(syscall.ESTALE, "directory %q is now inode %d, not %d", p, d.Ino, n.ino())
	}
	if d.Type != store.TypeDir {
		return errnoErr(syscall.ENOTDIR, "%q is not a directory", p)
	}
	return nil
}

// lockEntry takes the locks for changing entry name of this directory. The
// directory's path comes from go-fuse's tree, which a rename of an ancestor
// (here) changes when it replies: if it changed while we waited for the
// locks, the locks are on the old path, so take them again.
func (n *node) lockEntry(ctx context.Context, name string) (dir, path string, txn *locking.Txn, err error) {
	for attempt := 0; ; attempt++ {
		var ok bool
		dir, ok = n.path()
		if !ok {
			return "", "", nil, errnoErr(syscall.ENOENT, "directory inode %d was removed", n.ino())
		}
		path = store.Join(dir, name)
		if err := store.CheckPath(path); err != nil {
			return "", "", nil, err
		}
		txn, err = n.f.begin(ctx, dir, path)
		if err != nil {
			return "", "", nil, err
		}
		if now, ok := n.path(); ok && now == dir {
			return dir, path, txn, nil
		}
		_ = txn.End(ctx)
		if attempt >= 20 {
			return "", "", nil, errnoErr(syscall.EAGAIN, "directory inode %d keeps moving", n.ino())
		}
	}
}

// clearGarbage removes the document at path if it is not part of the tree
// (an intent of an aborted or finished rename). The caller holds the
// exclusive lock of path.
func (f *FS) clearGarbage(ctx context.Context, path string) (bool, error) {
	d, err := f.st.GetDentry(ctx, path)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if _, ok, err := f.co.Visible(ctx, d); err != nil || ok {
		return false, err
	}
	if _, err := f.st.DeleteDentry(ctx, path, d.Ver); err != nil && !errors.Is(err, store.ErrConflict) {
		return false, err
	}
	return true, nil
}
