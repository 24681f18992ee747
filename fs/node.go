package fs

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is one inode known to the kernel. It holds no attributes: those live
// in the store and the cache, keyed by its inode number; but for a
// directory it keeps the last ones the kernel was told, which are its
// attributes once it is removed while the kernel still holds it (see
// removedAttr).
type node struct {
	gofs.Inode
	f *FS
	// told: a directory's attributes as last told to the kernel (nil for
	// the mount's root, whose removal is ESTALE).
	told atomic.Pointer[store.Inode]
	// removed: a directory removed while the kernel holds it (rmdir or a
	// rename over it through this mount, or its inode found gone).
	removed atomic.Bool
	// requests: a directory's requests under way that name something in
	// it or list it (the kernel holds its lock for them), and opendirs
	// its open descriptors (see heldElsewhere).
	requests, opendirs atomic.Int32
}

// inRequest counts a request in directory n until the result is called.
func (n *node) inRequest() func() {
	n.requests.Add(1)
	return func() { n.requests.Add(-1) }
}

var (
	_ = (gofs.NodeLookuper)((*node)(nil))
	_ = (gofs.NodeOnForgetter)((*node)(nil))
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeSetattrer)((*node)(nil))
	_ = (gofs.NodeMkdirer)((*node)(nil))
	_ = (gofs.NodeCreater)((*node)(nil))
	_ = (gofs.NodeSymlinker)((*node)(nil))
	_ = (gofs.NodeMknoder)((*node)(nil))
	_ = (gofs.NodeReadlinker)((*node)(nil))
	_ = (gofs.NodeLinker)((*node)(nil))
	_ = (gofs.NodeUnlinker)((*node)(nil))
	_ = (gofs.NodeRmdirer)((*node)(nil))
	_ = (gofs.NodeRenamer)((*node)(nil))
	_ = (gofs.NodeOpener)((*node)(nil))
	_ = (gofs.NodeOpendirHandler)((*node)(nil))
	_ = (gofs.NodeStatfser)((*node)(nil))
	_ = (gofs.NodeGetxattrer)((*node)(nil))
	_ = (gofs.NodeSetxattrer)((*node)(nil))
	_ = (gofs.NodeListxattrer)((*node)(nil))
	_ = (gofs.NodeRemovexattrer)((*node)(nil))
	_ = (gofs.NodeFsyncer)((*node)(nil))
)

func (n *node) Ino() uint64 { return n.StableAttr().Ino }

// IsDir reports whether the node is a directory's.
func (n *node) IsDir() bool { return n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR }

// InDir returns the node's name and directory in go-fuse's tree.
func (n *node) InDir() (string, uint64, bool) {
	name, parent := n.Parent()
	if parent == nil {
		return "", 0, false
	}
	return name, parent.StableAttr().Ino, true
}

// maxDepth bounds every walk up go-fuse's tree: a path of MaxPath bytes
// has at most MaxPath/2 components. A longer walk can only go round a
// cycle, which newChild never makes, but a walk must end whatever the tree.
const maxDepth = store.MaxPath/2 + 1

// StorePath returns the node's path in the store, from go-fuse's tree
// below the mount's root (Options.Root). ok is false when the node is no
// longer in the tree (unlinked or forgotten), or its path is longer than
// any path can be.
func (n *node) StorePath() (string, bool) {
	var names []string
	size := 0
	var p *gofs.Inode = n.EmbeddedInode()
	for !p.IsRoot() {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		size += len(name) + 1
		if len(names) >= maxDepth || size > store.MaxPath {
			return "", false
		}
		names = append(names, name)
		p = parent
	}
	root := n.f.opts.Root
	if len(names) == 0 {
		return root, true
	}
	path := root
	if root == "/" {
		path = ""
	}
	for i := len(names) - 1; i >= 0; i-- {
		path += "/" + names[i]
	}
	return path, true
}

// checkChild refuses to give the kernel a node for entry sn of this
// directory that would put a node above itself: an inode number FUSE
// keeps (0, and go-fuse's ^0, which it panics on), the mount's root's, or
// for a directory the inode of this directory or of one above it. A
// directory has one name; a second one above itself, which only a damaged
// path document holds, would make go-fuse's tree a cycle that every walk
// up it follows forever. The kernel's tree may be behind another
// mount's renames, though: vfs tells which (DirAlias).
func (n *node) checkChild(ctx context.Context, sn store.Node) error {
	ino := sn.Ino
	if ino == 0 || ino == ^uint64(0) || ino == store.RootIno || ino == n.f.opts.RootIno {
		if ino != 0 && ino != ^uint64(0) {
			return n.aliasError(ctx, sn, n.f.opts.Root, true)
		}
		return n.aliasError(ctx, sn, "", false)
	}
	if sn.Type != store.TypeDir {
		return nil
	}
	p := n.EmbeddedInode()
	for depth := 0; p != nil && depth <= maxDepth; depth++ {
		if p.StableAttr().Ino == ino {
			above, ok := p.Operations().(*node).StorePath()
			return n.aliasError(ctx, sn, above, ok)
		}
		if p.IsRoot() {
			return nil
		}
		_, p = p.Parent()
	}
	return nil
}

