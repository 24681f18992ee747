package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/esfs/esfs/store"
	"golang.org/x/sys/unix"
)

// page copies one page of the listing (in path order: parents first).
func (ex *exporter) page(ctx context.Context, ds []store.Dentry) error {
	if len(ds) == 0 {
		return nil
	}
	inos := make([]uint64, len(ds))
	for i, d := range ds {
		inos[i] = d.Ino
	}
	attrs, err := ex.st.GetInodes(ctx, inos)
	if err != nil {
		return err
	}
	for i, d := range ds {
		a, err := attrs[i].Inode, attrs[i].Err
		var parent *exportDir
		if d.Path == ex.src {
			ex.sawSrc = true
		} else if why, ok := ex.notCopied[d.Parent]; ok {
			// Left out with its directory, which was reported.
			if why == leftOutGone {
				ex.gone++
			} else {
				ex.uncopied++
			}
			ex.leaveOut(d, why)
			continue
		} else if parent = ex.dirs[d.Parent]; parent == nil {
			ex.problem(d, "its directory %s is not in the listing", d.Parent)
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			d, a, err = ex.recheck(ctx, d)
			var dis disagreement
			switch {
			case errors.Is(err, store.ErrNotFound):
				ex.vanished(d)
				continue
			case errors.As(err, &dis):
				ex.problem(d, "%v", err)
				continue
			case err != nil:
				return fmt.Errorf("%s: %w", d.Path, err)
			}
		} else if err != nil {
			ex.problem(d, "%v", err) // a damaged inode document
			continue
		}
		if a.Type != d.Type {
			ex.problem(d, "the path is a %s, its inode %d a %s", d.Type, a.Ino, a.Type)
			continue
		}
		at := exportAt{dir: parent, name: d.Name, local: filepath.Join(ex.local, strings.TrimPrefix(d.Path, ex.src))}
		if parent == nil {
			at.dir, at.name = ex.top, filepath.Base(ex.local) // SRC itself
		} else if err := store.CheckName(d.Name); err != nil {
			ex.problem(d, "%v", err) // the decoder checks names: never here
			continue
		}
		ex.trimDirs()
		made, err := ex.entry(ctx, at, a)
		if err != nil {
			return fmt.Errorf("%s: %v", d.Path, err)
		}
		if a.Type == store.TypeDir {
			made.path, made.attr = d.Path, a
			ex.dirs[d.Path] = made
			ex.dirOrder = append(ex.dirOrder, made)
			if parent != nil {
				parent.subdirs++
			}
		}
		ex.entries++
		ex.prog.Add(1, 0)
	}
	return nil
}

// exportAt is where an entry is made: name in directory dir, at local
// (for messages: nothing is opened by it).
type exportAt struct {
	dir   *exportDir
	name  string
	local string
}

