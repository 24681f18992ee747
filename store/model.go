package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits of the namespace, as Linux sets them.
const (
	MaxName = 255  // bytes in one name
	MaxPath = 4096 // bytes in a whole path, including the leading '/'
)

// MaxLinks is the most links a file may have (link answers EMLINK past
// it), and so the most entries its Parents may hold.
const MaxLinks = 65000

// RootIno is the inode number of "/", fixed so that mkfs is idempotent and
// every mount agrees on it. FUSE reserves 1 for the root too.
const RootIno uint64 = 1

// FileType is what a path names. The zero value is not a valid type.
type FileType uint8

const (
	TypeFile FileType = iota + 1
	TypeDir
	TypeSymlink
	// Special files hold no data: the kernel of the mount that opens one
	// does the work (a pipe, a socket, a device driver).
	TypeFifo
	TypeSocket
	TypeCharDev
	TypeBlockDev
)

// typeNames are the names stored in documents; never change one.
var typeNames = map[FileType]string{
	TypeFile: "file", TypeDir: "dir", TypeSymlink: "symlink",
	TypeFifo: "fifo", TypeSocket: "socket", TypeCharDev: "chardev", TypeBlockDev: "blockdev",
}

func (t FileType) String() string {
	if s, ok := typeNames[t]; ok {
		return s
	}
	return fmt.Sprintf("FileType(%d)", uint8(t))
}

// IsDevice reports whether t is a character or block device, which has an
// Rdev.
func (t FileType) IsDevice() bool { return t == TypeCharDev || t == TypeBlockDev }

func parseFileType(s string) (FileType, error) {
	for t, name := range typeNames {
		if name == s {
			return t, nil
		}
	}
	return 0, fmt.Errorf("unknown file type %q", s)
}

// Version identifies one state of one document: Elasticsearch's sequence
// number and primary term. A conditional write names the Version it read and
// fails with ErrConflict if the document moved on. The zero Version is "unknown".
type Version struct {
	SeqNo       int64
	PrimaryTerm int64
}

// Known reports whether v came from Elasticsearch (primary terms start at 1).
func (v Version) Known() bool { return v.PrimaryTerm > 0 }

// Role says which side of a rename an intent-marked path document is on.
type Role string

const (
	RoleNone Role = ""
	RoleSrc  Role = "src" // an old path, visible until the rename commits
	RoleDst  Role = "dst" // a new path, visible once the rename commits
	// RoleOvr marks an existing target that a rename replaces: it names
	// its old inode until the rename commits, NewIno afterwards.
	RoleOvr Role = "ovr"
)

// Intent marks a path document that an unfinished operation wrote or will
// remove; readers resolve it through the operation record (see locking/).
type Intent struct {
	Op      string
	Role    Role
	NewIno  uint64   // RoleOvr only
	NewType FileType // RoleOvr only
}

// Dentry is one path document: a name in a directory, pointing at an inode.
type Dentry struct {
	Path   string // absolute, "/" for the root, no trailing slash; raw bytes
	Parent string // Path's directory; "" for the root
	Name   string // last component; "" for the root
	Ino    uint64
	Type   FileType
	Intent Intent
	Ver    Version // of the path document, set by reads and writes
}

// Inode is one attribute document, shared by every path that links to it.
type Inode struct {
	Ino   uint64
	Type  FileType
	Mode  uint32 // permission bits, setuid/setgid/sticky; never the type bits
	Uid   uint32
	Gid   uint32
	Size  int64
	Nlink uint32 // a file's paths; a directory's: see DirLinksCounted
	Rdev  uint32 // a device's number as FUSE carries it: glibc's dev_t for majors < 4096
	// Times in nanoseconds since the Unix epoch, as the writing host saw them.
	Atime, Mtime, Ctime, Btime int64
	Target                     string            // symlink target, raw bytes
	Xattrs                     map[string][]byte // extended attributes, names with their namespace
	// Dgen is the last data generation allocated to a writer of the
	// file's chunks (see DataVersion); 0 for none yet.
	Dgen uint64
	// Chunks is how many data chunks a file stores (st_blocks), as its
	// writers counted them; -1 when unknown (a file from an older esfs).
	Chunks int64
	// Parents, of anything but a directory, are the directories that
	// hold its links, one entry per link (a directory twice if it holds
	// two): a file with one link has the one directory it is in. They
	// decide which directory's delegations a change of its attributes
	// recalls (HeldBy). Create, link, unlink and rename keep them, each in
	// the write of the inode it makes anyway (Linked, Unlinked,
	// MoveParent); fsck --repair sets them. Every entry is the directory
	// of a link of the file, but there may be fewer entries than links:
	// inodes made by an older esfs have none, and a link removed where
	// its directory is not known empties them. Even a wrong entry is
	// never unsafe: a mount caches a file's attributes under a
	// directory's delegation only when HeldBy names that directory and it
	// holds the file's name there, so the recall of HeldBy reaches every
	// mount that caches them.
	Parents []uint64
	// Keeper is the session of the mount that keeps a file whose last
	// link is gone because it has it open there (it deletes the inode at
	// its last close); "" for every inode with links. It is written with
	// the last link's drop, so that a keeper that dies first leaves
	// something that names it: the sweeper of any mount, and fsck
	// --repair, delete the inode once that session is dead, and leave it
	// alone while it lives.
	Keeper string
	// LinkSeq counts the changes of a directory's link count, and
	// LinkOps names the last of them (linkOpsKept, oldest first), each by
	// an id of its own (WithDirLinks): a writer whose count write had an
	// unknown outcome (its answer lost, refused, held) tells from them
	// whether it landed, whatever else changed the directory since
	// (DirLinksLanded). Other writes of the document keep them as read.
	LinkSeq uint64
	LinkOps []string
	Ver     Version // of the inode document
}

