package fs

// Open directories: OPENDIR, READDIR(PLUS), SEEKDIR, RELEASEDIR, answered
// from the core's listing (vfs.Listing).

import (
	"context"
	"errors"
	"syscall"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is one open directory: the core's listing, and the entries
// the kernel has been given of it ("." and ".." first, at offsets that
// count entries).
type dirHandle struct {
	n *node
	// l is nil for a directory removed while the kernel held it, which
	// opens, as on Linux, and whose listing fails.
	l    *vfs.Listing
	page []store.Dentry
	pos  int    // next entry of page to return
	off  uint64 // offset of the next entry
	dots int    // "." and ".." returned so far
	eof  bool
}

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileLookuper)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if n.removed.Load() {
		n.opendirs.Add(1)
		return &dirHandle{n: n}, 0, 0
	}
	l, err := n.f.core.OpenDir(ctx, n, n.f.kernelNode(n.EmbeddedInode()))
	if err != nil {
		if n.noteRemoved(err) {
			n.opendirs.Add(1)
			return &dirHandle{n: n}, 0, 0
		}
		return nil, 0, n.f.toErrno("opendir", err)
	}
	n.opendirs.Add(1)
	return &dirHandle{n: n, l: l}, 0, 0
}

// noteRemoved records that err says this directory was removed
// (vfs.ErrRemoved): its attributes are answered as removedAttr says from
// now on. It reports whether the node is marked removed.
func (n *node) noteRemoved(err error) bool {
	if errors.Is(err, vfs.ErrRemoved) && n.told.Load() != nil {
		n.removed.Store(true) // inode numbers are never reused
	}
	return n.removed.Load()
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	defer d.n.inRequest()()
	f := d.n.f
	if d.l == nil || d.n.removed.Load() && d.off == 0 {
		// As Linux answers getdents of a removed directory (for a removal
		// through this mount the kernel answers so itself).
		return nil, syscall.ENOENT
	}
	if d.off == 0 {
		// Started before "." is returned: getdents of a directory removed
		// since it was opened fails at once (ENOENT), as on Linux.
		if err := d.fill(ctx); err != nil {
			return nil, f.toErrno("readdir", err)
		}
	}
	if d.dots < 2 {
		d.dots++
		d.off++
		name := "."
		if d.dots == 2 {
			name = ".."
		}
		return &fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: d.n.Ino(), Off: d.off}, 0
	}
	for d.pos >= len(d.page) {
		if d.eof {
			return nil, 0
		}
		if err := d.fill(ctx); err != nil {
			return nil, f.toErrno("readdir", err)
		}
	}
	e := d.page[d.pos]
	d.pos++
	d.off++
	return &fuse.DirEntry{Name: e.Name, Mode: TypeBits(e.Type), Ino: e.Ino, Off: d.off}, 0
}

// fill reads the listing's next page.
func (d *dirHandle) fill(ctx context.Context) error {
	page, err := d.l.Next(ctx)
	if err != nil {
		d.n.noteRemoved(err)
		return err
	}
	if page == nil {
		d.eof = true
	}
	d.page, d.pos = page, 0
	return nil
}

// Lookup serves readdirplus: the entry was just returned by Readdirent.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := d.n.f
	if d.l == nil {
		return d.n.Lookup(ctx, name, out)
	}
	if !d.l.Kept() {
		return nil, syscall.EAGAIN // the name alone: see below
	}
	sn, ok, err := d.l.Entry(ctx, name)
	if err != nil {
		return nil, f.toErrno("readdirplus", err)
	}
	if !ok {
		return d.n.Lookup(ctx, name, out)
	}
	kept, done := d.l.Tell(name, d.n.f.kernelNode(d.n.EmbeddedInode()))
	defer done()
	if !kept {
		uncached(out) // see node.Lookup
	}
	// newChild needs no deadline: it only registers the kernel's node.
	child, err := d.n.newChild(ctx, sn, out)
	if err != nil {
		f.toErrno("readdirplus", err)
		return nil, syscall.EAGAIN // the name alone, as below: its lookup fails
	}
	d.n.tellAttrs(child, name, sn.Ino, sn.Type, out)
	f.boundKept(out)
	if out.EntryTimeout() == notKept || out.AttrTimeout() == notKept {
		// The kernel would keep this answer for a jiffy (see notKept),
		// and go-fuse fills the entry in its buffer past timedFS's
		// reach: an error makes it send the name alone (node id 0),
		// which the kernel lists without keeping anything of it, and
		// its next use of the name is a LOOKUP.
		return nil, syscall.EAGAIN
	}
	return child, 0
}

// Seekdir restarts the listing and skips to entry off (offsets are entry
// positions: telldir returns the offset of the last entry read). A listing
// is in name order, so re-reading reaches the same entries unless the
// directory changed meanwhile, which POSIX leaves unspecified.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == d.off {
		return 0
	}
	if d.l != nil {
		d.l.Rewind()
	}
	d.page, d.pos, d.off, d.dots, d.eof = nil, 0, 0, 0, false
	for d.off < off {
		de, errno := d.Readdirent(ctx)
		if errno != 0 {
			return errno
		}
		if de == nil {
			break // past the end: the next read returns nothing
		}
	}
	return 0
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.n.opendirs.Add(-1)
	if d.l != nil {
		d.l.Close()
	}
}
