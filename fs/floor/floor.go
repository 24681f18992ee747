// Package floor is a benchmark baseline: a filesystem that costs nothing
// but FUSE itself, mounted with the kernel options of an esfs mount.
package floor

import (
	"context"
	"fmt"
	"log"
	"sort"
	"syscall"

	"github.com/esfs/esfs/fs"
	"github.com/esfs/esfs/fs/vfs"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Floor is an in-memory, read-only filesystem mounted with the kernel
// options of an esfs mount. It reaches no cluster and does no work, so the
// time a tool spends on it is what FUSE and go-fuse themselves cost: the
// floor that benchmarks measure esfs against.
type Floor struct {
	srv *fuse.Server
}

// Mount mounts a Floor at mountpoint with o's kernel options. dirs
// maps the name of each directory below the root to the names of the empty
// files it holds.
func Mount(mountpoint string, o vfs.Options, dirs map[string][]string) (*Floor, error) {
	o.ReadOnly = true
	root := &floorDir{}
	next := uint64(2)
	for name, files := range dirs {
		d := &floorDir{ino: next}
		next++
		d.names = append([]string(nil), files...)
		sort.Strings(d.names)
		d.index = make(map[string]uint64, len(files))
		for _, f := range d.names {
			d.index[f] = next
			next++
		}
		root.dirs = append(root.dirs, floorChild{name, d})
	}
	sort.Slice(root.dirs, func(i, j int) bool { return root.dirs[i].name < root.dirs[j].name })
	srv, err := gofs.Mount(mountpoint, root, fs.MountOptions(o, log.New(discard{}, "", 0)))
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", mountpoint, err)
	}
	return &Floor{srv: srv}, nil
}

// Unmount unmounts the floor and waits until it stopped serving.
func (f *Floor) Unmount() error {
	err := f.srv.Unmount()
	if err == nil {
		f.srv.Wait()
	}
	return err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

type floorChild struct {
	name string
	dir  *floorDir
}

type floorDir struct {
	gofs.Inode
	ino   uint64
	dirs  []floorChild      // the root's subdirectories
	names []string          // files, sorted
	index map[string]uint64 // file name -> ino
}

var (
	_ gofs.NodeLookuper  = (*floorDir)(nil)
	_ gofs.NodeReaddirer = (*floorDir)(nil)
	_ gofs.NodeGetattrer = (*floorDir)(nil)
)

func floorAttr(out *fuse.Attr, ino uint64, mode uint32) {
	out.Ino, out.Mode, out.Nlink = ino, mode, 1
	if mode&syscall.S_IFDIR != 0 {
		out.Nlink = 2
	}
}

func (d *floorDir) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	floorAttr(&out.Attr, max(d.ino, 1), syscall.S_IFDIR|0o755)
	return 0
}

func (d *floorDir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	for _, c := range d.dirs {
		if c.name == name {
			floorAttr(&out.Attr, c.dir.ino, syscall.S_IFDIR|0o755)
			if ch := d.GetChild(name); ch != nil {
				return ch, 0
			}
			return d.NewInode(ctx, c.dir, gofs.StableAttr{Mode: syscall.S_IFDIR, Ino: c.dir.ino}), 0
		}
	}
	ino, ok := d.index[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	floorAttr(&out.Attr, ino, syscall.S_IFREG|0o644)
	return d.NewInode(ctx, &floorFile{ino: ino}, gofs.StableAttr{Mode: syscall.S_IFREG, Ino: ino}), 0
}

func (d *floorDir) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	es := make([]fuse.DirEntry, 0, len(d.dirs)+len(d.names))
	for _, c := range d.dirs {
		es = append(es, fuse.DirEntry{Name: c.name, Ino: c.dir.ino, Mode: syscall.S_IFDIR})
	}
	for _, n := range d.names {
		es = append(es, fuse.DirEntry{Name: n, Ino: d.index[n], Mode: syscall.S_IFREG})
	}
	return gofs.NewListDirStream(es), 0
}

type floorFile struct {
	gofs.Inode
	ino uint64
}

var _ gofs.NodeGetattrer = (*floorFile)(nil)

func (f *floorFile) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	floorAttr(&out.Attr, f.ino, syscall.S_IFREG|0o644)
	return 0
}