// Blocks is n's st_blocks, in 512-byte units, as every mount reports it
// and as esfs du sums it: the size rounded up to 512 bytes, and for a
// file whose chunks are counted no more than its stored chunks take, in
// whole chunks of chunkSize bytes (a sparse file takes fewer).
func (n Inode) Blocks(chunkSize int64) int64 {
	b := (n.Size + 511) / 512
	if n.Type == TypeFile && n.Chunks >= 0 {
		b = min(b, n.Chunks*chunkSize/512)
	}
	return b
}

// HeldBy returns the directory whose read delegations may hold n's
// attributes, as mounts cache them: a directory's own, a file's with one
// link the directory Parents name; 0 for none (several links, or none
// recorded). A change of n's attributes, written over n, recalls that
// directory's delegations first.
func (n Inode) HeldBy() uint64 {
	switch {
	case n.Type == TypeDir:
		return n.Ino
	case n.Nlink == 1 && len(n.Parents) == 1:
		return n.Parents[0]
	}
	return 0
}

// Linked is n with one more link, made in directory dir.
func (n Inode) Linked(dir uint64) Inode {
	n.Nlink++
	n.Keeper = ""
	if n.Type != TypeDir {
		n.Parents = append(n.Parents[:len(n.Parents):len(n.Parents)], dir)
	}
	return n
}

// Unlinked is n with one link less, removed from directory dir (0: not
// known, which forgets every directory: some may no longer be right).
func (n Inode) Unlinked(dir uint64) Inode {
	if n.Nlink > 0 {
		n.Nlink--
	}
	if n.Type == TypeDir {
		return n
	}
	if i := slices.Index(n.Parents, dir); i >= 0 && dir != 0 {
		n.Parents = slices.Delete(slices.Clone(n.Parents), i, i+1)
	} else if dir == 0 {
		n.Parents = nil
	}
	return n
}

// ParentMove is what a rename does to a file's Parents: one of its links
// went from directory From to directory To.
type ParentMove struct {
	Ino  uint64 `json:"ino"`
	From uint64 `json:"from"`
	To   uint64 `json:"to"`
}

// MoveParent returns n after the rename m moved one of its links: an
// entry From becomes To, or with one link, the one entry is To. ok is
// false when nothing changes (a directory, which has no Parents, a move
// applied already to a file with one link, or a link not recorded).
func (n Inode) MoveParent(m ParentMove) (Inode, bool) {
	switch i := slices.Index(n.Parents, m.From); {
	case n.Type == TypeDir || m.From == m.To:
		return n, false
	case n.Nlink == 1:
		if len(n.Parents) == 1 && n.Parents[0] == m.To {
			return n, false
		}
		n.Parents = []uint64{m.To}
	case i >= 0:
		n.Parents = slices.Clone(n.Parents)
		n.Parents[i] = m.To
	default:
		return n, false
	}
	return n, true
}

// DirLinksCounted reports whether a directory's Nlink counts its
// subdirectories: it is then 2 plus their number (its name, its ".", and
// each subdirectory's ".."), kept by mkdir, rmdir and renames, as on a
// local filesystem. Directories made before esfs counted them hold 1: they
// report 1 (as Linux filesystems without subdirectory counts do, which
// tells find(1) not to rely on the count) until esfs fsck --repair counts
// them, and mkdir and rmdir leave such a count alone.
func (n Inode) DirLinksCounted() bool { return n.Type == TypeDir && n.Nlink >= 2 }

// Node is a path joined with its inode: what a lookup returns.
type Node struct {
	Dentry
	Attr Inode
}

