package transfer

// The local side of a transfer is reached through descriptors, never by
// path. Import and export often run as root on a tree, or into a
// directory, that another user owns and may change while they run: a name
// checked and then used again can by then be a symlink to a file only
// root may read (import would copy it), or to a directory only root may
// write (export would write there). So every entry is opened once,
// relative to its directory's descriptor, without following a symlink
// (O_NOFOLLOW), its descriptor's fstat is compared with what was checked,
// and everything else (data, extended attributes, owner, mode, times) is
// read and set through that descriptor. A symlink, FIFO, socket or device
// is held by an O_PATH descriptor, which opens nothing; its attributes are
// reached through /proc/self/fd, which names the file the descriptor
// holds and no path.

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// node is an open local file, held by a descriptor that was opened
// without following a symlink. opath: held by an O_PATH descriptor (a
// symlink, FIFO, socket or device), which cannot be read, written or
// passed to the f* calls.
type node struct {
	fd    int
	opath bool
}

// proc names the file n holds (what glibc's fchmodat and libselinux do for
// O_PATH descriptors): a call that follows it reaches that file itself,
// a symlink included, never what a symlink points to.
func (n node) proc() string { return "/proc/self/fd/" + strconv.Itoa(n.fd) }

func (n node) listxattr(buf []byte) (int, error) {
	if n.opath {
		return unix.Listxattr(n.proc(), buf)
	}
	return unix.Flistxattr(n.fd, buf)
}

func (n node) getxattr(name string, buf []byte) (int, error) {
	if n.opath {
		return unix.Getxattr(n.proc(), name, buf)
	}
	return unix.Fgetxattr(n.fd, name, buf)
}

func (n node) setxattr(name string, v []byte) error {
	if n.opath {
		return unix.Setxattr(n.proc(), name, v, 0)
	}
	return unix.Fsetxattr(n.fd, name, v, 0)
}

func (n node) chown(uid, gid uint32) error {
	return unix.Fchownat(n.fd, "", int(uid), int(gid), unix.AT_EMPTY_PATH)
}

func (n node) chmod(mode uint32) error {
	if n.opath {
		return unix.Chmod(n.proc(), mode)
	}
	return unix.Fchmod(n.fd, mode)
}

// setTimes sets n's times through /proc/self/fd, as x/sys's Futimes does:
// utimensat takes no descriptor alone (glibc's futimens passes a NULL
// path, which x/sys cannot), and this also reaches what an O_PATH
// descriptor holds.
func (n node) setTimes(atime, mtime int64) error {
	ts := []unix.Timespec{unix.NsecToTimespec(atime), unix.NsecToTimespec(mtime)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, n.proc(), ts, 0)
}

func (n node) close() { unix.Close(n.fd) }

// openFlags are the flags an entry of type typ (S_IFMT bits) is opened
// with: directories and regular files to be read, anything else O_PATH.
// A regular file is opened O_NONBLOCK, so that a FIFO put in its place
// does not block the open until the descriptor is found to be the wrong
// file.
func openFlags(typ uint32) int {
	flags := unix.O_NOFOLLOW | unix.O_CLOEXEC
	switch typ {
	case unix.S_IFDIR:
		return flags | unix.O_RDONLY | unix.O_DIRECTORY
	case unix.S_IFREG:
		return flags | unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY
	}
	return flags | unix.O_PATH
}

// openChecked opens name in directory dfd as what was checked (listed, by
// an fstatat that did not follow a symlink), and returns the descriptor's
// fstat. A name that now holds another file, a symlink among them, is an
// error that says so: it is never followed.
func openChecked(dfd int, name, local string, checked *unix.Stat_t, during string) (node, unix.Stat_t, error) {
	typ := checked.Mode & unix.S_IFMT
	var st unix.Stat_t
	fd, err := unix.Openat(dfd, name, openFlags(typ), 0)
	switch {
	case errors.Is(err, unix.ELOOP) || (errors.Is(err, unix.ENOTDIR) && typ == unix.S_IFDIR):
		// O_NOFOLLOW found a symlink (O_DIRECTORY says ENOTDIR for one).
		return node{}, st, replaced(local, during, checked.Mode, "listed", nowAt(dfd, name))
	case errors.Is(err, unix.ENOENT):
		return node{}, st, fmt.Errorf("%s: removed %s", local, during)
	case err != nil:
		return node{}, st, fmt.Errorf("%s: %v", local, err)
	}
	n := node{fd: fd, opath: openFlags(typ)&unix.O_PATH != 0}
	if err := unix.Fstat(fd, &st); err != nil {
		n.close()
		return node{}, st, fmt.Errorf("%s: %v", local, err)
	}
	if !sameFile(&st, checked) {
		n.close()
		what := "another " + typeName(st.Mode)
		if st.Mode&unix.S_IFMT != typ {
			what = "a " + typeName(st.Mode)
		}
		return node{}, st, replaced(local, during, checked.Mode, "listed", what)
	}
	return n, st, nil
}

