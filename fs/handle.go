package fs

// Open file descriptions: the kernel's OPEN, READ, WRITE, FLUSH, FSYNC and
// RELEASE of a file, answered by the core's description (vfs.Handle).

import (
	"context"
	"syscall"

	"github.com/esfs/esfs/fs/vfs"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// handle is one open file description.
type handle struct {
	h *vfs.Handle
	f *FS
}

var (
	_ = (gofs.FileReader)((*handle)(nil))
	_ = (gofs.FileWriter)((*handle)(nil))
	_ = (gofs.FileFlusher)((*handle)(nil))
	_ = (gofs.FileFsyncer)((*handle)(nil))
	_ = (gofs.FileReleaser)((*handle)(nil))
	_ = (gofs.FileLseeker)((*handle)(nil))
)

func (n *node) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	h, err := n.f.core.Open(ctx, n.Ino(), flags)
	if err != nil {
		return nil, 0, n.f.toErrno("open", err)
	}
	var fl uint32
	if h.KeepPages() {
		fl |= fuse.FOPEN_KEEP_CACHE
	}
	return &handle{h: h, f: n.f}, fl, 0
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, err := h.h.Read(ctx, dest, off)
	if err != nil {
		return nil, h.f.toErrno("read", err)
	}
	return fuse.ReadResultData(b), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	ctx, cancel := h.f.ctxOf(ctx)
	defer cancel()
	n, err := h.h.Write(ctx, data, off)
	return n, h.f.toErrno("write", err)
}

// Flush is a close(2): the closing process's record locks on the file go
// once what it wrote has landed.
func (h *handle) Flush(ctx context.Context) syscall.Errno {
	owner, ok := h.f.flushOwner(ctx)
	return h.f.toErrno("flush", h.h.Flush(ctx, owner, ok))
}

// Fsync makes the file durable, and with it everything this mount made in
// memory: the file's name may be pending.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.f.toErrno("fsync", h.h.Fsync(ctx))
}

// Release is the description's last close: its flocks and OFD locks go
// first, and lock requests the kernel sent after this release, which
// waited for that (releaseorder.go), go on while the rest flushes.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.h.ReleaseLocks()
	h.f.releases.locksGone(ctx)
	return h.f.toErrno("release", h.h.Release())
}

func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	var since *vfs.ErrSince
	if d, ok := fh.(*dirHandle); ok && d.l != nil {
		since = d.l.Reported()
	}
	return n.f.toErrno("fsync", n.f.core.SyncInode(ctx, n.Ino(), since))
}

// flushOwner returns the lock owner of the FLUSH being served under ctx
// (timedFS records it by the request's cancel channel, the one thing of
// the request go-fuse hands on).
func (f *FS) flushOwner(ctx context.Context) (uint64, bool) {
	fc, ok := ctx.(*fuse.Context)
	if !ok {
		return 0, false
	}
	v, ok := f.flushOwners.Load(fc.Cancel)
	if !ok {
		return 0, false
	}
	return v.(uint64), true
}

// Lseek answers SEEK_DATA and SEEK_HOLE (vfs.Handle.Lseek); the kernel
// answers the others.
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	pos, err := h.h.Lseek(ctx, off, whence)
	return pos, h.f.toErrno("lseek", err)
}

var _ = (gofs.NodeCopyFileRanger)((*node)(nil))

// CopyFileRange copies between two open files of this mount
// (vfs.Mount.CopyRange); EOPNOTSUPP leaves the rest to the kernel, which
// then reads and writes.
func (n *node) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode,
	fhOut gofs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	in, ok1 := fhIn.(*handle)
	dst, ok2 := fhOut.(*handle)
	if !ok1 || !ok2 || flags != 0 {
		return 0, syscall.EOPNOTSUPP
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	written, err := n.f.core.CopyRange(ctx, in.h, offIn, dst.h, offOut, length)
	return written, n.f.toErrno("copy_file_range", err)
}
