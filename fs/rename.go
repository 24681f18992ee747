package fs

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// renameat2 flags.
const (
	renameNoReplace = 0x1
	renameExchange  = 0x2
)

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.f.opts.ReadOnly {
		return syscall.EROFS
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	if flags&renameExchange != 0 || flags&^(renameNoReplace|renameExchange) != 0 {
		return syscall.EINVAL
	}
	err := n.f.rename(ctx, n, name, np, newName, flags&renameNoReplace != 0)
	return n.f.toErrno("rename", err)
}

// rename moves a path, and for a directory its whole subtree, to a new path.
// File data and attributes are keyed by inode and never move; only path
// documents are rewritten. New documents are written before old ones are
// deleted, so a crash in between can leave a duplicate but never lose a path.
func (f *FS) rename(ctx context.Context, from *node, name string, to *node, newName string, noReplace bool) error {
	if err := store.CheckName(name); err != nil {
		return err
	}
	if err := store.CheckName(newName); err != nil {
		return err
	}
	srcDir, err := from.dirPath(ctx, true)
	if err != nil {
		return err
	}
	dstDir := srcDir
	if to != from {
		if dstDir, err = to.dirPath(ctx, true); err != nil {
			return err
		}
	}
	src, dst := store.Join(srcDir, name), store.Join(dstDir, newName)
	if err := store.CheckPath(dst); err != nil {
		return err
	}
	if src == dst {
		_, err := f.resolveFresh(ctx, src)
		return err
	}
	if store.IsWithin(dst, src) {
		return errnoErr(syscall.EINVAL, "cannot move %q into itself", src)
	}
	s, err := f.resolveFresh(ctx, src)
	if err != nil {
		return err
	}
	d, err := f.resolveFresh(ctx, dst)
	dstExists := err == nil
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if dstExists {
		if noReplace {
			return syscall.EEXIST
		}
		if d.Ino == s.Ino {
			return nil // two links to one inode: POSIX says do nothing
		}
		switch {
		case s.Type == store.TypeDir && d.Type != store.TypeDir:
			return syscall.ENOTDIR
		case s.Type != store.TypeDir && d.Type == store.TypeDir:
			return syscall.EISDIR
		case d.Type == store.TypeDir:
			empty, err := f.isEmptyDir(ctx, dst)
			if err != nil {
				return err
			}
			if !empty {
				return syscall.ENOTEMPTY
			}
		}
	}
	if s.Type == store.TypeDir {
		// Every cached path below src is wrong now, and the cache cannot
		// enumerate them.
		defer f.cache.InvalidateAllPaths()
	}
	f.cache.InvalidatePath(src)
	f.cache.InvalidatePath(dst)
	f.noteWrite()

	// The top of the rename: create dst, or replace it atomically by
	// overwriting its document with compare-and-set.
	top := store.Dentry{Path: dst, Ino: s.Ino, Type: s.Type}
	if dstExists {
		if _, err := f.st.PutDentry(ctx, top, d.Ver); err != nil {
			return conflictIsRace(err, dst)
		}
	} else if _, err := f.st.CreateDentry(ctx, top); err != nil {
		if errors.Is(err, store.ErrExists) {
			return fmt.Errorf("%q appeared meanwhile: %w", dst, syscall.EEXIST)
		}
		return err
	}
	if s.Type == store.TypeDir {
		if err := f.moveChildren(ctx, src, dst); err != nil {
			return err
		}
	}
	if _, err := f.st.DeleteDentry(ctx, src, s.Ver); err != nil {
		return conflictIsRace(err, src)
	}
	t := now()
	f.touchDir(from.ino(), t)
	if to != from {
		f.touchDir(to.ino(), t)
	}
	if _, err := f.updateInode(ctx, s.Ino, func(a *store.Inode) error { a.Ctime = t; return nil }); err != nil {
		f.log.Warn("could not update ctime after rename", "ino", s.Ino, "err", err)
	}
	if dstExists {
		return f.dropLink(ctx, d.Ino)
	}
	return nil
}

func conflictIsRace(err error, path string) error {
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%q changed during the rename: %w", path, syscall.EAGAIN)
	}
	return err
}

// moveChildren rewrites every path below src to the same path below dst:
// all creates first, then all deletes, each phase in parallel bulks.
func (f *FS) moveChildren(ctx context.Context, src, dst string) error {
	if err := f.st.Refresh(ctx); err != nil {
		return err
	}
	sc := f.st.ScanTree(src, store.DefaultPageSize)
	defer sc.Close()
	type old struct {
		path string
		ver  store.Version
	}
	var olds []old
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			return fmt.Errorf("cannot move a subtree with a corrupt document: %w", bad[0])
		}
		if page == nil {
			break
		}
		ops := make([]store.BulkOp, 0, len(page))
		for _, d := range page {
			if d.Path == src || !f.visible(d) {
				continue
			}
			nd := store.Dentry{Path: dst + d.Path[len(src):], Ino: d.Ino, Type: d.Type}
			if err := store.CheckPath(nd.Path); err != nil {
				return err
			}
			op, err := f.st.OpCreateDentry(nd)
			if err != nil {
				return err
			}
			ops = append(ops, op)
			olds = append(olds, old{d.Path, d.Ver})
		}
		res, err := f.st.Bulk(ctx, ops)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
	}
	ops := make([]store.BulkOp, 0, len(olds))
	for _, o := range olds {
		op, err := f.st.OpDeleteDentry(o.path, o.ver)
		if err != nil {
			return err
		}
		ops = append(ops, op)
	}
	res, err := f.st.Bulk(ctx, ops)
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Err != nil {
			return r.Err
		}
	}
	return nil
}
