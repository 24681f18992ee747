package fs

// The calls that make a name (mkdir, symlink, mknod, create, link) and
// read a symlink, as the kernel asks them of a directory's node.

import (
	"context"
	"syscall"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// callerEntry is what a kernel request to create asks for, owned by the
// process that asks.
func callerEntry(ctx context.Context, typ store.FileType, mode uint32) vfs.Entry {
	uid, gid := caller(ctx)
	return vfs.Entry{Type: typ, Mode: mode, Uid: uid, Gid: gid}
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	sn, err := n.f.core.MakeAt(ctx, n, name, callerEntry(ctx, store.TypeDir, mode))
	if err != nil {
		return nil, n.f.toErrno("mkdir", err)
	}
	child, err := n.newChild(ctx, sn, out)
	if err != nil {
		return nil, n.f.toErrno("mkdir", err)
	}
	defer n.replyCreated(name, sn, child, out)()
	return child, 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	e := callerEntry(ctx, store.TypeSymlink, 0o777)
	e.Target = target
	sn, err := n.f.core.MakeAt(ctx, n, name, e)
	if err != nil {
		return nil, n.f.toErrno("symlink", err)
	}
	child, err := n.newChild(ctx, sn, out)
	if err != nil {
		return nil, n.f.toErrno("symlink", err)
	}
	defer n.replyCreated(name, sn, child, out)()
	return child, 0
}

// Mknod makes FIFOs, UNIX sockets (bind(2) on a path makes one), devices
// and, as mknod(2) may, regular files. Nothing else: the kernel turns
// mknod of a directory into EPERM before it asks. Special files hold no
// data here: the kernel of the mount that opens one does the piping, and
// the socket's server and clients meet in that kernel. The kernel checks
// CAP_MKNOD for devices, and opens none of them: FUSE mounts are nodev.
func (n *node) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	typ := fileType(mode)
	switch typ {
	case store.TypeFile, store.TypeFifo, store.TypeSocket, store.TypeCharDev, store.TypeBlockDev:
	default:
		return nil, syscall.EINVAL
	}
	e := callerEntry(ctx, typ, mode)
	e.Rdev = dev
	sn, err := n.f.core.MakeAt(ctx, n, name, e)
	if err != nil {
		return nil, n.f.toErrno("mknod", err)
	}
	child, err := n.newChild(ctx, sn, out)
	if err != nil {
		return nil, n.f.toErrno("mknod", err)
	}
	defer n.replyCreated(name, sn, child, out)()
	return child, 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	target, err := n.f.core.Readlink(ctx, n)
	if err != nil {
		return nil, n.f.toErrno("readlink", err)
	}
	return []byte(target), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	sn, h, err := n.f.core.CreateAt(ctx, n, name, callerEntry(ctx, store.TypeFile, mode), flags)
	if err != nil {
		return nil, nil, 0, n.f.toErrno("create", err)
	}
	child, err := n.newChild(ctx, sn, out)
	if err != nil {
		return nil, nil, 0, n.f.toErrno("create", err)
	}
	defer n.replyCreated(name, sn, child, out)()
	return child, &handle{h: h, f: n.f}, 0, 0
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	defer n.inRequest()()
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if tn.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, syscall.EPERM
	}
	sn, err := n.f.core.LinkAt(ctx, n, name, tn.Ino())
	if err != nil {
		return nil, n.f.toErrno("link", err)
	}
	n.f.fillAttr(sn.Attr, &out.Attr)
	defer n.replyCreated(name, sn, tn.EmbeddedInode(), out)()
	return tn.EmbeddedInode(), 0
}
