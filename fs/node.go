package fs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// node is one inode known to the kernel. It holds no attributes: those live
// in the store and the cache, keyed by its inode number.
type node struct {
	gofs.Inode
	f *FS
}

var (
	_ = (gofs.NodeLookuper)((*node)(nil))
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

func (n *node) ino() uint64 { return n.StableAttr().Ino }

// path returns the node's path in the store, from go-fuse's tree. ok is
// false when the node is no longer in the tree (unlinked or forgotten).
func (n *node) path() (string, bool) {
	var names []string
	var p *gofs.Inode = n.EmbeddedInode()
	for !p.IsRoot() {
		name, parent := p.Parent()
		if parent == nil {
			return "", false
		}
		names = append(names, name)
		p = parent
	}
	if len(names) == 0 {
		return "/", true
	}
	path := ""
	for i := len(names) - 1; i >= 0; i-- {
		path += "/" + names[i]
	}
	return path, true
}

// dirPath returns the path of this directory node, and checks with a store
// read that the path still names this inode (fresh: bypassing the cache).
// Another mount may have renamed the directory away and made a new one at
// its name; then operations on this (stale) node get ESTALE instead of
// landing in the other directory (LOCKING-REVIEW item 6).
func (n *node) dirPath(ctx context.Context, fresh bool) (string, error) {
	p, ok := n.path()
	if !ok {
		return "", errnoErr(syscall.ENOENT, "directory inode %d was removed", n.ino())
	}
	return p, n.checkDirAt(ctx, p, fresh)
}

// checkDirAt checks that path p names this directory inode.
func (n *node) checkDirAt(ctx context.Context, p string, fresh bool) error {
	if p == "/" {
		return nil
	}
	var d store.Node
	var err error
	if fresh {
		d, err = n.f.resolveFresh(ctx, p)
	} else {
		d, err = n.f.resolve(ctx, p)
	}
	if errors.Is(err, store.ErrNotFound) {
		return errnoErr(syscall.ESTALE, "directory %q is gone", p)
	}
	if err != nil {
		return err
	}
	if d.Ino != n.ino() {
		return errnoErr(syscall.ESTALE, "directory %q is now inode %d, not %d", p, d.Ino, n.ino())
	}
	if d.Type != store.TypeDir {
		return errnoErr(syscall.ENOTDIR, "%q is not a directory", p)
	}
	return nil
}

// lockEntry takes the locks for changing entry name of this directory. The
// directory's path comes from go-fuse's tree, which a rename of an ancestor
// (here) changes when it replies: if it changed while we waited for the
// locks, the locks are on the old path, so take them again.
func (n *node) lockEntry(ctx context.Context, name string) (dir, path string, txn *locking.Txn, err error) {
	for attempt := 0; ; attempt++ {
		var ok bool
		dir, ok = n.path()
		if !ok {
			return "", "", nil, errnoErr(syscall.ENOENT, "directory inode %d was removed", n.ino())
		}
		path = store.Join(dir, name)
		if err := store.CheckPath(path); err != nil {
			return "", "", nil, err
		}
		txn, err = n.f.begin(ctx, dir, path)
		if err != nil {
			return "", "", nil, err
		}
		if now, ok := n.path(); ok && now == dir {
			return dir, path, txn, nil
		}
		_ = txn.End(ctx)
		if attempt >= 20 {
			return "", "", nil, errnoErr(syscall.EAGAIN, "directory inode %d keeps moving", n.ino())
		}
	}
}

func typeBits(t store.FileType) uint32 {
	switch t {
	case store.TypeDir:
		return syscall.S_IFDIR
	case store.TypeSymlink:
		return syscall.S_IFLNK
	case store.TypeFifo:
		return syscall.S_IFIFO
	case store.TypeSocket:
		return syscall.S_IFSOCK
	case store.TypeCharDev:
		return syscall.S_IFCHR
	case store.TypeBlockDev:
		return syscall.S_IFBLK
	}
	return syscall.S_IFREG
}

// fileType is the type of the S_IFMT bits of mode; 0 if esfs has none.
func fileType(mode uint32) store.FileType {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		return store.TypeFile
	case syscall.S_IFDIR:
		return store.TypeDir
	case syscall.S_IFLNK:
		return store.TypeSymlink
	case syscall.S_IFIFO:
		return store.TypeFifo
	case syscall.S_IFSOCK:
		return store.TypeSocket
	case syscall.S_IFCHR:
		return store.TypeCharDev
	case syscall.S_IFBLK:
		return store.TypeBlockDev
	}
	return 0
}

