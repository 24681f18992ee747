package fs

import (
	"context"
	"syscall"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle streams a directory page by page from the store: memory is one
// page whatever the size of the directory. For readdirplus it also answers
// the kernel's per-entry lookups from the page, with one mget of the page's
// inodes instead of two GETs per entry.
type dirHandle struct {
	n    *node
	path string

	// The bridge serializes calls on one handle; no lock needed.
	sc     *locking.Pages
	page   []store.Dentry
	pos    int    // next entry of page to return
	off    uint64 // offset of the next entry
	dots   int    // "." and ".." returned so far
	byName map[string]int
	inodes map[uint64]store.Inode // attributes of the page, loaded on demand
	eof    bool
}

var (
	_ = (gofs.FileReaddirenter)((*dirHandle)(nil))
	_ = (gofs.FileLookuper)((*dirHandle)(nil))
	_ = (gofs.FileSeekdirer)((*dirHandle)(nil))
	_ = (gofs.FileReleasedirer)((*dirHandle)(nil))
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	ctx, cancel := n.f.ctxOf(ctx)
	defer cancel()
	p, err := n.dirPath(ctx, false)
	if err != nil {
		return nil, 0, n.f.toErrno("opendir", err)
	}
	return &dirHandle{n: n, path: p}, 0, 0
}

func (d *dirHandle) start(ctx context.Context) error {
	// Read-your-writes: this mount's own creates must be listed, and search
	// is near-realtime. Refresh only if this mount wrote since the last one.
	if err := d.n.f.refreshIfDirty(ctx); err != nil {
		return err
	}
	d.sc = d.n.f.co.View.List(d.path, store.DefaultPageSize)
	return nil
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	f := d.n.f
	if d.dots < 2 {
		d.dots++
		d.off++
		name := "."
		if d.dots == 2 {
			name = ".."
		}
		return &fuse.DirEntry{Name: name, Mode: syscall.S_IFDIR, Ino: d.n.ino(), Off: d.off}, 0
	}
	if d.pos >= len(d.page) && !d.eof {
		// Only a new page goes to the store: the deadline (a timer) is
		// made here, not for each of the page's entries.
		var cancel context.CancelFunc
		ctx, cancel = f.ctxOf(ctx)
		defer cancel()
	}
	for d.pos >= len(d.page) {
		if d.eof {
			return nil, 0
		}
		if d.sc == nil {
			if err := d.start(ctx); err != nil {
				return nil, f.toErrno("readdir", err)
			}
		}
		page, bad, err := d.sc.Next(ctx)
		if err != nil {
			return nil, f.toErrno("readdir", err)
		}
		for _, b := range bad {
			f.log.Error("corrupt document skipped in listing", "dir", d.path, "err", b)
		}
		if page == nil {
			d.eof = true
			return nil, 0
		}
		d.page = append(d.page[:0], page...)
		d.pos = 0
		d.byName = make(map[string]int, len(d.page))
		for i, e := range d.page {
			d.byName[e.Name] = i
		}
		d.inodes = nil
	}
	e := d.page[d.pos]
	d.pos++
	d.off++
	return &fuse.DirEntry{Name: e.Name, Mode: typeBits(e.Type), Ino: e.Ino, Off: d.off}, 0
}

// Lookup serves readdirplus: the entry was just returned by Readdirent.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	f := d.n.f
	i, ok := d.byName[name]
	if !ok {
		return d.n.Lookup(ctx, name, out)
	}
	e := d.page[i]
	if d.inodes == nil {
		ctx, cancel := f.ctxOf(ctx)
		defer cancel()
		gen := f.cache.Gen()
		inos := make([]uint64, len(d.page))
		for k, de := range d.page {
			inos[k] = de.Ino
		}
		res, err := f.st.GetInodes(ctx, inos)
		if err != nil {
			return nil, f.toErrno("readdirplus", err)
		}
		d.inodes = make(map[uint64]store.Inode, len(res))
		for k, r := range res {
			if r.Err == nil {
				d.inodes[inos[k]] = r.Inode
				f.cache.PutNode(store.Node{Dentry: d.page[k], Attr: r.Inode}, gen)
			}
		}
	}
	a, ok := d.inodes[e.Ino]
	if !ok || a.Type != e.Type {
		// Missing or inconsistent inode: let the ordinary lookup report it.
		return d.n.Lookup(ctx, name, out)
	}
	// newChild needs no deadline: it only registers the kernel's node.
	return d.n.newChild(ctx, store.Node{Dentry: e, Attr: a}, out), 0
}

// Seekdir restarts the listing and skips to entry off (offsets are entry
// positions: telldir returns the offset of the last entry read). A listing
// is in name order, so re-reading reaches the same entries unless the
// directory changed meanwhile, which POSIX leaves unspecified.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off == d.off {
		return 0
	}
	d.Releasedir(ctx, 0)
	*d = dirHandle{n: d.n, path: d.path}
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
	if d.sc != nil {
		d.sc.Close()
	}
}
