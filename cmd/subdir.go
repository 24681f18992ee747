package cmd

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// Mounting a subdirectory (--subdir): the mount's root is that directory of
// the filesystem. The daemon still works on stored paths (vfs.Options.Root
// is the prefix of every path it asks about), so locks, logs and
// `esfs locks` show full stored paths, the same on every mount.

// subdirPath checks the --subdir flag and returns the stored path it names
// ("/" for the whole filesystem). Harmless spellings are normalized (a
// trailing slash, "//", "/./"); a relative path and ".." are refused: the
// path is a path of the filesystem, not of this machine, and esfs follows
// no symlink and no ".." to find it.
func subdirPath(s string) (string, error) {
	if s == "" {
		return "/", nil
	}
	if !strings.HasPrefix(s, "/") {
		return "", usagef("--subdir %q: give the directory's path from the filesystem's root, such as /%s", s, s)
	}
	for _, c := range strings.Split(s, "/") {
		if c == ".." {
			return "", usagef("--subdir %q: no \"..\" in it; give the directory's own path from the filesystem's root", s)
		}
	}
	p := path.Clean(s)
	if err := store.CheckPath(p); err != nil {
		return "", usagef("--subdir %q: %v", s, err)
	}
	return p, nil
}

// subdirRoot looks up the directory at stored path p to be a mount's root
// (as the mount's lookups would find it, see vfs.FindRoot): it must exist
// and be a directory. The mount does not create it: a typing mistake
// would otherwise mount a new empty directory.
func subdirRoot(ctx context.Context, st *store.Store, co *locking.Coordinator, p string) (store.Dentry, error) {
	d, err := vfs.FindRoot(ctx, st, co, p)
	if errors.Is(err, store.ErrNotFound) {
		return store.Dentry{}, fmt.Errorf("no directory %s in filesystem %s: create it first (mkdir on a mount of the whole filesystem)", p, st.Prefix())
	}
	if err != nil {
		return store.Dentry{}, err
	}
	if d.Type != store.TypeDir {
		return store.Dentry{}, fmt.Errorf("%s in filesystem %s is a %s, not a directory: --subdir mounts a directory", p, st.Prefix(), d.Type)
	}
	return d, nil
}

// fsName is the mount's source in the mount table: "esfs:PREFIX" for the
// whole filesystem, "esfs:PREFIX:/SUBDIR" for a subdirectory (an index
// name cannot contain ':', so the two never clash).
func fsName(prefix, root string) string {
	if root == "/" {
		return "esfs:" + prefix
	}
	return "esfs:" + prefix + ":" + root
}

// subdirOfSource returns the directory of filesystem prefix that a mount
// whose mount-table source is source has as its root ("/" for the whole
// filesystem; ok false: it is no mount of that filesystem). See fsName.
func subdirOfSource(source, prefix string) (dir string, ok bool) {
	rest, ok := strings.CutPrefix(source, "esfs:"+prefix)
	switch {
	case !ok:
		return "", false
	case rest == "":
		return "/", true
	case strings.HasPrefix(rest, ":/"):
		return rest[1:], true
	}
	return "", false
}
