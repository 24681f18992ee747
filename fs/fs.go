// Package fs is the FUSE face of esfs: it turns kernel requests into calls
// of the mount's core (package vfs), and the core's answers and errors into
// replies (toErrno). It is the only package that imports go-fuse. What the
// kernel must forget when another mount's change makes it wrong, the core
// tells it through the kernel nodes (vfs.KernelNode) this adapter makes.
//
// Paths and inodes: the kernel addresses inodes, the store addresses paths.
// A node learns its path from go-fuse's tree (parent + name, updated by
// rename), and everything that does not need a path — attributes, data,
// xattrs — is addressed by inode number, which a rename never changes. So an
// open file keeps working whatever happens to its name, here or on another
// mount.
//
// The daemon must never access its own mount point (it would deadlock on
// itself); nothing here does.
package fs

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"syscall"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// FS is the kernel's side of one mount: the core, and what the kernel
// holds of it.
type FS struct {
	core *vfs.Mount
	opts vfs.Options
	log  *slog.Logger
	// dirNodes: the kernel node of each directory the kernel knows, by
	// inode (see node.dropOldName).
	dirNodes sync.Map
	// flushOwners: the lock owner of each FLUSH under way (flushOwner).
	flushOwners sync.Map
	// releases: the RELEASEs under way, which lock requests of their
	// node sent after them wait for (releaseorder.go).
	releases releaseOrder
	metrics  *requestMetrics
	about    []byte // the root's AboutXattr
	// expirer: how names are expired rather than dropped (expire.go);
	// nil where the kernel cannot. Set before the first request is
	// served, never changed.
	expirer *entryExpirer
}

// ctxOf is the context a kernel request runs under (vfs.Mount.CallContext),
// with the process that made it.
func (f *FS) ctxOf(ctx context.Context) (context.Context, context.CancelFunc) {
	return f.core.CallContext(withCaller(ctx))
}

// withCaller is ctx with the process that made the request, for the core.
func withCaller(ctx context.Context) context.Context {
	uid, gid := caller(ctx)
	return vfs.WithCaller(ctx, vfs.Caller{Uid: uid, Gid: gid})
}

// caller returns the uid and gid of the process making the request.
func caller(ctx context.Context) (uint32, uint32) {
	if c, ok := ctx.(*fuse.Context); ok {
		return c.Uid, c.Gid
	}
	if c, ok := fuse.FromContext(ctx); ok {
		return c.Uid, c.Gid
	}
	return 0, 0
}

// toErrno is the one place where errors become errno (Errno), and where
// the errors an operator must hear of are logged. Unknown errors are
// logged and become EIO.
func (f *FS) toErrno(op string, err error) syscall.Errno {
	if f.core.NoteDamaged(op, err) {
		return syscall.EIO
	}
	e, level, what := classify(err)
	if what != "" {
		f.log.Log(context.Background(), level, what, "op", op, "err", err)
	}
	return e
}

// Errno is the errno a kernel request is answered with for err, an error
// of the core (0 for nil).
func Errno(err error) syscall.Errno {
	e, _, _ := classify(err)
	return e
}

// classify maps err to its errno, and says what to log of it (what ""
// for nothing).
func classify(err error) (e syscall.Errno, level slog.Level, what string) {
	if err == nil {
		return 0, 0, ""
	}
	switch {
	case errors.As(err, &e):
		return e, 0, ""
	case errors.Is(err, store.ErrNotFound):
		return syscall.ENOENT, 0, ""
	case errors.Is(err, store.ErrExists):
		return syscall.EEXIST, 0, ""
	case errors.Is(err, locking.ErrLocked):
		return syscall.EAGAIN, slog.LevelWarn, "lock wait timed out"
	case errors.Is(err, locking.ErrLeaseLost), errors.Is(err, locking.ErrAborted):
		return syscall.EIO, slog.LevelError, "operation fenced: this mount lost its session"
	case errors.Is(err, store.ErrNameTooLong):
		return syscall.ENAMETOOLONG, 0, ""
	case errors.Is(err, store.ErrInvalid):
		return syscall.EINVAL, 0, ""
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, store.ErrUnavailable):
		return syscall.EIO, slog.LevelWarn, "store unavailable"
	case errors.Is(err, context.Canceled):
		return syscall.EINTR, 0, ""
	case errors.Is(err, store.ErrCorrupt):
		return syscall.EIO, slog.LevelError, "corrupt document"
	}
	return syscall.EIO, slog.LevelError, "operation failed"
}