// fillAttr converts store attributes for the kernel.
func (f *FS) fillAttr(a store.Inode, out *fuse.Attr) {
	size, chunks := a.Size, a.Chunks
	if of := f.openState(a.Ino); of != nil {
		size, chunks = of.current(a)
	}
	out.Ino = a.Ino
	out.Size = uint64(size)
	out.Blocks = (uint64(size) + 511) / 512
	if a.Type == store.TypeFile && chunks >= 0 {
		// What the file stores, in whole chunks: cp, tar and rsync take
		// fewer blocks than the size for a sparse file, and then find its
		// holes with SEEK_HOLE instead of reading them.
		out.Blocks = min(out.Blocks, uint64(chunks)*uint64(f.st.ChunkSize())/512)
	}
	out.Blksize = 128 << 10
	out.Mode = typeBits(a.Type) | a.Mode
	if a.Type.IsDevice() {
		out.Rdev = a.Rdev
	}
	out.Nlink = a.Nlink
	if a.Type == store.TypeDir && !a.DirLinksCounted() {
		out.Nlink = 1 // not counted (see DirLinksCounted)
	}
	out.Owner = fuse.Owner{Uid: a.Uid, Gid: a.Gid}
	setTime := func(ns int64) (uint64, uint32) {
		// The kernel reads the seconds as signed: times before 1970 pass
		// as two's complement, with nanoseconds counted forward.
		sec, nsec := ns/1e9, ns%1e9
		if nsec < 0 {
			sec, nsec = sec-1, nsec+1e9
		}
		return uint64(sec), uint32(nsec)
	}
	out.Atime, out.Atimensec = setTime(a.Atime)
	out.Mtime, out.Mtimensec = setTime(a.Mtime)
	out.Ctime, out.Ctimensec = setTime(a.Ctime)
}

