package transfer

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/store"
	"golang.org/x/sys/unix"
)

// entry writes the documents of one local entry, read through its
// descriptor: its inode (once per hard-linked file), its data chunks and
// its path document.
func (imp *Import) entry(le *localEntry) error {
	st, p, rel := &le.st, le.local, le.rel
	path := imp.dest
	if rel != "." {
		path = imp.dest + "/" + rel
	}
	if err := store.CheckPath(path); err != nil {
		return fmt.Errorf("%s: %v", p, err)
	}
	// The inode a create would make of it, with the local file's times,
	// size and link counts.
	e := vfs.Entry{Mode: st.Mode, Uid: st.Uid, Gid: st.Gid}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Type = store.TypeDir
		imp.stats.Dirs++
	case unix.S_IFLNK:
		buf := make([]byte, store.MaxPath+1)
		n, err := unix.Readlinkat(le.fd, "", buf) // the symlink le holds (O_PATH)
		if err != nil {
			return fmt.Errorf("%s: %v", p, err)
		}
		if n > store.MaxPath {
			return fmt.Errorf("%s: symlink target longer than %d bytes", p, store.MaxPath)
		}
		e.Type, e.Target = store.TypeSymlink, string(buf[:n])
		imp.stats.Symlinks++
	case unix.S_IFREG:
		if st.Size > store.MaxFileSize {
			return fmt.Errorf("%s: %d bytes, more than the largest file esfs stores (%d bytes)", p, st.Size, store.MaxFileSize)
		}
		e.Type = store.TypeFile
		imp.stats.Regular++
	case unix.S_IFIFO:
		e.Type = store.TypeFifo
		imp.stats.Special++
	case unix.S_IFSOCK:
		e.Type = store.TypeSocket
		imp.stats.Special++
	case unix.S_IFCHR, unix.S_IFBLK:
		e.Type = store.TypeCharDev
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			e.Type = store.TypeBlockDev
		}
		// FUSE carries device numbers in 32 bits (majors below 4096).
		if st.Rdev > 0xffffffff {
			fmt.Fprintf(imp.o.warn(), "esfs import: skipping %s: device %d:%d has a number FUSE cannot carry\n", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
			imp.stats.Skipped++
			imp.files++
			return nil
		}
		e.Rdev = uint32(st.Rdev)
		imp.stats.Special++
	default:
		return fmt.Errorf("%s: a file of unknown type %o", p, st.Mode&unix.S_IFMT)
	}
	// Directories were numbered by count, which met each before what it
	// holds: the number is its entries' Parents.
	a := vfs.NewInode(e, imp.dirInos[relDir(rel)], unix.TimespecToNsec(st.Ctim))
	a.Atime, a.Mtime = unix.TimespecToNsec(st.Atim), unix.TimespecToNsec(st.Mtim)
	switch a.Type {
	case store.TypeDir:
		if ino, ok := imp.dirInos[rel]; ok {
			a.Ino = ino
		} else {
			imp.dirInos[rel] = a.Ino // made since count (sameSubdirs fails the import)
		}
		a.Nlink = vfs.DirLinks(imp.subdirs[rel])
		if rel != "." {
			imp.walked[relDir(rel)]++
		}
	case store.TypeFile:
		a.Size = st.Size
	}
	xattrs, err := readXattrs(le.node, imp.o.AllXattrs, imp.xattrsOut)
	if err != nil {
		return fmt.Errorf("%s: extended attributes: %v", p, err)
	}
	a.Xattrs = xattrs
	writeInode := true
	if a.Type != store.TypeDir && st.Nlink > 1 {
		l := imp.links[devIno{uint64(st.Dev), st.Ino}]
		if l == nil {
			return fmt.Errorf("%s: a hard link that appeared during the import", p)
		}
		a.Ino, a.Nlink, a.Parents = l.ino, l.count, l.dirs
		writeInode, l.done = !l.done, true
	}
	if writeInode {
		if a.Type == store.TypeFile {
			if a.Chunks, err = imp.data(le.file, a.Ino, st.Size); err != nil {
				return err
			}
		}
		o := store.CreateInode(a)
		if err := o.Err(); err != nil {
			return err
		}
		imp.add(o, 512+len(a.Target))
	}
	imp.files++
	if path == imp.dest {
		imp.root = a.Ino // its path document is written last
		return nil
	}
	o := store.CreateDentry(vfs.NewDentry(path, a))
	if err := o.Err(); err != nil {
		return err
	}
	imp.add(o, 256+2*len(path))
	return nil
}

// data queues the chunks of file f, reading it a chunk at a time. Holes
// the local filesystem knows of (SEEK_DATA) are skipped without reading
// them, so a sparse file costs what it holds, not its size.
// It returns how many chunks it queued.
func (imp *Import) data(f *os.File, ino uint64, size int64) (chunks int64, err error) {
	p := f.Name()
	for n := int64(0); n*imp.chunk < size; n++ {
		if next, ok := nextData(f, n*imp.chunk); ok {
			if next >= size {
				break
			}
			n = max(n, next/imp.chunk)
		}
		buf := make([]byte, min(imp.chunk, size-n*imp.chunk)) // the op keeps it until the batch is sent
		k, err := f.ReadAt(buf, n*imp.chunk)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%s: %v", p, err)
		}
		if k == 0 {
			break // the file shrank while we read it
		}
		// The progress counts the chunk's data as count did, stored or not.
		imp.bytes += dataIn(f, n*imp.chunk, n*imp.chunk+int64(k))
		if isZero(buf[:k]) {
			continue // a hole: absent chunks read as zeros
		}
		o := store.WriteChunk(ino, n, buf[:k], imp.stamp)
		if err := o.Err(); err != nil {
			return 0, err
		}
		chunks++
		imp.add(o, k*4/3+128)
	}
	return chunks, nil
}

// nextData returns the offset of the first data at or after off in f
// (past its end when there is none), and false when the filesystem cannot
// tell (then every chunk is read).
func nextData(f *os.File, off int64) (int64, bool) {
	next, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	switch {
	case err == nil:
		return next, true
	case errors.Is(err, unix.ENXIO):
		return math.MaxInt64, true
	}
	return 0, false
}

// dataIn returns how many bytes of [from, to) in f are data, not holes,
// by SEEK_DATA and SEEK_HOLE (all of them where the filesystem cannot
// tell, as data then reads every chunk).
func dataIn(f *os.File, from, to int64) int64 {
	fd := int(f.Fd())
	var n int64
	for off := from; off < to; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // holes to the end
		}
		if err != nil {
			return n + to - off
		}
		if d >= to {
			break
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			return n + to - d
		}
		h = min(h, to)
		n += h - d
		off = h
	}
	return n
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
