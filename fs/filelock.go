package fs

import (
	"context"
	"errors"
	"math"
	"sync"
	"syscall"

	"github.com/esfs/esfs/locking"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Advisory locks (flock(2), fcntl record and OFD locks) are held across
// mounts by locking.FileLocks. The kernel passes each with its lock owner:
// a process's file table for a POSIX record lock, the open file for a
// flock or an OFD lock. The kernel keeps none of them itself once the
// filesystem takes them (mount option EnableLocks), so it also does not
// unlock them at close: a FLUSH (any close) carries the closing process's
// owner, whose record locks on the file go then, and a RELEASE (the last
// close of an open file) ends the flocks and OFD locks taken through it.
//
// Locks order data as they do on NFS: an unlock first flushes what the
// owner's handle wrote, and a lock brings the open file up to the store
// (openFile.refresh: what this mount cached of the file's data goes, in
// the daemon and in the kernel, and buffered writes are rebased on what
// is stored), so the holder reads what the previous holder wrote on any
// mount, and its own buffered writes land on top of it.

// lockOwners are the owners that took locks through one open file.
type lockOwners struct {
	mu     sync.Mutex
	owners map[lockKey]bool
}

type lockKey struct {
	owner uint64
	flock bool
}

func (lo *lockOwners) add(k lockKey) {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if lo.owners == nil {
		lo.owners = map[lockKey]bool{}
	}
	lo.owners[k] = true
}

func (lo *lockOwners) take() []lockKey {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	out := make([]lockKey, 0, len(lo.owners))
	for k := range lo.owners {
		out = append(out, k)
	}
	lo.owners = nil
	return out
}

func (lo *lockOwners) any() bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	return len(lo.owners) > 0
}

// lockOwnersOf returns the owners record of open file fh (a file's or a
// directory's handle), nil for another kind.
func lockOwnersOf(fh gofs.FileHandle) *lockOwners {
	switch h := fh.(type) {
	case *handle:
		return &h.locks
	case *dirHandle:
		return &h.locks
	}
	return nil
}

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
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	held, found, err := n.f.co.FileLocks.Get(ctx, n.ino(), req)
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
	h, _ := fh.(*handle)
	if req.Unlock && h != nil {
		// What the owner wrote lands before another mount's holder reads.
		// An unlock never fails for it (Linux's does not): a flush that
		// failed dropped the bytes it could not land and tells every
		// descriptor so at its next fsync or close (errseq.go). Keeping
		// the lock instead held it for as long as the file stayed open,
		// every other mount's request refused (campaign seed 215993735).
		ctx, cancel := n.f.ctxOf(ctx)
		err := h.flushData(ctx)
		cancel()
		if err != nil {
			n.f.log.Warn("flushing before an unlock failed; the lock is released all the same, and fsync or close report the error", "ino", n.ino(), "err", err)
		}
	}
	path := ""
	if p, ok := n.path(); ok {
		path = p
	}
	if !wait {
		var cancel context.CancelFunc
		ctx, cancel = n.f.ctxOf(ctx)
		defer cancel()
	}
	// A waiting request waits until granted or interrupted (a signal):
	// each request it makes meanwhile is bounded by --es-timeout. A lock
	// whose grant's answer was lost is granted if the grant landed (the
	// mount reads the document again, for up to a lease, also past an
	// interruption), and fails with EIO (EINTR if interrupted) if that
	// cannot be learnt, leaving nothing held; an unlock whose answer was
	// lost returns 0 and is finished in the background.
	err := n.f.co.FileLocks.Set(ctx, n.ino(), path, req, wait)
	switch {
	case errors.Is(err, locking.ErrWouldBlock):
		return syscall.EAGAIN
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, locking.ErrLeaseLost):
		n.f.log.Warn("a file lock was refused: this mount's session is lost", "path", path, "err", err)
		return syscall.ENOLCK
	case err != nil:
		return n.f.toErrno("setlk", err)
	}
	if lo := lockOwnersOf(fh); lo != nil && !req.Unlock {
		lo.add(lockKey{owner, req.Flock})
	}
	if !req.Unlock && h != nil {
		n.refresh(ctx, h)
	}
	return 0
}

// refresh brings the open file up to the store once a lock is granted
// through it (openFile.refresh): another mount's holder may have changed
// it. If the store cannot be read now, the lock is held all the same and
// the call succeeds: the file's next read, write, stat, seek or flush
// reads it first, and fails (EIO) while it cannot. Giving the lock back
// instead could not restore what the owner held before (the request may
// have converted or merged a lock it had), and its release could fail
// too.
func (n *node) refresh(ctx context.Context, h *handle) {
	of := h.of
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	err := of.refresh(ctx)
	of.mu.Unlock()
	if err != nil {
		n.f.log.Warn("a file lock was granted, but the file could not be read again; its next use does it", "ino", of.ino, "err", err)
	}
	// Pages and attributes in the kernel, outside of.mu: the kernel may
	// make the invalidation wait for a read of the file, which waits for
	// of.mu.
	_ = n.NotifyContent(0, 0)
}

// flushData writes what this handle's file has buffered (chunks and size).
func (h *handle) flushData(ctx context.Context) error {
	of := h.of
	of.mu.Lock()
	defer of.mu.Unlock()
	return of.flush(ctx)
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

// releaseOwnerLocks drops the record locks of the process closing a
// descriptor of ino (ctx is its FLUSH).
func (f *FS) releaseOwnerLocks(ctx context.Context, ino uint64) {
	owner, ok := f.flushOwner(ctx)
	if !ok || !f.co.FileLocks.Holds(ino, owner, false) {
		return
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	if err := f.co.FileLocks.ReleaseOwner(ctx, ino, owner, false); err != nil {
		f.log.Warn("releasing record locks at close: retried in the background until it lands", "ino", ino, "err", err)
	}
}

// releaseHandleLocks drops the locks taken through an open file at its
// last close: its flocks and OFD locks (a process's record locks went at
// its close, with the FLUSH).
func (f *FS) releaseHandleLocks(ctx context.Context, ino uint64, lo *lockOwners) {
	for _, k := range lo.take() {
		if err := f.co.FileLocks.ReleaseOwner(ctx, ino, k.owner, k.flock); err != nil {
			f.log.Warn("releasing file locks at the last close: retried in the background until it lands", "ino", ino, "err", err)
		}
	}
}

// lockLost reports whether this handle's owners took locks on the file
// that this mount has lost since (its session was declared dead): then
// the program must not go on as if it held them, and gets EIO, as from
// the kernel's NFS client.
func (h *handle) lockLost() bool {
	return h.locks.any() && h.of.f.co.FileLocks.Lost(h.of.ino)
}
