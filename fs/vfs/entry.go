package vfs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// Dir is the directory a call happens in: its path in the store now (ok
// false once it has none) and the inode that path must still name when the
// change is made. The adapter's kernel nodes are Dirs, and learn their
// paths from what the kernel holds, which renames update; a path-based
// operation (pathDir) keeps the path it was given.
type Dir interface {
	StorePath() (string, bool)
	Ino() uint64
}

// pathDir is the directory of a path-based operation: a path, and the
// inode it named when the operation looked it up.
type pathDir struct {
	p string
	i uint64
}

func (d pathDir) StorePath() (string, bool) { return d.p, true }
func (d pathDir) Ino() uint64               { return d.i }

// dirAt looks up directory p for a path-based operation, in real time:
// the operation re-checks it under its locks, and a stale cached inode
// would fail that check.
func (f *Mount) dirAt(ctx context.Context, p string) (pathDir, error) {
	if p == "/" {
		return pathDir{p, store.RootIno}, nil
	}
	sn, err := f.resolveFresh(ctx, p)
	if err != nil {
		return pathDir{}, err
	}
	if sn.Type != store.TypeDir {
		return pathDir{}, errnoErr(syscall.ENOTDIR, "%q is not a directory", p)
	}
	return pathDir{p, sn.Ino}, nil
}

// parentOf is the directory of path, looked up for a path-based
// operation, and the entry's name in it.
func (f *Mount) parentOf(ctx context.Context, path string) (pathDir, string, error) {
	if err := store.CheckPath(path); err != nil {
		return pathDir{}, "", err
	}
	if path == "/" {
		return pathDir{}, "", fmt.Errorf("%q is no entry of a directory: %w", path, store.ErrInvalid)
	}
	dir, name := store.Split(path)
	d, err := f.dirAt(ctx, dir)
	return d, name, err
}

// checkDirAt checks that path p names directory inode ino.
func (f *Mount) checkDirAt(ctx context.Context, ino uint64, p string, fresh bool) error {
	if p == "/" {
		return nil
	}
	var d store.Node
	var err error
	if fresh {
		d, err = f.resolveFresh(ctx, p)
	} else {
		d, err = f.resolve(ctx, p)
	}
	if errors.Is(err, store.ErrNotFound) {
		return errnoErr(syscall.ESTALE, "directory %q is gone", p)
	}
	if err != nil {
		return err
	}
	return dirIs(d.Dentry, ino, p)
}

// dirIs checks that d, read at path p, is directory inode ino.
func dirIs(d store.Dentry, ino uint64, p string) error {
	if d.Ino != ino {
		return errnoErr(syscall.ESTALE, "directory %q is now inode %d, not %d", p, d.Ino, ino)
	}
	if d.Type != store.TypeDir {
		return errnoErr(syscall.ENOTDIR, "%q is not a directory", p)
	}
	return nil
}

// entryUnder reads, in real time and in one round trip, directory dir
// (checked to be inode ino, as checkDirAt does) and its entry path. Only
// the path document is read: what the caller needs of the inode it reads
// itself, at the version it acts on.
func (f *Mount) entryUnder(ctx context.Context, ino uint64, dir, path string) (store.Dentry, error) {
	paths := []string{path}
	if dir != "/" {
		paths = append(paths, dir)
	}
	gen := f.cache.Gen()
	es, err := f.co.View.GetMany(ctx, paths)
	if err != nil {
		return store.Dentry{}, err
	}
	if dir != "/" {
		if !es[1].Found {
			return store.Dentry{}, errnoErr(syscall.ESTALE, "directory %q is gone", dir)
		}
		if err := dirIs(es[1].Dentry, ino, dir); err != nil {
			return store.Dentry{}, err
		}
	}
	if !es[0].Found {
		f.cache.PutNegative(path, gen)
		return store.Dentry{}, fmt.Errorf("%q: %w", path, store.ErrNotFound)
	}
	return es[0].Dentry, nil
}

// lockEntry takes the locks for changing entry name of directory parent. A
// kernel node's path comes from go-fuse's tree, which a rename of an
// ancestor (here) changes when it replies: if it changed while we waited
// for the locks, the locks are on the old path, so take them again.
func (f *Mount) lockEntry(ctx context.Context, parent Dir, name string) (dir, path string, txn *locking.Txn, err error) {
	return f.lockEntryOf(ctx, parent, name, 0)
}

// lockEntryOf is lockEntry that also takes the change lock of directory
// sub (if not 0), the entry itself: an rmdir ends its own attributes too.
// The locks are the strategy's, and the change of the directory (and of
// sub), which recalls other mounts' delegations on it.
func (f *Mount) lockEntryOf(ctx context.Context, parent Dir, name string, sub uint64) (dir, path string, txn *locking.Txn, err error) {
	// What is pending lands first: the change may name it (an unlink of
	// a file made in memory) or depend on it.
	if err := f.settle(ctx); err != nil {
		return "", "", nil, err
	}
	for attempt := 0; ; attempt++ {
		var ok bool
		dir, ok = parent.StorePath()
		if !ok {
			return "", "", nil, errnoErr(syscall.ENOENT, "directory inode %d was removed", parent.Ino())
		}
		path = store.Join(dir, name)
		if err := store.CheckPath(path); err != nil {
			return "", "", nil, err
		}
		reqs := append(f.co.Strategy.Entry(dir, path), locking.Change(parent.Ino(), dir))
		if sub != 0 {
			reqs = append(reqs, locking.Change(sub, path))
		}
		txn, err = f.co.Begin(ctx, reqs)
		if err != nil {
			return "", "", nil, err
		}
		if now, ok := parent.StorePath(); ok && now == dir {
			return dir, path, txn, nil
		}
		_ = txn.End(ctx)
		if attempt >= 20 {
			return "", "", nil, errnoErr(syscall.EAGAIN, "directory inode %d keeps moving", parent.Ino())
		}
	}
}

// clearGarbage removes the document at path if it is not part of the tree
// (an intent of an aborted or finished rename). The caller holds the
// exclusive lock of path.
func (f *Mount) clearGarbage(ctx context.Context, path string) (bool, error) {
	e, err := f.co.View.Get(ctx, path)
	if err != nil || e.Found {
		return false, err
	}
	if !e.Stored {
		return true, nil
	}
	if _, err := f.st.Write(ctx, store.DeleteDentry(path, e.Ver)); err != nil && !errors.Is(err, store.ErrConflict) {
		return false, err
	}
	return true, nil
}

// DamagedEntry is the error of the entry at path, whose path document is
// damaged as why says.
func (f *Mount) DamagedEntry(path string, why error) error {
	return f.st.DamagedPath(path, why)
}

// DirAlias is the error of the entry at path naming directory inode ino,
// which the kernel's tree has at above, a directory above the entry (or
// the entry's own directory). If above still names ino, the store holds
// a second name of one directory inside itself, which only damage makes:
// the entry is damaged. If not, the kernel's tree is behind a rename by
// another mount: ESTALE has the kernel look the path up again.
func (f *Mount) DirAlias(ctx context.Context, path string, ino uint64, above string) error {
	err := f.checkDirAt(ctx, ino, above, true)
	switch {
	case err == nil:
		return f.st.DamagedPath(path, fmt.Errorf("names directory inode %d, which is %q above it: %w", ino, above, store.ErrCorrupt))
	case errors.Is(err, syscall.ESTALE), errors.Is(err, syscall.ENOTDIR):
		return errnoErr(syscall.ESTALE, "%q names directory inode %d, which was at %q above it: %v", path, ino, above, err)
	}
	return err
}
