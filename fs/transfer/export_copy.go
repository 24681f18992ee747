package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

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
		local := filepath.Join(ex.local, strings.TrimPrefix(d.Path, ex.src))
		if err := ex.entry(ctx, local, a); err != nil {
			return fmt.Errorf("%s: %v", d.Path, err)
		}
		if a.Type == store.TypeDir {
			dir := &exportDir{path: d.Path, local: local, attr: a}
			ex.dirs[d.Path] = dir
			ex.dirOrder = append(ex.dirOrder, dir)
			if parent != nil {
				parent.subdirs++
			}
		}
		ex.entries++
		ex.prog.Add(1, 0)
	}
	return nil
}

func (ex *exporter) entry(ctx context.Context, local string, a store.Inode) error {
	switch a.Type {
	case store.TypeDir:
		return os.Mkdir(local, 0o700) // finished last, by Export
	case store.TypeSymlink:
		if err := os.Symlink(a.Target, local); err != nil {
			return err
		}
		return ex.finish(local, a)

	case store.TypeFifo, store.TypeSocket, store.TypeCharDev, store.TypeBlockDev:
		return ex.special(local, a)
	}
	if first, ok := ex.links[a.Ino]; ok {
		return os.Link(first, local)
	}
	if a.Nlink > 1 {
		ex.links[a.Ino] = local
	}
	f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := ex.data(ctx, f, a); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(a.Size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return ex.finish(local, a)
}

// special makes a FIFO, a socket or a device. Only root may make devices:
// for anyone else each is named and counted, as cp -a does, and export
// fails once the rest is copied.
func (ex *exporter) special(local string, a store.Inode) error {
	if first, ok := ex.links[a.Ino]; ok {
		return os.Link(first, local)
	}
	mode := map[store.FileType]uint32{store.TypeFifo: unix.S_IFIFO, store.TypeSocket: unix.S_IFSOCK,
		store.TypeCharDev: unix.S_IFCHR, store.TypeBlockDev: unix.S_IFBLK}[a.Type]
	err := unix.Mknod(local, mode|0o600, int(a.Rdev))
	if errors.Is(err, unix.EPERM) && a.Type.IsDevice() {
		fmt.Fprintf(ex.o.warn(), "esfs export: %s: device %d:%d not made: only root can make devices\n", local, unix.Major(uint64(a.Rdev)), unix.Minor(uint64(a.Rdev)))
		ex.devicesSkipped++
		return nil
	}
	if err != nil {
		return err
	}
	if a.Nlink > 1 {
		ex.links[a.Ino] = local
	}
	return ex.finish(local, a)
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

// finish sets what creating the entry could not: owner, mode, extended
// attributes and times (in that order: chown clears setuid bits, and
// every change but the times moves ctime, which nobody can set).
func (ex *exporter) finish(local string, a store.Inode) error {
	if ex.root {
		if err := os.Lchown(local, int(a.Uid), int(a.Gid)); err != nil {
			return err
		}
	}
	if a.Type != store.TypeSymlink {
		if err := syscall.Chmod(local, a.Mode&0o7777); err != nil {
			return err
		}
	}
	for name, v := range a.Xattrs {
		if err := unix.Lsetxattr(local, name, v, 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
				fmt.Fprintf(ex.o.warn(), "esfs export: %s: extended attribute %s not kept: %v\n", local, name, err)
				continue
			}
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, local, ts, unix.AT_SYMLINK_NOFOLLOW)
}
