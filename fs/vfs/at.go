package vfs

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/store"
)

// CreateAt is open(2) with O_CREAT of name in directory d: it makes a
// file as e asks, and opens it with flags. A name another process made
// since the kernel looked is opened instead, unless flags say O_EXCL
// (EEXIST), and truncated if they say O_TRUNC; a directory there is
// EISDIR, anything else not a file EEXIST (the kernel opens those itself).
func (f *Mount) CreateAt(ctx context.Context, d Dir, name string, e Entry, flags uint32) (store.Node, *Handle, error) {
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	sn, err := f.MakeAt(ctx, d, name, e)
	created := err == nil
	if errors.Is(err, store.ErrExists) && flags&syscall.O_EXCL == 0 {
		// Another process created it since the kernel's lookup: open that one.
		dir, derr := f.dirPath(ctx, d, false)
		if derr != nil {
			return store.Node{}, nil, derr
		}
		sn, err = f.resolveFresh(ctx, store.Join(dir, name))
		if err == nil && sn.Type == store.TypeDir {
			return store.Node{}, nil, syscall.EISDIR
		}
		if err == nil && sn.Type != store.TypeFile {
			// A symlink or a special file, made since the kernel looked:
			// the kernel opens those itself, and would take a handle
			// from us for an EIO.
			return store.Node{}, nil, syscall.EEXIST
		}
		if err == nil && f.opts.ReadOnly && (flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0) {
			// The existing file, open for writing on a read-only
			// filesystem: as Open.
			return store.Node{}, nil, syscall.EROFS
		}
		if err == nil && flags&syscall.O_TRUNC != 0 {
			err = f.truncate(ctx, sn.Ino, 0, nil)
		}
	}
	if err != nil {
		return store.Node{}, nil, err
	}
	h, err := f.openHandle(ctx, sn.Attr, flags, created)
	if err != nil {
		return store.Node{}, nil, err
	}
	return sn, h, nil
}

// Readlink returns the target of symlink n (EINVAL if n is no symlink).
func (f *Mount) Readlink(ctx context.Context, n Node) (string, error) {
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	a, err := f.Attrs(ctx, n)
	if err != nil {
		return "", err
	}
	if a.Type != store.TypeSymlink {
		return "", syscall.EINVAL
	}
	return a.Target, nil
}