// aliasError is the error of entry sn here naming a directory at path
// above (if known) or an inode FUSE keeps.
func (n *node) aliasError(ctx context.Context, sn store.Node, above string, known bool) error {
	dir, ok := n.StorePath()
	if !ok {
		return syscall.ENOENT
	}
	path := store.Join(dir, sn.Name)
	if !known {
		return n.f.core.DamagedEntry(path, fmt.Errorf("names inode %d, which no entry can: %w", sn.Ino, store.ErrCorrupt))
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	return n.f.core.DirAlias(ctx, path, sn.Ino, above)
}

// newChild makes (or finds) the kernel node of a store node, unless
// checkChild refuses it.
func (n *node) newChild(ctx context.Context, sn store.Node, out *fuse.EntryOut) (*gofs.Inode, error) {
	if err := n.checkChild(ctx, sn); err != nil {
		return nil, err
	}
	return n.placeChild(ctx, sn, out, true), nil
}

// placeChild is newChild once checkChild let it; dropOld false: the
// lookup tried to drop a directory's old name already (heldElsewhere).
func (n *node) placeChild(ctx context.Context, sn store.Node, out *fuse.EntryOut, dropOld bool) *gofs.Inode {
	child := n.NewInode(ctx, &node{f: n.f}, gofs.StableAttr{Mode: TypeBits(sn.Type), Ino: sn.Ino})
	if cn, ok := child.Operations().(*node); ok {
		cn.remember(sn.Attr)
	}
	n.f.fillAttr(sn.Attr, &out.Attr)
	if sn.Type == store.TypeDir {
		if known, ok := n.f.dirNodes.LoadOrStore(sn.Ino, child); ok {
			k := known.(*gofs.Inode)
			_, parent := k.Parent()
			inTree := parent != nil
			if dropOld {
				inTree, _ = n.dropOldName(k, sn.Name, oldNameWait)
			}
			if !inTree {
				// Not in go-fuse's tree (a node a concurrent lookup's
				// won over): this one may be the one it keeps.
				n.f.dirNodes.CompareAndSwap(sn.Ino, known, child)
			}
		}
	}
	return child
}

// replyCreated settles what the kernel may keep of the reply to a create
// of name here (child, made from sn), with delegations: the entry is told
// under this directory's delegation (and invalidated on recall), or not
// kept; so are the attributes (tellAttrs). Call the result once the reply
// is made.
func (n *node) replyCreated(name string, sn store.Node, child *gofs.Inode, out *fuse.EntryOut) func() {
	if !n.f.core.Delegations() {
		return func() {}
	}
	n.tellAttrs(child, name, sn.Ino, sn.Type, out)
	kept, done := n.f.core.TellEntry(n.Ino(), name, n.f.kernelNode(n.EmbeddedInode()))
	if !kept {
		uncached(out)
	}
	return done
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.inRequest()()
	ans, err := n.f.core.LookupAt(ctx, n, n.f.kernelNode(n.EmbeddedInode()), name)
	defer ans.Done()
	if n.f.core.Delegations() && !ans.Kept {
		// go-fuse has the kernel keep an answer, a negative one too, for
		// the mount's timeouts (an hour under delegations) unless told
		// otherwise: only one a delegation covers may be kept.
		uncached(out)
	}
	if err != nil {
		return nil, n.f.toErrno("lookup", err)
	}
	// An entry refused here is refused before it can touch the kernel's
	// names (heldElsewhere drops a directory's old name).
	if err := n.checkChild(ctx, ans.Node); err != nil {
		uncached(out)
		return nil, n.f.toErrno("lookup", err)
	}
	dropOld := true
	if ans.Node.Type == store.TypeDir {
		held, tried := n.heldElsewhere(ans.Node.Ino)
		if held {
			uncached(out)
			return nil, syscall.ENOENT
		}
		dropOld = !tried
	}
	child := n.placeChild(ctx, ans.Node, out, dropOld)
	if ans.UnderDelegation {
		n.tellAttrs(child, name, ans.Node.Ino, ans.Node.Type, out)
	}
	return child, 0
}

// tellAttrs settles what the kernel may keep of the attributes of child
// (entry name here) it is being told: if a delegation holds them, it is
// told under it (and they are invalidated on recall); if none does, it
// must not keep them.
func (n *node) tellAttrs(child *gofs.Inode, name string, ino uint64, typ store.FileType, out *fuse.EntryOut) {
	if !n.f.core.TellAttrs(n.Ino(), name, ino, typ == store.TypeDir, n.f.kernelNode(child)) {
		out.SetAttrTimeout(notKept)
	}
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	return n.f.toErrno("unlink", n.f.core.RemoveAt(ctx, n, name, false, 0))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	// The kernel looked the directory up before asking: its inode is the
	// first guess at the one whose own change lock rmdir takes.
	victim := n.GetChild(name)
	var sub uint64
	if victim != nil {
		sub = victim.StableAttr().Ino
	}
	err := n.f.core.RemoveAt(ctx, n, name, true, sub)
	if err == nil {
		markRemoved(victim)
	}
	return n.f.toErrno("rmdir", err)
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	u, err := n.f.core.Usage(ctx)
	if err != nil {
		return n.f.toErrno("statfs", err)
	}
	const bs = 4096
	free := uint64(u.FreeBytes) / bs
	// Files are bounded only by disk; report a generous inode total so
	// that tools checking for free inodes never refuse.
	files := uint64(u.Inodes) + uint64(u.FreeBytes)/512
	*out = fuse.StatfsOut{Blocks: uint64(u.TotalBytes) / bs, Bfree: free, Bavail: free,
		Files: files, Ffree: files - uint64(u.Inodes), Bsize: bs, Frsize: bs, NameLen: store.MaxName}
	return 0
}

// renameat2 flags.
const (
	renameNoReplace = 0x1
	renameExchange  = 0x2
)

func (n *node) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.f.opts.ReadOnly {
		return syscall.EROFS
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	defer n.inRequest()()
	defer np.inRequest()()
	if flags&renameExchange != 0 || flags&^(renameNoReplace|renameExchange) != 0 {
		return syscall.EINVAL
	}
	// The kernel looked the source and the target up before asking:
	// their inodes, if directories, are the first guesses at the
	// directories whose own change locks the rename needs (see rename).
	var guess vfs.RenameDirs
	moved := n.GetChild(name)
	if moved != nil && moved.Mode()&syscall.S_IFMT == syscall.S_IFDIR {
		guess.Moved = moved.StableAttr().Ino
	}
	victim := np.GetChild(newName)
	if victim != nil && victim.Mode()&syscall.S_IFMT == syscall.S_IFDIR {
		guess.Replaced = victim.StableAttr().Ino
	}
	err := n.f.core.RenameAt(ctx, n, name, np, newName, &guess, flags&renameNoReplace != 0)
	if err == nil && guess.Replaced != 0 && victim != nil && victim.StableAttr().Ino == guess.Replaced {
		// A directory this replaced: removed. Only the one the rename
		// found there: the kernel's guess may be a directory another
		// mount moved away, which lives on.
		markRemoved(victim)
	}
	if err == nil {
		movedDir := moved != nil && moved.Mode()&syscall.S_IFMT == syscall.S_IFDIR
		defer n.f.core.TellMoved(n.Ino(), np.Ino(), newName, n.f.kernelNode(np.EmbeddedInode()), n.f.kernelNode(moved), movedDir)()
	}
	return n.f.toErrno("rename", err)
}

// Extended attributes (vfs.Mount.Getxattr and the others say which).

// AboutXattr names the attribute in which a mount's root tells what the
// daemon serving it was given to say of itself (Mount's about: its pid,
// its log, its settings), for the mount helper's remount and for whoever
// looks (getfattr -n esfs.mount DIR). It is answered here and never
// stored: the esfs namespace is the daemon's own, as ceph.* is CephFS's
// (vfs refuses to store it), and it is not listed.
const AboutXattr = "esfs.mount"

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr == AboutXattr {
		if !n.IsRoot() || n.f.about == nil {
			return 0, syscall.ENODATA
		}
		if len(dest) < len(n.f.about) {
			return uint32(len(n.f.about)), syscall.ERANGE
		}
		return uint32(copy(dest, n.f.about)), 0
	}
	size, err := n.f.core.Getxattr(withCaller(ctx), n, attr, dest)
	return size, n.f.toErrno("getxattr", err)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return n.f.toErrno("setxattr", n.f.core.Setxattr(withCaller(ctx), n, attr, data, flags))
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return n.f.toErrno("removexattr", n.f.core.Removexattr(withCaller(ctx), n, attr))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	size, err := n.f.core.Listxattr(withCaller(ctx), n, dest)
	return size, n.f.toErrno("listxattr", err)
}
