package vfs

import (
	"context"
	"sort"
	"strings"
	"syscall"

	"github.com/esfs/esfs/store"
)

// Extended attributes live in the inode document. Only the user namespace
// (and trusted, for root) is stored: security.* and system.* (ACLs) carry
// meaning esfs does not enforce, so they are refused rather than silently
// kept.
//
// Their size is bounded per inode: the inode document carries them, and
// it is read whole by every lookup and stat that misses the cache (a
// listing reads a page of them at once) and rewritten whole by every
// change of the file's attributes.
const (
	maxXattrName  = 255       // XATTR_NAME_MAX
	maxXattrValue = 64 << 10  // XATTR_SIZE_MAX
	maxXattrList  = 64 << 10  // XATTR_LIST_MAX: every name and its NUL, as listxattr returns them
	maxXattrTotal = 128 << 10 // names and values, per inode
)

func xattrAllowed(ctx context.Context, name string) syscall.Errno {
	if len(name) > maxXattrName || name == "" {
		return syscall.ERANGE
	}
	switch {
	case strings.HasPrefix(name, "user."):
		return 0
	case strings.HasPrefix(name, "trusted."):
		if uid, _ := caller(ctx); uid == 0 {
			return 0
		}
		return syscall.EPERM
	}
	return syscall.EOPNOTSUPP
}

func (f *Mount) Getxattr(ctx context.Context, n Node, attr string, dest []byte) (uint32, error) {
	if strings.HasPrefix(attr, "security.") || strings.HasPrefix(attr, "system.") {
		return 0, syscall.ENODATA // asked on every write by the kernel; cheap answer
	}
	if e := xattrAllowed(ctx, attr); e != 0 {
		return 0, e
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	a, err := f.Attrs(ctx, n)
	if err != nil {
		return 0, err
	}
	v, ok := a.Xattrs[attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), nil
}

func (f *Mount) Setxattr(ctx context.Context, n Node, attr string, data []byte, flags uint32) error {
	if f.opts.ReadOnly {
		return syscall.EROFS
	}
	if e := xattrAllowed(ctx, attr); e != 0 {
		return e
	}
	if len(data) > maxXattrValue {
		return syscall.E2BIG
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	t := now()
	a, err := f.updateInode(ctx, n.Ino(), func(a *store.Inode) error {
		_, exists := a.Xattrs[attr]
		if flags&0x1 != 0 && exists { // XATTR_CREATE
			return syscall.EEXIST
		}
		if flags&0x2 != 0 && !exists { // XATTR_REPLACE
			return syscall.ENODATA
		}
		total, list := len(attr)+len(data), len(attr)+1
		for k, v := range a.Xattrs {
			if k != attr {
				total += len(k) + len(v)
				list += len(k) + 1
			}
		}
		if total > maxXattrTotal || list > maxXattrList {
			return syscall.ENOSPC // as a local filesystem whose xattr space is full
		}
		if a.Xattrs == nil {
			a.Xattrs = map[string][]byte{}
		}
		a.Xattrs[attr] = append([]byte{}, data...)
		a.Ctime = t
		return nil
	})
	if err == nil {
		f.noteInode(a)
	}
	return err
}

func (f *Mount) Removexattr(ctx context.Context, n Node, attr string) error {
	if f.opts.ReadOnly {
		return syscall.EROFS
	}
	if e := xattrAllowed(ctx, attr); e != 0 {
		if e == syscall.EOPNOTSUPP {
			return syscall.ENODATA
		}
		return e
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	t := now()
	_, err := f.updateInode(ctx, n.Ino(), func(a *store.Inode) error {
		if _, ok := a.Xattrs[attr]; !ok {
			return syscall.ENODATA
		}
		delete(a.Xattrs, attr)
		a.Ctime = t
		return nil
	})
	return err
}

func (f *Mount) Listxattr(ctx context.Context, n Node, dest []byte) (uint32, error) {
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	a, err := f.Attrs(ctx, n)
	if err != nil {
		return 0, err
	}
	// Only what Getxattr serves the caller: trusted.* to root; never
	// security.* or system.*, which only esfs import --all-xattrs stores
	// (for export to restore), nor a name past the limit.
	names := make([]string, 0, len(a.Xattrs))
	for k := range a.Xattrs {
		if xattrAllowed(ctx, k) != 0 {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	size := 0
	for _, k := range names {
		size += len(k) + 1
	}
	if len(dest) < size {
		return uint32(size), syscall.ERANGE
	}
	off := 0
	for _, k := range names {
		off += copy(dest[off:], k)
		dest[off] = 0
		off++
	}
	return uint32(size), nil
}
