package fs

import (
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
// directory, say), the reply does not wait long, and the invalidation
// goes in after it. inTree: known is in go-fuse's tree.
func (n *node) dropOldName(known *gofs.Inode, name string) (inTree bool) {
	oldName, oldParent := known.Parent()
	if oldParent == nil {
		return false
	}
	if oldParent == n.EmbeddedInode() && oldName == name || n.f.core.Closed() {
		return true
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = oldParent.NotifyEntry(oldName) // ENOENT: the kernel had dropped it
	}()
	select {
	case <-done:
	case <-time.After(100 * time.Millisecond):
	}
	return true
}