// sameFile: a and b are one file (device and inode) of one type.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Mode&unix.S_IFMT == b.Mode&unix.S_IFMT
}

// replaced is the error of a name that no longer holds the file checked
// or made: "a regular file when listed, a symlink when opened".
func replaced(local, during string, was uint32, when, now string) error {
	return fmt.Errorf("%s: replaced %s (a %s when %s, %s when opened); not followed", local, during, typeName(was), when, now)
}

// nowAt describes what name in dfd is now, for replaced.
func nowAt(dfd int, name string) string {
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "gone"
	}
	return "a " + typeName(st.Mode)
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	}
	return fmt.Sprintf("file of type %o", mode&unix.S_IFMT)
}

// Extended attributes are copied by namespace. user.* and trusted.* are
// data a mount stores and serves (trusted.* to root); security.* grants
// or labels (file capabilities, SELinux labels, IMA and EVM) and system.*
// holds ACLs, which the kernel enforces: esfs enforces neither, so a mount
// refuses them, and import and export copy them only when asked
// (Options.AllXattrs): otherwise an export as root would set whatever
// security.capability the index holds. cp --preserve=xattr and rsync -X
// (as root) copy every namespace but the ACLs (cp: with the mode, rsync:
// -A) and, for cp, SELinux labels (--preserve=context); GNU tar restores
// only user.* unless told more.

// xattrCopied reports whether the extended attribute name is copied.
func xattrCopied(name string, all bool) bool {
	return all || strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "trusted.")
}

// xattrsLeft counts the extended attributes not copied, by namespace.
type xattrsLeft map[string]int64

func (l xattrsLeft) add(name string) {
	ns, _, _ := strings.Cut(name, ".")
	l[ns+".*"]++
}

// line is the warning that names what was left out, or "" if nothing was.
func (l xattrsLeft) line(cmd string) string {
	if len(l) == 0 {
		return ""
	}
	var total int64
	parts := make([]string, 0, len(l))
	for ns, n := range l {
		total += n
		parts = append(parts, fmt.Sprintf("%s %d", ns, n))
	}
	sort.Strings(parts)
	return fmt.Sprintf("esfs %s: %d extended attributes outside user.* and trusted.* not copied (%s); --all-xattrs copies them", cmd, total, strings.Join(parts, ", "))
}

// readXattrs returns the extended attributes of n that are copied (all:
// every namespace), and counts the others in left; none where the local
// filesystem has no xattr support.
func readXattrs(n node, all bool, left xattrsLeft) (map[string][]byte, error) {
	names, err := listXattrs(n)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, name := range names {
		if !xattrCopied(name, all) {
			left.add(name)
			continue
		}
		v, err := sized(func(buf []byte) (int, error) { return n.getxattr(name, buf) })
		if errors.Is(err, unix.ENODATA) {
			continue // removed since listed
		}
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func listXattrs(n node) ([]string, error) {
	buf, err := sized(n.listxattr)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var names []string
	for _, name := range strings.Split(string(buf), "\x00") {
		if name != "" {
			names = append(names, name)
		}
	}
	return names, nil
}

// sized calls get for the size of a list or value and again to read it,
// a few times if it grows in between (ERANGE).
func sized(get func(buf []byte) (int, error)) ([]byte, error) {
	for tries := 0; ; tries++ {
		sz, err := get(nil)
		if err != nil {
			return nil, err
		}
		if sz == 0 {
			return []byte{}, nil // an empty value is a value
		}
		buf := make([]byte, sz)
		sz, err = get(buf)
		if errors.Is(err, unix.ERANGE) && tries < 4 {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:sz], nil
	}
}
