package fs

// FLUSH and FSYNC: what close(2), fsync(2) and fdatasync(2) are told;
// see flush.go.

import (
	"context"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	of := h.of
	if h.lockLost() {
		return syscall.EIO
	}
	// A close: the closing process's record locks on the file go, after
	// what it wrote has landed.
	defer of.f.releaseOwnerLocks(ctx, of.ino)
	ctx, cancel := of.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	err := of.flush(ctx)
	of.mu.Unlock()
	// What this description has not reported yet (errseq.go); a failure
	// of this flush was recorded first, and is reported once.
	if rerr := of.f.errs.check(of.ino, &h.since, false); err == nil {
		err = rerr
	}
	return of.f.toErrno("flush", err)
}

// Fsync makes the file durable, and with it everything this mount made in
// memory (see writeback.go): the file's name may be pending.
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if errno := h.Flush(ctx); errno != 0 {
		return errno
	}
	ctx, cancel := h.of.f.ctxOf(ctx)
	defer cancel()
	return h.of.f.toErrno("fsync", h.of.f.sync(ctx, h.of.ino, &h.since))
}

func (n *node) Fsync(ctx context.Context, fh gofs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := fh.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	// Directories and handle-less nodes: every change is durable once
	// what is pending in memory is.
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	s := n.f.errs.sample(n.ino())
	since := &s
	if d, ok := fh.(*dirHandle); ok {
		since = &d.wbSince
	}
	return n.f.toErrno("fsync", n.f.sync(ctx, n.ino(), since))
}
