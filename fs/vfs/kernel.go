package vfs

import (
	"context"
	"syscall"
	"time"
)

// KernelNode is what the kernel holds of one inode, as the mount's state
// sees it: what it must make the kernel forget when another mount's
// change makes it wrong, a name under a directory (NotifyEntry) or the
// attributes and pages of a file (NotifyContent with offset -1). The
// adapter's nodes (go-fuse's *Inode, with what go-fuse cannot send) are
// KernelNodes; the state keeps them as this, never as go-fuse's type.
type KernelNode interface {
	NotifyEntry(name string) syscall.Errno
	NotifyContent(off, size int64) syscall.Errno
	// ExpireEntry makes the kernel ask again about name before it next
	// uses it, but keep it meanwhile: a directory that is some process's
	// working directory stays one getcwd can name, where NotifyEntry
	// would unhash it (ENOENT). A kernel without FUSE_EXPIRE_ONLY (before
	// Linux 6.2) drops the name instead.
	ExpireEntry(name string) syscall.Errno
}

// KeptAtMost bounds how long the kernel may keep an answer given under a
// delegation (ok false: no bound, delegations are off and the timeouts
// are the configured ones): no longer than this mount's lease runs
// without a renewal. A mount frozen or cut off past its lease is declared
// dead, and others then change what it had delegated without recalling
// it: nothing invalidates what its kernel was told, which must have
// expired by then (others wait a lease plus grace), and the daemon no
// longer answers from the delegation either (Delegation.Revoked). The
// kernel asks again once a lease (10 s by default), answered from memory.
func (f *Mount) KeptAtMost() (time.Duration, bool) {
	if f.delegs == nil {
		return 0, false
	}
	return f.co.Session().LeaseLeft(), true
}

// Delegations reports whether the mount holds delegations: then what the
// kernel may keep is decided answer by answer (TellEntry, TellAttrs), and
// an answer none covers must not be kept.
func (f *Mount) Delegations() bool { return f.delegs != nil }

// TellEntry is told that the kernel's node kn of directory dir is being
// given an answer about name (found or not): kept says whether the kernel
// may keep it (a delegation on dir covers it, whose recall makes kn forget
// it), and done is to be called once the reply is made (a recall waits
// for the answers under way). If the delegation was revoked meanwhile,
// the answer may be overtaken by the change that recalled it: not kept.
func (f *Mount) TellEntry(dir uint64, name string, kn KernelNode) (kept bool, done func()) {
	st := f.delegs.state(dir)
	if st == nil || !st.told(name, kn) {
		return false, noDone
	}
	return true, st.done
}

// TellMoved is told what the kernel holds, once the reply to a rename
// of this mount's is made, of what it moved from directory from to name
// in directory to (kn: to's node): the kernel moves its entry of the
// source there, and keeps it, and the moved inode's attributes (moved:
// its node), as long as it was told to keep them at the source, under the
// source directory's delegation perhaps. That delegation no longer covers
// them: a change made in to recalls to's, and a change of a file's
// attributes the directories its stored inode names, to now. So the
// entry is told under to's delegation if one covers it (as TellEntry
// tells it: done is to be called once the reply is made), and where none
// does the kernel is made to ask about name again; a file's attributes
// moved across directories are withdrawn (a directory's own are its own
// delegation's, wherever it is), before the reply. A name's notification
// waits in the kernel for the directory's lock, which the rename holds
// until it has moved the entry: it is sent in the background and goes in
// as the rename releases the lock (the entry is true until another mount
// changes the name, which takes that mount a round trip at least).
func (f *Mount) TellMoved(from, to uint64, name string, kn, moved KernelNode, movedDir bool) (done func()) {
	if f.delegs == nil || kn == nil || f.closed.Load() {
		return noDone // the kernel keeps answers for the configured timeouts
	}
	if from != to && !movedDir && moved != nil {
		f.forgetKernelAttrs(moved)
	}
	if kept, done := f.TellEntry(to, name, kn); kept {
		return done
	}
	go func() { _ = kn.ExpireEntry(name) }() // ENOENT: the kernel had dropped it
	return noDone
}

// forgetKernelAttrs makes the kernel forget the attributes of nodes, as a
// recall does: never waiting for it long (the kernel takes no lock of
// ours for these).
func (f *Mount) forgetKernelAttrs(nodes ...KernelNode) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, n := range nodes {
			_ = n.NotifyContent(-1, 0) // ENOENT: the kernel had forgotten the inode
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
		f.log.Warn("the kernel did not take attribute invalidations within 1s", "files", len(nodes))
	}
}

// TellAttrs is told that kn, the kernel's node of inode ino (entry name
// of directory dir), is being given its attributes: kept says whether the
// kernel may keep them, which it may if a delegation holds them (a
// directory's own, a file's its directory's), whose recall makes kn
// forget them, or if delegations are off.
func (f *Mount) TellAttrs(dir uint64, name string, ino uint64, isDir bool, kn KernelNode) (kept bool) {
	if f.delegs == nil {
		return true
	}
	if isDir {
		_, kept = f.ownAttr(ino, kn)
	} else {
		_, kept = f.delegs.attr(dir, name, ino, kn)
	}
	return kept
}

// Closed reports whether the daemon stopped serving the mount (Close).
func (f *Mount) Closed() bool { return f.closed.Load() }

// Close ends the service of a detached mount that is still in use: from
// now on writes fail with EIO, and what was written before is made
// durable.
func (f *Mount) Close(ctx context.Context) error {
	f.closed.Store(true)
	err := f.FlushAll(ctx)
	if err == nil {
		f.wb.close() // the last batch has landed
	}
	return err
}
