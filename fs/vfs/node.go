package vfs

import (
	"context"

	"github.com/esfs/esfs/store"
)

// Node is an inode the kernel holds, as the adapter knows it: its number
// and path, whether it is a directory, and its name in the directory the
// kernel found it in.
type Node interface {
	Dir
	IsDir() bool
	// InDir is the node's name and directory in the kernel's tree; ok is
	// false for the mount's root and for a node no longer in the tree.
	InDir() (name string, dir uint64, ok bool)
}

// Attrs returns n's attributes for an answer to the kernel: from the
// delegation that holds them; with delegations, else read in real time
// (the daemon's cache may be older than a change no recall told us of);
// without, from the cache or the store.
func (f *Mount) Attrs(ctx context.Context, n Node) (store.Inode, error) {
	if f.delegs == nil {
		return f.inode(ctx, n.Ino(), f.cache.Gen())
	}
	if a, ok := f.heldAttrs(n, nil); ok {
		return a, nil
	}
	return f.freshInode(ctx, n.Ino())
}

// heldAttrs returns n's attributes if a delegation holds them (a
// directory's own, a file's its directory's); kn (if not nil) is the
// kernel's node being told them, to be invalidated on recall.
func (f *Mount) heldAttrs(n Node, kn KernelNode) (store.Inode, bool) {
	if n.IsDir() {
		return f.ownAttr(n.Ino(), kn)
	}
	if name, dir, ok := n.InDir(); ok {
		return f.delegs.attr(dir, name, n.Ino(), kn)
	}
	return store.Inode{}, false
}