// DocID is the _id of the path document for path: base64url(sha256(path)).
// Paths can be 4096 bytes but _id is limited to 512, and a fixed-length hash
// also keeps ids free of characters that need escaping in URLs.
func DocID(path string) string {
	sum := sha256.Sum256([]byte(path))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func inodeID(ino uint64) string { return fmt.Sprintf("%d", ino) }

// ChunkID is the _id of chunk n of inode ino in the data index.
func chunkID(ino uint64, n int64) string { return fmt.Sprintf("%d.%d", ino, n) }

// CheckName validates one path component against Linux's rules: any byte but
// '/' and NUL, at most 255 bytes, and not "." or "..".
func CheckName(name string) error {
	switch {
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("name %q: %w", name, ErrInvalid)
	case len(name) > MaxName:
		return fmt.Errorf("name of %d bytes: %w: %w", len(name), ErrInvalid, ErrNameTooLong)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("name %q contains '/' or NUL: %w", name, ErrInvalid)
	}
	return nil
}

// ErrNameTooLong accompanies ErrInvalid when a name or path exceeds the limits,
// so that fs/ can answer ENAMETOOLONG rather than EINVAL.
var ErrNameTooLong = fmt.Errorf("name or path too long")

// CheckPath validates an absolute, clean path.
func CheckPath(path string) error {
	if path == "/" {
		return nil
	}
	if len(path) > MaxPath {
		return fmt.Errorf("path of %d bytes: %w: %w", len(path), ErrInvalid, ErrNameTooLong)
	}
	if !strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") {
		return fmt.Errorf("path %q is not absolute and clean: %w", path, ErrInvalid)
	}
	for _, c := range strings.Split(path[1:], "/") {
		if err := CheckName(c); err != nil {
			return err
		}
	}
	return nil
}

// Join returns the path of name inside dir.
func Join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// Split returns the directory and last component of a path; ("", "") for
// "/", and no directory for a path without a slash (esfs makes none; a
// damaged document may hold one).
func Split(path string) (dir, name string) {
	if path == "/" {
		return "", ""
	}
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path
	}
	if i == 0 {
		return "/", path[1:]
	}
	return path[:i], path[i+1:]
}

// IsWithin reports whether path is root or below it.
func IsWithin(path, root string) bool {
	if root == "/" || path == root {
		return true
	}
	return strings.HasPrefix(path, root) && len(path) > len(root) && path[len(root)] == '/'
}

// Names and paths are arbitrary bytes but JSON carries only UTF-8, and
// encoding/json silently turns invalid bytes into U+FFFD, so two different
// names could collide. encodeText maps any byte string to valid UTF-8,
// injectively and component by component (so prefixes and '/' survive):
//
//   - a byte that is not part of valid UTF-8 becomes U+10FF00+byte (>= U+10FF80);
//   - a valid rune that is itself in U+10FF00..U+10FFFF is preceded by the
//     escape rune U+10FF00;
//   - everything else is itself.
//
// Those runes are in a private-use plane that real names practically never
// use, so ordinary names are stored exactly as they are.
const (
	escBase = 0x10FF00
)

func needsEncoding(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n == 1) || r >= escBase {
			return true
		}
		i += n
	}
	return false
}

func encodeText(s string) string {
	if !needsEncoding(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			b.WriteRune(rune(escBase + int(s[i])))
		case r >= escBase:
			b.WriteRune(escBase)
			b.WriteRune(r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func decodeText(s string) (string, error) {
	if !needsEncoding(s) {
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == utf8.RuneError && n == 1:
			return "", fmt.Errorf("invalid UTF-8 in stored text: %w", ErrCorrupt)
		case r == escBase:
			if i >= len(s) {
				return "", fmt.Errorf("dangling escape in stored text: %w", ErrCorrupt)
			}
			r2, n2 := utf8.DecodeRuneInString(s[i:])
			i += n2
			b.WriteRune(r2)
		case r > escBase && r >= escBase+0x80:
			b.WriteByte(byte(r - escBase))
		default:
			b.WriteRune(r)
		}
	}
	return b.String(), nil
}

// CompareNames orders names as the path index sorts them, by their stored
// bytes (see encodeText), which is the order of every listing from the
// store: byte order for UTF-8 names, a byte that is not UTF-8 after every
// character. A listing served from memory must come in the same order, or
// two listings of one directory would differ for names that are not UTF-8.
func CompareNames(a, b string) int {
	if !needsEncoding(a) && !needsEncoding(b) {
		return strings.Compare(a, b)
	}
	return strings.Compare(encodeText(a), encodeText(b))
}

// NewIno picks an inode number no one uses: random 63-bit numbers, made
// unique by creating the inode document with op_type=create. No counter
// document, so creates on different mounts never contend.
func NewIno() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		ino := binary.LittleEndian.Uint64(b[:]) >> 1
		if ino > 1<<20 { // keep small numbers for fixed inodes like the root
			return ino
		}
	}
}
