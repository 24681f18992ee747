package fs

// The calls that make a name (mkdir, symlink, mknod, create, link) and
// read a symlink, as the kernel asks them of a directory's node.

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// callerEntry is what a kernel request to create asks for, owned by the
// process that asks.
func callerEntry(ctx context.Context, typ store.FileType, mode uint32) Entry {
	uid, gid := caller(ctx)
	return Entry{Type: typ, Mode: mode, Uid: uid, Gid: gid}
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

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	sn, err := n.f.create(ctx, n, name, callerEntry(ctx, store.TypeDir, mode))
	if err != nil {
		return nil, n.f.toErrno("mkdir", err)
	}
	child := n.newChild(ctx, sn, out)
	defer n.replyCreated(name, sn, child, out)()
	return child, 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	e := callerEntry(ctx, store.TypeSymlink, 0o777)
	e.Target = target
	sn, err := n.f.create(ctx, n, name, e)
	if err != nil {
		return nil, n.f.toErrno("symlink", err)
	}
	child := n.newChild(ctx, sn, out)
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
	sn, err := n.f.create(ctx, n, name, e)
	if err != nil {
		return nil, n.f.toErrno("mknod", err)
	}
	child := n.newChild(ctx, sn, out)
	defer n.replyCreated(name, sn, child, out)()
	return child, 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	a, err := n.attrs(ctx)
	if err != nil {
		return nil, n.f.toErrno("readlink", err)
	}
	if a.Type != store.TypeSymlink {
		return nil, syscall.EINVAL
	}
	return []byte(a.Target), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	sn, err := n.f.create(ctx, n, name, callerEntry(ctx, store.TypeFile, mode))
	created := err == nil
	if errors.Is(err, store.ErrExists) && flags&syscall.O_EXCL == 0 {
		// Another process created it since the kernel's lookup: open that one.
		dir, derr := n.f.dirPath(ctx, n, false)
		if derr != nil {
			return nil, nil, 0, n.f.toErrno("create", derr)
		}
		sn, err = n.f.resolveFresh(ctx, store.Join(dir, name))
		if err == nil && sn.Type == store.TypeDir {
			return nil, nil, 0, syscall.EISDIR
		}
		if err == nil && sn.Type != store.TypeFile {
			// A symlink or a special file, made since the kernel looked:
			// the kernel opens those itself, and would take a handle
			// from us for an EIO.
			return nil, nil, 0, syscall.EEXIST
		}
		if err == nil && n.f.opts.ReadOnly && (flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0) {
			// The existing file, open for writing on a read-only
			// filesystem: as Open.
			return nil, nil, 0, syscall.EROFS
		}
		if err == nil && flags&syscall.O_TRUNC != 0 {
			err = n.f.truncate(ctx, sn.Ino, 0, nil)
		}
	}
	if err != nil {
		return nil, nil, 0, n.f.toErrno("create", err)
	}
	child := n.newChild(ctx, sn, out)
	defer n.replyCreated(name, sn, child, out)()
	fh, err := n.f.openHandle(ctx, sn.Attr, flags, created)
	if err != nil {
		return nil, nil, 0, n.f.toErrno("create", err)
	}
	return child, fh, 0, 0
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if tn.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, syscall.EPERM
	}
	sn, err := n.f.link(ctx, n, name, tn.ino())
	if err != nil {
		return nil, n.f.toErrno("link", err)
	}
	n.f.fillAttr(sn.Attr, &out.Attr)
	defer n.replyCreated(name, sn, tn.EmbeddedInode(), out)()
	return tn.EmbeddedInode(), 0
}