// newChild makes (or finds) the kernel node of a store node.
func (n *node) newChild(ctx context.Context, sn store.Node, out *fuse.EntryOut) *gofs.Inode {
	child := n.NewInode(ctx, &node{f: n.f}, gofs.StableAttr{Mode: typeBits(sn.Type), Ino: sn.Ino})
	n.f.fillAttr(sn.Attr, &out.Attr)
	return child
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if child, errno, ok := n.lookupCached(ctx, name, out); ok {
		return child, errno
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	if err := store.CheckName(name); err != nil {
		return nil, n.f.toErrno("lookup", err)
	}
	dir, err := n.dirPath(ctx, false)
	if err != nil {
		return nil, n.f.toErrno("lookup", err)
	}
	path := store.Join(dir, name)
	if len(path) > store.MaxPath {
		return nil, syscall.ENAMETOOLONG
	}
	sn, err := n.f.resolve(ctx, path)
	if err != nil {
		return nil, n.f.toErrno("lookup", err)
	}
	return n.newChild(ctx, sn, out), 0
}

// lookupCached answers a lookup from the daemon's cache alone, when both
// this directory's path and the name are cached (ok false: go to the
// store). It makes the same checks as the full lookup, against the cache;
// it exists because most lookups are such hits, and the full path's
// deadline timer costs as much as the hit itself.
func (n *node) lookupCached(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno, bool) {
	if store.CheckName(name) != nil {
		return nil, 0, false
	}
	dir, ok := n.path()
	if !ok {
		return nil, 0, false
	}
	if dir != "/" {
		d, neg, ok := n.f.cache.Lookup(dir)
		if !ok || neg || d.Ino != n.ino() || d.Type != store.TypeDir {
			return nil, 0, false
		}
	}
	path := store.Join(dir, name)
	if len(path) > store.MaxPath {
		return nil, 0, false
	}
	sn, neg, ok := n.f.cache.Lookup(path)
	switch {
	case !ok:
		return nil, 0, false
	case neg:
		return nil, syscall.ENOENT, true
	}
	return n.newChild(ctx, sn, out), 0, true
}

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if a, ok := n.f.cache.Inode(n.ino()); ok {
		n.f.fillAttr(a, &out.Attr)
		return 0
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	a, err := n.f.inode(ctx, n.ino(), n.f.cache.Gen())
	if errors.Is(err, store.ErrNotFound) {
		if of := n.f.openState(n.ino()); of != nil {
			// Unlinked while open here: the inode lives on in memory.
			a = of.lastAttr()
		} else {
			return syscall.ESTALE
		}
	} else if err != nil {
		return n.f.toErrno("getattr", err)
	}
	n.f.fillAttr(a, &out.Attr)
	return 0
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.f.opts.ReadOnly {
		return syscall.EROFS
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	if size, ok := in.GetSize(); ok {
		if n.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
			return syscall.EISDIR
		}
		if err := n.f.truncate(ctx, n.ino(), int64(size), nil); err != nil {
			return n.f.toErrno("truncate", err)
		}
	}
	t := now()
	mode, hasMode := in.GetMode()
	uid, hasUid := in.GetUID()
	gid, hasGid := in.GetGID()
	atime, hasAtime := in.GetATime()
	mtime, hasMtime := in.GetMTime()
	if !hasMode && !hasUid && !hasGid && !hasAtime && !hasMtime {
		if _, ok := in.GetSize(); ok {
			return n.Getattr(ctx, fh, out)
		}
	}
	a, err := n.f.updateInode(ctx, n.ino(), func(a *store.Inode) error {
		if hasMode {
			a.Mode = mode & 0o7777
		}
		if hasUid {
			a.Uid = uid
		}
		if hasGid {
			a.Gid = gid
		}
		if hasAtime {
			a.Atime = clampedNano(atime)
		}
		if hasMtime {
			a.Mtime = clampedNano(mtime)
			if of := n.f.openState(a.Ino); of != nil {
				of.setMtime(a.Mtime) // an explicit mtime wins over the write's
			}
		}
		a.Ctime = t
		return nil
	})
	if err != nil {
		return n.f.toErrno("setattr", err)
	}
	n.f.noteInode(a)
	n.f.fillAttr(a, &out.Attr)
	return 0
}

// Times are stored in nanoseconds since 1970 in an int64: from 1677-09-21
// to 2262-04-11.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// clampedNano is t in nanoseconds, a time beyond what the store holds
// clamped to its range, as local filesystems clamp times to theirs (ext4:
// 1901 to 2446) instead of wrapping around.
func clampedNano(t time.Time) int64 {
	switch {
	case t.Before(minTime):
		return math.MinInt64
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
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

// newEntry is what a create asks for: the type, the mode (the kernel has
// applied the umask), a symlink's target, a device's number.
type newEntry struct {
	typ    store.FileType
	mode   uint32
	target string
	rdev   uint32
}

// create makes a new inode and its path in this directory, in one bulk:
// the inode, the path (op_type=create, so two creators never both win) and
// the directory's timestamps (and link count, for a subdirectory). A path whose inode could not be written is
// rolled back; a crash can only leave an unreachable inode, never a path
// without an inode.
func (n *node) create(ctx context.Context, name string, e newEntry) (store.Node, error) {
	if n.f.opts.ReadOnly {
		return store.Node{}, syscall.EROFS
	}
	if err := store.CheckName(name); err != nil {
		return store.Node{}, err
	}
	if sn, handled, err := n.createShared(ctx, name, e); handled {
		return sn, err
	}
	dir, path, txn, err := n.lockEntry(ctx, name)
	if err != nil {
		return store.Node{}, err
	}
	sn, err := n.createLocked(ctx, dir, path, e)
	created := err == nil
	n.f.end(ctx, txn, &err)
	if created && errors.Is(err, locking.ErrLeaseLost) {
		// Our locks were taken from us (this mount was frozen past its
		// lease): someone may have removed the directory meanwhile. The
		// create reports EIO, so it must leave nothing behind.
		n.f.undoCreate(ctx, sn, n.ino())
	}
	return sn, err
}

// undoCreate removes what a create in directory parent wrote, at the
// versions it wrote.
func (f *FS) undoCreate(ctx context.Context, sn store.Node, parent uint64) {
	if sn.Type == store.TypeDir {
		if empty, err := f.isEmptyDir(ctx, sn.Path); err != nil || !empty {
			return
		}
	}
	f.cache.InvalidatePath(sn.Path)
	if _, err := f.st.DeleteDentry(ctx, sn.Path, sn.Dentry.Ver); err != nil {
		f.log.Warn("could not undo a fenced create", "path", sn.Path, "err", err)
		return
	}
	if _, err := f.st.DeleteInode(ctx, sn.Ino, sn.Attr.Ver); err != nil {
		f.log.Warn("could not undo a fenced create's inode", "ino", sn.Ino, "err", err)
	}
	if sn.Type == store.TypeDir {
		f.addDirLinks(ctx, parent, -1, 0)
	}
}

// createLocked is create under the locks: it re-checks, with realtime
// reads, that the directory is still there and still this inode.
func (n *node) createLocked(ctx context.Context, dir, path string, e newEntry) (store.Node, error) {
	if err := n.checkDirAt(ctx, dir, true); err != nil {
		return store.Node{}, err
	}
	sn, err := n.writeNew(ctx, dir, path, e)
	if errors.Is(err, store.ErrExists) {
		// Taken by a visible entry, or by the garbage of an aborted or
		// finished rename, which we may clear since we hold its name.
		if cleared, cerr := n.f.clearGarbage(ctx, path); cerr != nil || !cleared {
			if cerr != nil {
				return store.Node{}, cerr
			}
			return store.Node{}, err
		}
		return n.createLocked(ctx, dir, path, e)
	}
	return sn, err
}

// createShared is a create under shared locks only (see locking.Share):
// Elasticsearch's create-if-absent decides the name. handled is false when
// the locked path must decide instead: the name is taken (by an entry, or
// by garbage only the name's lock may clear), or the strategy has no
// shared part, or this directory moved meanwhile.
func (n *node) createShared(ctx context.Context, name string, e newEntry) (sn store.Node, handled bool, err error) {
	dir, ok := n.path()
	if !ok {
		return store.Node{}, false, nil
	}
	path := store.Join(dir, name)
	if store.CheckPath(path) != nil {
		return store.Node{}, false, nil
	}
	reqs, ok := locking.SharedPart(n.f.co.Strategy.Entry(dir, path), path)
	if !ok {
		return store.Node{}, false, nil
	}
	h, err := n.f.co.Share(ctx, reqs)
	if err != nil {
		return store.Node{}, true, err
	}
	defer h.End()
	if now, ok := n.path(); !ok || now != dir {
		return store.Node{}, false, nil
	}
	// While the lease lives nobody can rename or remove the directory, so
	// one realtime check per lease is enough.
	if !h.Checked(dir, n.ino()) {
		if err := n.checkDirAt(ctx, dir, true); err != nil {
			return store.Node{}, true, err
		}
		h.NoteChecked(dir, n.ino())
	}
	if err := h.Sess.Check(); err != nil {
		return store.Node{}, true, err
	}
	sn, err = n.writeNew(ctx, dir, path, e)
	if errors.Is(err, store.ErrExists) {
		return store.Node{}, false, nil
	}
	if err != nil {
		return store.Node{}, true, err
	}
	// No release follows to tell us whether our locks were taken from us
	// meanwhile: a session still valid after the write was not declared
	// dead before it landed (others wait lease + grace of silence).
	if err := h.Sess.Check(); err != nil {
		n.f.undoCreate(ctx, sn, n.ino())
		return store.Node{}, true, err
	}
	return sn, true, nil
}

// writeNew writes the inode and the path document of a new entry, with
// create-if-absent for both, and the directory's times and count (see
// dirLinksOp). store.ErrExists:
// the name is taken, and nothing was left behind.
func (n *node) writeNew(ctx context.Context, dir, path string, e newEntry) (store.Node, error) {
	typ, mode := e.typ, e.mode
	parent, err := n.f.inode(ctx, n.ino(), n.f.cache.Gen())
	if err != nil {
		return store.Node{}, err
	}
	uid, gid := caller(ctx)
	if parent.Mode&syscall.S_ISGID != 0 {
		gid = parent.Gid // BSD group semantics of setgid directories
		if typ == store.TypeDir {
			mode |= syscall.S_ISGID
		}
	}
	t := now()
	a := store.Inode{Ino: store.NewIno(), Type: typ, Mode: mode & 0o7777, Uid: uid, Gid: gid, Nlink: 1,
		Atime: t, Mtime: t, Ctime: t, Btime: t, Target: e.target}
	subdirs := 0 // what the new entry adds to the parent's link count
	switch {
	case typ == store.TypeFile:
		a.Dgen = 1 // the creator's writer owns the first data generation
	case typ == store.TypeDir:
		a.Nlink, subdirs = 2, 1
	case typ == store.TypeSymlink:
		a.Size = int64(len(e.target))
		a.Mode = 0o777
	case typ.IsDevice():
		a.Rdev = e.rdev
	}
	d := store.Dentry{Path: path, Ino: a.Ino, Type: typ}
	opInode, err := n.f.st.OpCreateInode(a)
	if err != nil {
		return store.Node{}, err
	}
	opPath, err := n.f.st.OpCreateDentry(d)
	if err != nil {
		return store.Node{}, err
	}
	opParent, pl, err := n.f.dirLinksOp(ctx, n.ino(), subdirs, t)
	if err != nil {
		return store.Node{}, err
	}
	n.f.cache.InvalidatePath(path)
	n.f.noteWrite()
	res, err := n.f.st.Bulk(ctx, []store.BulkOp{opInode, opPath, opParent})
	if err != nil {
		return store.Node{}, err
	}
	n.f.settleDirLinks(ctx, pl, res[2], res[0].Err == nil && res[1].Err == nil)
	if res[1].Err != nil {
		// The name is taken (or the path write failed): undo the inode.
		if res[0].Err == nil {
			if _, derr := n.f.st.DeleteInode(ctx, a.Ino, res[0].Ver); derr != nil {
				n.f.log.Warn("could not remove the inode of a failed create", "ino", a.Ino, "err", derr)
			}
		}
		return store.Node{}, res[1].Err
	}
	if res[0].Err != nil {
		// The path exists but its inode does not: undo the path.
		if _, derr := n.f.st.DeleteDentry(ctx, path, res[1].Ver); derr != nil {
			n.f.log.Error("could not remove a path whose inode failed", "path", path, "err", derr)
		}
		return store.Node{}, res[0].Err
	}
	a.Ver, d.Ver = res[0].Ver, res[1].Ver
	d.Parent, d.Name = store.Split(path)
	sn := store.Node{Dentry: d, Attr: a}
	n.f.cache.PutNode(sn, n.f.cache.Gen())
	return sn, nil
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	sn, err := n.create(ctx, name, newEntry{typ: store.TypeDir, mode: mode})
	if err != nil {
		return nil, n.f.toErrno("mkdir", err)
	}
	return n.newChild(ctx, sn, out), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	if len(target) > store.MaxPath || target == "" {
		if target == "" {
			return nil, syscall.ENOENT
		}
		return nil, syscall.ENAMETOOLONG
	}
	sn, err := n.create(ctx, name, newEntry{typ: store.TypeSymlink, mode: 0o777, target: target})
	if err != nil {
		return nil, n.f.toErrno("symlink", err)
	}
	return n.newChild(ctx, sn, out), 0
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
	sn, err := n.create(ctx, name, newEntry{typ: typ, mode: mode, rdev: dev})
	if err != nil {
		return nil, n.f.toErrno("mknod", err)
	}
	return n.newChild(ctx, sn, out), 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	a, err := n.f.inode(ctx, n.ino(), n.f.cache.Gen())
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
	sn, err := n.create(ctx, name, newEntry{typ: store.TypeFile, mode: mode})
	created := err == nil
	if errors.Is(err, store.ErrExists) && flags&syscall.O_EXCL == 0 {
		// Another process created it since the kernel's lookup: open that one.
		dir, derr := n.dirPath(ctx, false)
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
		if err == nil && flags&syscall.O_TRUNC != 0 {
			err = n.f.truncate(ctx, sn.Ino, 0, nil)
		}
	}
	if err != nil {
		return nil, nil, 0, n.f.toErrno("create", err)
	}
	child := n.newChild(ctx, sn, out)
	fh, err := n.f.openHandle(ctx, sn.Attr, flags, created)
	if err != nil {
		return nil, nil, 0, n.f.toErrno("create", err)
	}
	return child, fh, 0, 0
}

func (n *node) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	if n.f.opts.ReadOnly {
		return nil, syscall.EROFS
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	tn, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	if tn.StableAttr().Mode&syscall.S_IFMT == syscall.S_IFDIR {
		return nil, syscall.EPERM
	}
	if err := store.CheckName(name); err != nil {
		return nil, n.f.toErrno("link", err)
	}
	dir, path, txn, err := n.lockEntry(ctx, name)
	if err != nil {
		return nil, n.f.toErrno("link", err)
	}
	child, err := n.linkLocked(ctx, tn, dir, path, out)
	n.f.end(ctx, txn, &err)
	if err != nil {
		return nil, n.f.toErrno("link", err)
	}
	return child, 0
}

func (n *node) linkLocked(ctx context.Context, tn *node, dir, path string, out *fuse.EntryOut) (*gofs.Inode, error) {
	if err := n.checkDirAt(ctx, dir, true); err != nil {
		return nil, err
	}
	// Count the link first: a crash in between leaves a count one too high
	// (a leak fsck reclaims), never a path to an inode that thinks it has
	// no links and may be deleted.
	t := now()
	a, err := n.f.updateInode(ctx, tn.ino(), func(a *store.Inode) error {
		if a.Nlink >= 65000 {
			return syscall.EMLINK
		}
		a.Nlink++
		a.Ctime = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	d := store.Dentry{Path: path, Ino: a.Ino, Type: a.Type}
	n.f.cache.InvalidatePath(path)
	n.f.noteWrite()
	v, err := n.f.st.CreateDentry(ctx, d)
	if errors.Is(err, store.ErrExists) {
		if cleared, cerr := n.f.clearGarbage(ctx, path); cerr == nil && cleared {
			v, err = n.f.st.CreateDentry(ctx, d)
		}
	}
	if err != nil {
		if _, uerr := n.f.updateInode(ctx, a.Ino, func(a *store.Inode) error { a.Nlink--; return nil }); uerr != nil {
			n.f.log.Warn("could not undo a link count", "ino", a.Ino, "err", uerr)
		}
		return nil, err
	}
	n.f.touchDir(n.ino(), t)
	d.Ver = v
	d.Parent, d.Name = store.Split(path)
	sn := store.Node{Dentry: d, Attr: a}
	n.f.cache.PutNode(sn, n.f.cache.Gen())
	n.f.fillAttr(a, &out.Attr)
	return tn.EmbeddedInode(), nil
}

// clearGarbage removes the document at path if it is not part of the tree
// (an intent of an aborted or finished rename). The caller holds the
// exclusive lock of path.
func (f *FS) clearGarbage(ctx context.Context, path string) (bool, error) {
	d, err := f.st.GetDentry(ctx, path)
	if errors.Is(err, store.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if _, ok, err := f.co.Visible(ctx, d); err != nil || ok {
		return false, err
	}
	if _, err := f.st.DeleteDentry(ctx, path, d.Ver); err != nil && !errors.Is(err, store.ErrConflict) {
		return false, err
	}
	return true, nil
}

// touchDir sets a directory's mtime and ctime after a change of its
// entries, with a partial update (no read, no conflict with siblings). It
// is synchronous: a later explicit utimens (rsync, tar) must win over it.
func (f *FS) touchDir(ino uint64, t int64) {
	f.cache.InvalidateInode(ino)
	ctx, cancel := context.WithTimeout(context.Background(), f.st.Timeout())
	defer cancel()
	res, err := f.st.Bulk(ctx, []store.BulkOp{f.st.OpTouchInode(ino, t, t)})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		f.log.Warn("could not update directory times", "ino", ino, "err", err)
	}
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	if n.f.opts.ReadOnly {
		return syscall.EROFS
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	return n.f.toErrno("unlink", n.remove(ctx, name, false))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	if n.f.opts.ReadOnly {
		return syscall.EROFS
	}
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	return n.f.toErrno("rmdir", n.remove(ctx, name, true))
}

// remove deletes the path name of this directory: its path document (with
// compare-and-set on the version just read), then one link of its inode.
func (n *node) remove(ctx context.Context, name string, wantDir bool) error {
	if err := store.CheckName(name); err != nil {
		return err
	}
	dir, path, txn, err := n.lockEntry(ctx, name)
	if err != nil {
		return err
	}
	err = n.removeLocked(ctx, dir, path, wantDir)
	n.f.end(ctx, txn, &err)
	return err
}

func (n *node) removeLocked(ctx context.Context, dir, path string, wantDir bool) error {
	if err := n.checkDirAt(ctx, dir, true); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		sn, err := n.f.resolveFresh(ctx, path)
		if err != nil {
			return err
		}
		if wantDir && sn.Type != store.TypeDir {
			return syscall.ENOTDIR
		}
		if !wantDir && sn.Type == store.TypeDir {
			return syscall.EISDIR
		}
		if wantDir {
			empty, err := n.f.isEmptyDir(ctx, path)
			if err != nil {
				return err
			}
			if !empty {
				return syscall.ENOTEMPTY
			}
		}
		opPath, err := n.f.st.OpDeleteDentry(path, sn.Ver)
		if err != nil {
			return err
		}
		subdirs := 0
		if sn.Type == store.TypeDir {
			subdirs = -1
		}
		// The directory's times, and its count for a subdirectory, ride
		// with the delete.
		opParent, pl, err := n.f.dirLinksOp(ctx, n.ino(), subdirs, now())
		if err != nil {
			return err
		}
		n.f.cache.InvalidatePath(path)
		n.f.noteWrite()
		res, err := n.f.st.Bulk(ctx, []store.BulkOp{opPath, opParent})
		if err != nil {
			return err
		}
		n.f.settleDirLinks(ctx, pl, res[1], res[0].Err == nil)
		err = res[0].Err
		if errors.Is(err, store.ErrConflict) && attempt < 10 {
			continue // changed between our read and delete: look again
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("%q changed while being removed: %w", path, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		return n.f.dropLink(ctx, sn.Ino)
	}
}

// isEmptyDir reports whether a directory has no entries. The search must
// see every committed child, so it refreshes first.
func (f *FS) isEmptyDir(ctx context.Context, path string) (bool, error) {
	if err := f.st.Refresh(ctx); err != nil {
		return false, err
	}
	f.refreshed.Store(f.writes.Load())
	sc := f.st.ListDir(path, 16)
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return false, err
		}
		if len(bad) > 0 {
			return false, bad[0] // a corrupt child still makes it non-empty
		}
		if page == nil {
			return true, nil
		}
		vis, err := f.visiblePage(ctx, page)
		if err != nil || len(vis) > 0 {
			return false, err
		}
	}
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	f := n.f
	f.statfsMu.Lock()
	defer f.statfsMu.Unlock()
	if time.Since(f.statfsAt) > 5*time.Second {
		u, err := f.st.Usage(ctx)
		if err != nil {
			return f.toErrno("statfs", err)
		}
		const bs = 4096
		free := uint64(u.FreeBytes) / bs
		// Files are bounded only by disk; report a generous inode total so
		// that tools checking for free inodes never refuse.
		files := uint64(u.Inodes) + uint64(u.FreeBytes)/512
		f.statfsLast = fuse.StatfsOut{Blocks: uint64(u.TotalBytes) / bs, Bfree: free, Bavail: free,
			Files: files, Ffree: files - uint64(u.Inodes), Bsize: bs, Frsize: bs, NameLen: store.MaxName}
		f.statfsAt = time.Now()
	}
	*out = f.statfsLast
	return 0
}
