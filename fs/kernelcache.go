package fs

import (
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// What the kernel keeps of the answers it is given: how long (with
// delegations, never past the lease), and the old name of a directory
// another mount moved.

// notKept is the timeout of an answer the kernel must not keep. It is
// not 0, which go-fuse replaces with the mount's default timeout (an hour
// under delegations), and it is not what the kernel is told either: the
// kernel rounds any timeout up to a whole jiffy (1-4 ms), long enough for
// a stat right after another mount's change to be answered from before
// it. timedFS turns it into 0 once go-fuse is done with the answer
// (unkeptEntry, unkeptAttr); a READDIRPLUS entry, which go-fuse writes
// into its buffer itself, carries no attributes instead (dir.go).
const notKept = time.Nanosecond

// boundKept bounds the timeouts of out, an answer go-fuse has not given
// its defaults yet (0 stands for the mount's), by vfs.Mount.KeptAtMost.
func (f *FS) boundKept(out *fuse.EntryOut) {
	most, ok := f.core.KeptAtMost()
	if !ok {
		return
	}
	if most <= 0 {
		uncached(out)
		return
	}
	if t := out.EntryTimeout(); t != notKept && (t > most || t == 0 && f.opts.EntryTimeout > most) {
		out.SetEntryTimeout(most)
	}
	if t := out.AttrTimeout(); t != notKept && (t > most || t == 0 && f.opts.AttrTimeout > most) {
		out.SetAttrTimeout(most)
	}
}

// uncached makes the kernel keep an answer (positive or negative) no
// longer than it takes to use it.
func uncached(out *fuse.EntryOut) {
	out.SetEntryTimeout(notKept)
	out.SetAttrTimeout(notKept)
}

// unkeptEntry makes the timeouts of out that say notKept 0.
func unkeptEntry(out *fuse.EntryOut) {
	if out.EntryTimeout() == notKept {
		out.SetEntryTimeout(0)
	}
	if out.AttrTimeout() == notKept {
		out.SetAttrTimeout(0)
	}
}

// unkeptAttr is unkeptEntry of an attribute answer.
func unkeptAttr(out *fuse.AttrOut) {
	if out.Timeout() == notKept {
		out.SetTimeout(0)
	}
}

// OnForget: the kernel forgot this node.
func (n *node) OnForget() {
	n.f.dirNodes.CompareAndDelete(n.StableAttr().Ino, n.EmbeddedInode())
}

// dropOldName: the kernel may know directory known (the node go-fuse
// keeps for it; newChild's is a new one, which go-fuse drops for it) by
// another name, the one it had before another mount moved it. A
// directory has one dentry, which the kernel moves to the name being
// looked up; but not under a rename's lock, which a rename holds while it
// looks up its source and target: the lookup fails with ESTALE, and so
// does the rename, tried again (campaign seed 717600572). So the old name
// is dropped first. The kernel makes the invalidation wait for the old
// directory's lock: if a request of this mount holds it (the lookup's own
// directory, say), the reply does not wait long (wait), and the
// invalidation goes in after it. inTree: known is in go-fuse's tree;
// dropped: the invalidation went in within wait (the kernel's old name is
// unhashed, and gone unless something below it is in use).
func (n *node) dropOldName(known *gofs.Inode, name string, wait time.Duration) (inTree, dropped bool) {
	oldName, oldParent := known.Parent()
	if oldParent == nil {
		return false, true
	}
	if oldParent == n.EmbeddedInode() && oldName == name || n.f.core.Closed() {
		return true, true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = oldParent.NotifyEntry(oldName) // ENOENT: the kernel had dropped it
	}()
	select {
	case <-done:
		return true, true
	case <-time.After(wait):
		return true, false
	}
}

// oldNameWait is how long a lookup waits for a moved directory's old name
// to be dropped before it answers all the same.
const oldNameWait = 100 * time.Millisecond

// heldElsewhere reports whether directory ino, which a lookup found at
// name here, is one the kernel cannot be given here now: it knows it by
// another name in another directory (another mount moved it), something
// below that name is in use (an open file or directory of this mount: the
// kernel keeps a dentry in use, and the directory's with it, however it
// is invalidated), and the old name's invalidation waits for the old
// directory's lock, held by a process that no request of this mount in
// that directory is answering: a rename of this mount, which holds the
// locks of its two directories while it looks up its source and its
// target. The kernel would have to move the directory's dentry in use
// from one directory to the other under the rename's locks, which it
// cannot (ESTALE, and the same when the rename is tried again). Answered
// as absent (and not kept), the name of a rename's target is then
// settled by the rename itself, which finds the directory under its
// locks (ENOTEMPTY, or it replaces it as Linux does); a rename of it as
// the source fails with ENOENT instead of ESTALE. tried: the old name's
// invalidation was sent (the lookup need not send it again).
func (n *node) heldElsewhere(ino uint64) (held, tried bool) {
	v, ok := n.f.dirNodes.Load(ino)
	if !ok {
		return false, false
	}
	known := v.(*gofs.Inode)
	_, oldParent := known.Parent()
	if oldParent == nil || oldParent == n.EmbeddedInode() {
		return false, false // the kernel moves a dentry within its directory freely
	}
	if !n.f.inUseBelow(known) {
		return false, false
	}
	// Longer than a lookup waits otherwise: a lock a request of another
	// process holds goes in time, and a rename's never.
	_, dropped := n.dropOldName(known, "", time.Second)
	op, ok := oldParent.Operations().(*node)
	if dropped || !ok || op.requests.Load() > 0 {
		return false, true
	}
	return true, true
}

// inUseBelow reports whether this mount has directory dir, or something
// below it in go-fuse's tree, open (a bounded walk: a tree too big to
// walk counts as in use).
func (f *FS) inUseBelow(dir *gofs.Inode) bool {
	todo := []*gofs.Inode{dir}
	for seen := 0; len(todo) > 0; seen++ {
		if seen > 10000 {
			return true
		}
		in := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if nd, ok := in.Operations().(*node); ok && nd.opendirs.Load() > 0 {
			return true
		}
		if in.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
			for _, c := range in.Children() {
				todo = append(todo, c)
			}
		} else if _, ok := f.core.OpenAttr(in.StableAttr().Ino); ok {
			return true
		}
	}
	return false
}
