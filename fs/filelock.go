package fs

import (
	"context"
	"math"
	"syscall"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Advisory locks: the kernel's GETLK, SETLK and SETLKW, held across mounts
// by the core (vfs.Mount.SetLock, which says how).

// fileLockOf converts a kernel lock request.
func fileLockOf(owner uint64, lk *fuse.FileLock, flags uint32) (locking.FileLock, syscall.Errno) {
	if lk.Start > math.MaxInt64 || lk.End > math.MaxInt64 || lk.End < lk.Start {
		return locking.FileLock{}, syscall.EINVAL
	}
	out := locking.FileLock{Owner: owner, Start: int64(lk.Start), End: int64(lk.End), Pid: lk.Pid, Flock: flags&fuse.FUSE_LK_FLOCK != 0}
	switch lk.Typ {
	case syscall.F_RDLCK:
	case syscall.F_WRLCK:
		out.Write = true
	case syscall.F_UNLCK:
		out.Unlock = true
	default:
		return locking.FileLock{}, syscall.EINVAL
	}
	return out, 0
}

func (n *node) Getlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	req, errno := fileLockOf(owner, lk, flags)
	if errno != 0 {
		return errno
	}
	held, found, err := n.f.core.Lock(ctx, n.Ino(), req)
	if err != nil {
		return n.f.toErrno("getlk", err)
	}
	*out = *lk
	if !found {
		out.Typ = syscall.F_UNLCK
		return 0
	}
	out.Start, out.End = uint64(held.Start), uint64(held.End)
	out.Typ = syscall.F_RDLCK
	if held.Write {
		out.Typ = syscall.F_WRLCK
	}
	// The kernel reports the pid as one of this machine's, or 0 if it
	// names no process here.
	out.Pid = held.Pid
	return 0
}

func (n *node) Setlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, fh, owner, lk, flags, false)
}

func (n *node) Setlkw(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return n.setlk(ctx, fh, owner, lk, flags, true)
}

func (n *node) setlk(ctx context.Context, fh gofs.FileHandle, owner uint64, lk *fuse.FileLock, flags uint32, wait bool) syscall.Errno {
	req, errno := fileLockOf(owner, lk, flags)
	if errno != 0 {
		return errno
	}
	var h *vfs.Handle
	var owners *vfs.LockOwners
	switch fh := fh.(type) {
	case *handle:
		h, owners = fh.h, fh.h.Locks()
	case *dirHandle:
		if fh.l != nil {
			owners = fh.l.Locks()
		}
	}
	return n.f.toErrno("setlk", n.f.core.SetLock(ctx, n, n.f.kernelNode(n.EmbeddedInode()), h, owners, req, wait))
}
