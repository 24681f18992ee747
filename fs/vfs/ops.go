package vfs

import (
	"context"
	"syscall"

	"github.com/esfs/esfs/store"
)

// The filesystem's entry operations by path, for callers without a kernel
// mount (in-process tests; tools that need single entries changed under
// the protocol). Each takes the locks and makes the writes of the kernel
// request it corresponds to, and returns Go errors: store's sentinels
// (store.ErrExists for a name taken, store.ErrNotFound for a missing one)
// or syscall.Errno values (ENOTEMPTY, ENOTDIR, ...), which a mount answers
// as the adapter (fs.FS.toErrno) maps them. Paths are absolute and clean. The parent directory
// is looked up first, in real time: a directory replaced by another one at
// its path before the locks are taken fails the operation with ESTALE.

// Create makes a new entry at path, of the type, mode and owner e asks
// for (a directory, a file, a symlink, a FIFO, a socket, a device). The
// name must be free: store.ErrExists if it is taken.
func (f *Mount) Create(ctx context.Context, path string, e Entry) (store.Node, error) {
	parent, name, err := f.parentOf(ctx, path)
	if err != nil {
		return store.Node{}, err
	}
	return f.MakeAt(ctx, parent, name, e)
}

// Link makes newPath another link to the inode at oldPath, which may not
// be a directory (EPERM), and returns the new entry with the inode's
// attributes as the link left them.
func (f *Mount) Link(ctx context.Context, oldPath, newPath string) (store.Node, error) {
	if err := store.CheckPath(oldPath); err != nil {
		return store.Node{}, err
	}
	old, err := f.resolveFresh(ctx, oldPath)
	if err != nil {
		return store.Node{}, err
	}
	parent, name, err := f.parentOf(ctx, newPath)
	if err != nil {
		return store.Node{}, err
	}
	if old.Type == store.TypeDir {
		if f.opts.ReadOnly {
			// As link(2): the new name (EEXIST) and the mount (EROFS)
			// are checked before what the old one is.
			if err := store.CheckName(name); err != nil {
				return store.Node{}, err
			}
			return store.Node{}, f.readOnlyRefusal(ctx, parent, name)
		}
		return store.Node{}, errnoErr(syscall.EPERM, "%q is a directory", oldPath)
	}
	return f.LinkAt(ctx, parent, name, old.Ino)
}

// Unlink removes the entry at path, which may not be a directory (EISDIR),
// and drops one link of its inode: the inode and its data go with the
// last one (unless this mount still has it open).
func (f *Mount) Unlink(ctx context.Context, path string) error {
	parent, name, err := f.parentOf(ctx, path)
	if err != nil {
		return err
	}
	return f.RemoveAt(ctx, parent, name, false, 0)
}

// Rmdir removes the empty directory at path (ENOTEMPTY if it is not,
// ENOTDIR if it is no directory).
func (f *Mount) Rmdir(ctx context.Context, path string) error {
	parent, name, err := f.parentOf(ctx, path)
	if err != nil {
		return err
	}
	return f.RemoveAt(ctx, parent, name, true, 0)
}

// Rename moves the entry at src, and a directory's whole subtree, to dst,
// as rename(2) does: an existing dst is replaced (unless noReplace: then
// EEXIST), and a replaced file loses that link.
func (f *Mount) Rename(ctx context.Context, src, dst string, noReplace bool) error {
	if f.opts.ReadOnly {
		return syscall.EROFS
	}
	from, name, err := f.parentOf(ctx, src)
	if err != nil {
		return err
	}
	to, newName, err := f.parentOf(ctx, dst)
	if err != nil {
		return err
	}
	return f.RenameAt(ctx, from, name, to, newName, &RenameDirs{}, noReplace)
}
