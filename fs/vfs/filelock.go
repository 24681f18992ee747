package vfs

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/locking/lockorder"
)

// Advisory locks (flock(2), fcntl record and OFD locks) are held across
// mounts by locking.FileLocks. The kernel passes each with its lock owner:
// a process's file table for a POSIX record lock, the open file for a
// flock or an OFD lock. The kernel keeps none of them itself once the
// filesystem takes them (mount option EnableLocks), so it also does not
// unlock them at close: a FLUSH (any close(2) of any descriptor, a dup's,
// another open's, one closed by a thread or a CLONE_FILES child; the
// closing process waits for it) carries the closing process's owner,
// whose record locks on the file go then, through whichever description
// they were taken; and a RELEASE (the last close of an open file, which
// the kernel sends after that close returned) ends the flocks and OFD
// locks taken through it, before any lock request of the file the kernel
// sent after it is answered on this mount (fs/releaseorder.go).
//
// A release whose write to the store fails is not the closing process's
// error: close returns what the data's flush returns, as Linux's close
// never fails for the locks it drops, and the owner holds nothing from
// then on. The lock is free at once on this mount (its own entries are
// as it says, FileLocks.view), and on other mounts once the mender's
// retry lands, or, if this mount cannot reach the cluster, once its
// session is declared dead (lease plus grace).
//
// Locks order data as they do on NFS: an unlock first flushes what the
// owner's handle wrote, and a lock brings the open file up to the store
// (openFile.refresh: what this mount cached of the file's data goes, in
// the daemon and in the kernel, and buffered writes are rebased on what
// is stored), so the holder reads what the previous holder wrote on any
// mount, and its own buffered writes land on top of it.

// LockOwners are the owners that took locks through one open file.
type LockOwners struct {
	mu     lockorder.Mutex
	owners map[lockKey]bool
}

type lockKey struct {
	owner uint64
	flock bool
}

func (lo *LockOwners) add(k lockKey) {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if lo.owners == nil {
		lo.owners = map[lockKey]bool{}
	}
	lo.owners[k] = true
}

func (lo *LockOwners) take() []lockKey {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	out := make([]lockKey, 0, len(lo.owners))
	for k := range lo.owners {
		out = append(out, k)
	}
	lo.owners = nil
	return out
}

func (lo *LockOwners) any() bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	return len(lo.owners) > 0
}

// Lock answers F_GETLK on inode ino: the lock that would block req, if
// one does.
func (f *Mount) Lock(ctx context.Context, ino uint64, req locking.FileLock) (locking.FileLock, bool, error) {
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	return f.co.FileLocks.Get(ctx, ino, req)
}

// SetLock takes (or converts, or gives back) the advisory lock req on the
// inode of d (a file or a directory), waiting for it if wait. h is the
// file description it is taken through (nil for a directory's), owners
// the owners that took locks through the description.
//
// A waiting request waits until granted or interrupted (a signal):
// each request it makes meanwhile is bounded by --es-timeout. A lock
// whose grant's answer was lost is granted if the grant landed (the
// mount reads the document again, for up to a lease, also past an
// interruption), and fails with EIO (EINTR if interrupted) if that
// cannot be learnt, leaving nothing held; an unlock whose answer was
// lost returns 0 and is finished in the background. The kernel's node
// kn (if not nil) forgets the file's pages once a lock is granted.
func (f *Mount) SetLock(ctx context.Context, d Dir, kn KernelNode, h *Handle, owners *LockOwners, req locking.FileLock, wait bool) error {
	if req.Unlock && h != nil {
		fctx, cancel := f.ctxOf(ctx)
		err := h.flushData(fctx)
		cancel()
		if err != nil {
			f.log.Warn("flushing before an unlock failed; the lock is released all the same, and fsync or close report the error", "ino", d.Ino(), "err", err)
		}
	}
	path := ""
	if p, ok := d.StorePath(); ok {
		path = p
	}
	if !wait {
		var cancel context.CancelFunc
		ctx, cancel = f.ctxOf(ctx)
		defer cancel()
	}
	err := f.co.FileLocks.Set(ctx, d.Ino(), path, req, wait)
	switch {
	case errors.Is(err, locking.ErrWouldBlock):
		return syscall.EAGAIN
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	case errors.Is(err, locking.ErrLeaseLost):
		f.log.Warn("a file lock was refused: this mount's session is lost", "path", path, "err", err)
		return syscall.ENOLCK
	case err != nil:
		return err
	}
	if owners != nil && !req.Unlock {
		owners.add(lockKey{req.Owner, req.Flock})
	}
	if !req.Unlock && h != nil {
		f.refreshLocked(ctx, h, kn)
	}
	return nil
}

// refreshLocked brings the open file up to the store once a lock is granted
// through it (openFile.refresh): another mount's holder may have changed
// it. If the store cannot be read now, the lock is held all the same and
// the call succeeds: the file's next read, write, stat, seek or flush
// reads it first, and fails (EIO) while it cannot. Giving the lock back
// instead could not restore what the owner held before (the request may
// have converted or merged a lock it had), and its release could fail
// too.
func (f *Mount) refreshLocked(ctx context.Context, h *Handle, kn KernelNode) {
	of := h.of
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	of.mu.Lock()
	err := of.refresh(ctx)
	of.mu.Unlock()
	if err != nil {
		f.log.Warn("a file lock was granted, but the file could not be read again; its next use does it", "ino", of.ino, "err", err)
	}
	// Pages and attributes in the kernel, outside of.mu: the kernel may
	// make the invalidation wait for a read of the file, which waits for
	// of.mu.
	if kn != nil {
		_ = kn.NotifyContent(0, 0)
	}
}

// releaseOwnerLocks drops the record locks of owner, a process closing a
// descriptor of ino. A failure is logged, not returned: see the top of
// this file for what the process is told.
func (f *Mount) releaseOwnerLocks(ctx context.Context, ino, owner uint64) {
	if !f.co.FileLocks.Holds(ino, owner, false) {
		return
	}
	ctx, cancel := f.ctxOf(ctx)
	defer cancel()
	if err := f.co.FileLocks.ReleaseOwner(ctx, ino, owner, false); err != nil {
		f.log.Warn("releasing record locks at close: retried in the background until it lands", "ino", ino, "err", err)
	}
}

// ReleaseLocks drops the locks taken through an open file (or directory)
// description at its last close: its flocks and OFD locks (a process's
// record locks went at its close, with the FLUSH).
func (f *Mount) ReleaseLocks(ctx context.Context, ino uint64, lo *LockOwners) {
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
func (h *Handle) lockLost() bool {
	return h.locks.any() && h.of.f.co.FileLocks.Lost(h.of.ino)
}