// entry makes one entry, relative to its directory's descriptor and
// without following a symlink: a file is created O_EXCL|O_NOFOLLOW and
// filled and finished through its descriptor; a symlink, FIFO, socket or
// device is made and then held by an O_PATH descriptor, checked to be
// what was made, to be finished. A directory is made 0700 (finished last,
// by Export): it returns the directory, open.
func (ex *exporter) entry(ctx context.Context, at exportAt, a store.Inode) (*exportDir, error) {
	dfd, err := ex.dirFD(at.dir)
	if err != nil {
		return nil, err
	}
	switch a.Type {
	case store.TypeDir:
		return ex.mkdir(at, dfd)
	case store.TypeSymlink:
		if err := unix.Symlinkat(a.Target, dfd, at.name); err != nil {
			return nil, err
		}
		return nil, ex.finishMade(at, dfd, unix.S_IFLNK, a)
	case store.TypeFifo, store.TypeSocket, store.TypeCharDev, store.TypeBlockDev:
		return nil, ex.special(at, dfd, a)
	}
	if first, ok := ex.links[a.Ino]; ok {
		return nil, ex.link(first, at, dfd)
	}
	fd, err := unix.Openat(dfd, at.name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if a.Nlink > 1 {
		ex.links[a.Ino] = at
	}
	f := os.NewFile(uintptr(fd), at.local)
	defer f.Close()
	if err := ex.data(ctx, f, a); err != nil {
		return nil, err
	}
	if err := f.Truncate(a.Size); err != nil {
		return nil, err
	}
	return nil, ex.finish(node{fd: fd}, at.local, a)
}

// link makes a hard link at at of the file first made at first.
func (ex *exporter) link(first exportAt, at exportAt, dfd int) error {
	ffd, err := ex.dirFD(first.dir)
	if err != nil {
		return err
	}
	return unix.Linkat(ffd, first.name, dfd, at.name, 0) // 0: a symlink is linked, not followed
}

// special makes a FIFO, a socket or a device. Only root may make devices:
// for anyone else each is named and counted, as cp -a does, and export
// fails once the rest is copied.
func (ex *exporter) special(at exportAt, dfd int, a store.Inode) error {
	if first, ok := ex.links[a.Ino]; ok {
		return ex.link(first, at, dfd)
	}
	mode := map[store.FileType]uint32{store.TypeFifo: unix.S_IFIFO, store.TypeSocket: unix.S_IFSOCK,
		store.TypeCharDev: unix.S_IFCHR, store.TypeBlockDev: unix.S_IFBLK}[a.Type]
	err := unix.Mknodat(dfd, at.name, mode|0o600, int(a.Rdev))
	if errors.Is(err, unix.EPERM) && a.Type.IsDevice() {
		fmt.Fprintf(ex.o.warn(), "esfs export: %s: device %d:%d not made: only root can make devices\n", at.local, unix.Major(uint64(a.Rdev)), unix.Minor(uint64(a.Rdev)))
		ex.devicesSkipped++
		return nil
	}
	if err != nil {
		return err
	}
	if a.Nlink > 1 {
		ex.links[a.Ino] = at
	}
	return ex.finishMade(at, dfd, mode, a)
}

// finishMade finishes a symlink or special file just made, through an
// O_PATH descriptor of it: nobody else can write in the directories
// export makes until they are finished (0700), so it is the file made,
// but the descriptor is checked to hold a file of the type made anyway.
func (ex *exporter) finishMade(at exportAt, dfd int, typ uint32, a store.Inode) error {
	fd, err := unix.Openat(dfd, at.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	n := node{fd: fd, opath: true}
	defer n.close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != typ || int(st.Uid) != os.Geteuid() {
		return replaced(at.local, "during the export", typ, "made", fmt.Sprintf("a %s of uid %d", typeName(st.Mode), st.Uid))
	}
	return ex.finish(n, at.local, a)
}

// exportListed: a file of more chunks than this has its stored chunks
// listed by search instead of each read by number, so that a sparse file
// costs what it holds, not its size.
const exportListed = 64

// data copies the stored chunks of file a into f; holes stay holes.
func (ex *exporter) data(ctx context.Context, f *os.File, a store.Inode) error {
	if a.Size <= 0 {
		return nil
	}
	chunk := ex.st.ChunkSize()
	last := (a.Size - 1) / chunk
	copyChunks := func(nums []int64) error {
		for i := 0; i < len(nums); i += 8 {
			part := nums[i:min(i+8, len(nums))]
			chunks, _, err := ex.st.ReadChunks(ctx, a.Ino, part[0], part[len(part)-1])
			if err != nil {
				return err
			}
			for _, n := range part {
				data, ok := chunks[n]
				if !ok {
					continue // a hole
				}
				if rest := a.Size - n*chunk; int64(len(data)) > rest {
					data = data[:rest]
				}
				if _, err := f.WriteAt(data, n*chunk); err != nil {
					return err
				}
				ex.prog.Add(0, int64(len(data)))
			}
		}
		return nil
	}
	if last < exportListed {
		nums := make([]int64, 0, last+1)
		for n := int64(0); n <= last; n++ {
			nums = append(nums, n)
		}
		return copyChunks(nums)
	}
	if !ex.dataRefreshed {
		// Search is near-realtime: chunks written before the export began
		// must all be listed.
		if err := ex.st.Refresh(ctx, store.SearchedData); err != nil {
			return err
		}
		ex.dataRefreshed = true
	}
	for from := int64(0); from <= last; {
		nums, err := ex.st.StoredChunks(ctx, a.Ino, from, store.DefaultPageSize)
		if err != nil {
			return err
		}
		for len(nums) > 0 && nums[len(nums)-1] > last {
			nums = nums[:len(nums)-1] // leftovers past the end
		}
		if len(nums) == 0 {
			return nil
		}
		// Consecutive chunks are read eight per request; scattered ones
		// one per request.
		for i := 0; i < len(nums); {
			j := i + 1
			for j < len(nums) && j-i < 8 && nums[j] == nums[j-1]+1 {
				j++
			}
			if err := copyChunks(nums[i:j]); err != nil {
				return err
			}
			i = j
		}
		from = nums[len(nums)-1] + 1
	}
	return nil
}

// finish sets, through n, what creating the entry could not: owner,
// mode, extended attributes and times (in that order: chown clears setuid
// bits, and every change but the times moves ctime, which nobody can
// set). Only the attributes xattrCopied allows are set; the others are
// counted for a warning.
func (ex *exporter) finish(n node, local string, a store.Inode) error {
	if ex.root {
		if err := n.chown(a.Uid, a.Gid); err != nil {
			return err
		}
	}
	if a.Type != store.TypeSymlink {
		if err := n.chmod(a.Mode & 0o7777); err != nil {
			return err
		}
	}
	names := make([]string, 0, len(a.Xattrs))
	for name := range a.Xattrs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !xattrCopied(name, ex.o.AllXattrs) {
			ex.xattrsOut.add(name)
			continue
		}
		if err := n.setxattr(name, a.Xattrs[name]); err != nil {
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
				fmt.Fprintf(ex.o.warn(), "esfs export: %s: extended attribute %s not kept: %v\n", local, name, err)
				continue
			}
			return err
		}
	}
	return n.setTimes(a.Atime, a.Mtime)
}
