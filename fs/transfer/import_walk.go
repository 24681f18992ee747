package transfer

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// localEntry is one entry of the local tree import reads, open.
type localEntry struct {
	rel   string // below the tree's root, slash-separated; "." for the root
	local string // the path, for messages only: nothing is opened by it
	st    unix.Stat_t
	node  // O_RDONLY for a directory or regular file; O_PATH for the rest
	// file is the directory or regular file, for reading (nil for others).
	file *os.File
}

// walkLocal calls fn for root (an open directory, at local) and each
// entry below it, a directory before its entries and these in byte order
// of their names, as filepath.WalkDir. Nothing is opened by path: each
// entry is checked by an fstatat that does not follow a symlink and then
// opened relative to its directory's descriptor (openChecked), so that a
// name swapped for a symlink, or a directory swapped for a symlink to
// another one, fails the walk instead of being followed. The entry's
// descriptor is valid while fn runs (a directory's, also while its
// entries are walked).
func walkLocal(root *os.File, local string, fn func(e *localEntry) error) error {
	// A descriptor of its own: the listing moves its offset.
	fd, err := unix.Openat(int(root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%s: %v", local, err)
	}
	e := &localEntry{rel: ".", local: local, node: node{fd: fd}, file: os.NewFile(uintptr(fd), local)}
	defer e.file.Close()
	if err := unix.Fstat(fd, &e.st); err != nil {
		return fmt.Errorf("%s: %v", local, err)
	}
	return walkDir(e, fn)
}

func walkDir(dir *localEntry, fn func(e *localEntry) error) error {
	if err := fn(dir); err != nil {
		return err
	}
	names, err := dir.file.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("%s: %v", dir.local, err)
	}
	sort.Strings(names)
	for _, name := range names {
		e := &localEntry{rel: name, local: filepath.Join(dir.local, name)}
		if dir.rel != "." {
			e.rel = dir.rel + "/" + name
		}
		var checked unix.Stat_t
		if err := unix.Fstatat(dir.fd, name, &checked, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("%s: %v", e.local, err)
		}
		if testHookChecked != nil {
			testHookChecked(e.local)
		}
		e.node, e.st, err = openChecked(dir.fd, name, e.local, &checked, "during the import")
		if err != nil {
			return err
		}
		if !e.opath {
			e.file = os.NewFile(uintptr(e.fd), e.local)
		}
		if e.st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = walkDir(e, fn)
		} else {
			err = fn(e)
		}
		if e.file != nil {
			e.file.Close()
		} else {
			e.close()
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// testHookChecked, when set by a test, runs between the check of an entry
// and its open: where another user's swap must be caught.
var testHookChecked func(local string)

// relDir is the directory of rel ("." for an entry of the root).
func relDir(rel string) string {
	return filepath.Dir(rel)
}
