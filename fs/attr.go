package fs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"syscall"
	"time"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// TypeBits are the S_IFMT bits of a file type, as the kernel is told them.
func TypeBits(t store.FileType) uint32 {
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

// StatNlink is the st_nlink the mount reports for a (esfs find reports
// the same).
func StatNlink(a store.Inode) uint32 {
	if a.Type == store.TypeDir && a.Nlink != 0 && !a.DirLinksCounted() {
		return 1 // not counted (see DirLinksCounted); 0: removed
	}
	return a.Nlink
}

// fillAttr converts store attributes for the kernel.
func (f *FS) fillAttr(a store.Inode, out *fuse.Attr) {
	a = f.core.Current(a)
	out.Ino = a.Ino
	out.Size = uint64(a.Size)
	// What the file stores, in whole chunks: cp, tar and rsync take fewer
	// blocks than the size for a sparse file, and then find its holes
	// with SEEK_HOLE instead of reading them (store.Inode.Blocks, which
	// esfs find and du report too).
	out.Blocks = uint64(a.Blocks(f.core.ChunkSize()))
	// The allocation unit is the chunk: st_blocks counts whole chunks,
	// holes are whole absent chunks, and SEEK_DATA answers a chunk's start
	// (Lseek); the size Linux lets a filesystem report data at is the
	// block size it reports. It is also the I/O size that costs one
	// request of the store, and the kernel's largest read and write here.
	out.Blksize = uint32(f.core.ChunkSize())
	out.Mode = TypeBits(a.Type) | a.Mode
	if a.Type.IsDevice() {
		out.Rdev = a.Rdev
	}
	out.Nlink = StatNlink(a)
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

func (n *node) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if a, ok := n.removedAttr(); ok {
		n.f.fillAttr(a, &out.Attr)
		return 0
	}
	a, kept, err := n.f.core.Getattr(ctx, n, n.f.kernelNode(n.EmbeddedInode()))
	if errors.Is(err, store.ErrNotFound) {
		if a, err = n.gone(); err != nil {
			return syscall.ESTALE
		}
		n.f.fillAttr(a, &out.Attr)
		return 0
	}
	if err != nil {
		return n.f.toErrno("getattr", err)
	}
	if !kept {
		out.SetTimeout(notKept)
	}
	n.answerAttr(a, &out.Attr)
	return 0
}

// answerAttr tells the kernel a, this node's attributes.
func (n *node) answerAttr(a store.Inode, out *fuse.Attr) {
	n.remember(a)
	n.f.fillAttr(a, out)
}

// remember keeps a directory's attributes as the kernel is told them.
func (n *node) remember(a store.Inode) {
	if a.Type != store.TypeDir || n.IsRoot() || n.removed.Load() {
		return
	}
	a.Xattrs = nil
	n.told.Store(&a)
}

// markRemoved records that the directory of kernel node kn (if one) was
// removed through this mount: the kernel marked it dead, and holds it as
// long as a process has it open or as its working directory.
func markRemoved(kn *gofs.Inode) {
	if kn == nil || kn.StableAttr().Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return
	}
	if n, ok := kn.Operations().(*node); ok {
		n.removed.Store(true)
	}
}

// removedAttr returns the attributes of a directory removed while the
// kernel holds it: as Linux answers for such a directory, they are its
// last ones, with no links, and only its holders can still change them
// (setattrRemoved). A write-delegated removal lands in the store later,
// and another mount's may never be told: what the kernel was last told
// is all this mount knows of it.
func (n *node) removedAttr() (store.Inode, bool) {
	if !n.removed.Load() {
		return store.Inode{}, false
	}
	p := n.told.Load()
	if p == nil {
		return store.Inode{}, false
	}
	a := *p
	a.Nlink = 0
	return a, true
}

// gone is the answer about this node once its inode was found gone from
// the store: a file open here lives on in memory until its last close
// (openFile.lastAttr), a directory the kernel holds too (removedAttr);
// anything else is stale.
func (n *node) gone() (store.Inode, error) {
	if a, ok := n.f.core.OpenAttr(n.Ino()); ok {
		return a, nil
	}
	if n.told.Load() != nil {
		n.removed.Store(true) // inode numbers are never reused
		if a, ok := n.removedAttr(); ok {
			return a, nil
		}
	}
	return store.Inode{}, fmt.Errorf("inode %d is gone: %w", n.Ino(), syscall.ESTALE)
}

func (n *node) Setattr(ctx context.Context, fh gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.f.opts.ReadOnly {
		return syscall.EROFS
	}
	if n.removed.Load() {
		return n.setattrRemoved(in, out)
	}
	var c vfs.AttrChange
	c.Mode, c.HasMode = in.GetMode()
	c.Uid, c.HasUid = in.GetUID()
	c.Gid, c.HasGid = in.GetGID()
	atime, hasAtime := in.GetATime()
	mtime, hasMtime := in.GetMTime()
	c.Atime, c.HasAtime = clampedNano(atime), hasAtime
	c.Mtime, c.HasMtime = clampedNano(mtime), hasMtime
	if size, ok := in.GetSize(); ok {
		if err := n.f.core.Truncate(ctx, n, int64(size)); err != nil {
			return n.f.toErrno("truncate", err)
		}
		if c.Empty() {
			return n.Getattr(ctx, fh, out)
		}
	}
	a, kept, err := n.f.core.Setattr(ctx, n, c)
	if errors.Is(err, store.ErrNotFound) && n.told.Load() != nil && n.IsDir() {
		n.removed.Store(true) // removed by another mount
		return n.setattrRemoved(in, out)
	}
	if err != nil {
		return n.f.toErrno("setattr", err)
	}
	if !kept {
		out.SetTimeout(notKept)
	}
	n.answerAttr(a, &out.Attr)
	return 0
}

// setattrRemoved is Setattr of a directory removed while the kernel holds
// it: as on Linux the change is made to the inode its holders still have,
// here the attributes kept for them (removedAttr); nobody else can see it.
func (n *node) setattrRemoved(in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	p := n.told.Load()
	if p == nil {
		return syscall.ESTALE
	}
	a := *p
	if mode, ok := in.GetMode(); ok {
		a.Mode = mode & 0o7777
	}
	if uid, ok := in.GetUID(); ok {
		a.Uid = uid
	}
	if gid, ok := in.GetGID(); ok {
		a.Gid = gid
	}
	if atime, ok := in.GetATime(); ok {
		a.Atime = clampedNano(atime)
	}
	if mtime, ok := in.GetMTime(); ok {
		a.Mtime = clampedNano(mtime)
	}
	a.Ctime = time.Now().UnixNano()
	n.told.Store(&a)
	a.Nlink = 0
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
