package campaign

// The model of the tree: what every mount must show. Apply is the one
// place that says what an operation does (Linux's answer, errno included);
// TestModelAgainstTmpfs holds it to a tmpfs.

import (
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/test/campaign/wire"
)

// Kind is an inode's type.
type Kind int

const (
	File Kind = iota
	Dir
	Symlink
	Fifo
)

var kindNames = [...]string{"file", "dir", "symlink", "fifo"}

func (k Kind) String() string { return kindNames[k] }

func (k Kind) ifmt() uint32 {
	return [...]uint32{unix.S_IFREG, unix.S_IFDIR, unix.S_IFLNK, unix.S_IFIFO}[k]
}

// Inode is one file of the model. Data is never changed in place (a
// State's copy shares it).
type Inode struct {
	ID     int
	Kind   Kind
	Mode   uint32 // permission bits
	Data   []byte
	Target string
	Xattr  map[string]string
	Links  int // of anything but a directory
	// Mtime is exact only while MtimeKnown: a write or an entry change
	// moves it to a time the model does not know.
	Mtime      int64
	MtimeKnown bool
	// DataUnknown: an outcome the checker could not settle left the
	// bytes unknown; they are not compared until a truncate to 0.
	DataUnknown bool
	// Unsure: an outcome the checker could not settle left its
	// attributes unknown; they are no longer compared.
	Unsure  bool
	Entries map[string]int // of a directory
}

// State is a whole tree. Inodes outlive their last link (an open
// descriptor may still reach them) and are never reused.
type State struct {
	Inodes map[int]*Inode
	Next   int
}

const rootID = 1

// NewState is an empty root directory.
func NewState() *State {
	s := &State{Inodes: map[int]*Inode{}, Next: rootID + 1}
	s.Inodes[rootID] = &Inode{ID: rootID, Kind: Dir, Mode: 0o755, Entries: map[string]int{}}
	return s
}

// Copy is a deep copy (bytes shared: they are never changed in place).
func (s *State) Copy() *State {
	c := &State{Inodes: make(map[int]*Inode, len(s.Inodes)), Next: s.Next}
	for id, in := range s.Inodes {
		n := *in
		if in.Xattr != nil {
			n.Xattr = make(map[string]string, len(in.Xattr))
			for k, v := range in.Xattr {
				n.Xattr[k] = v
			}
		}
		if in.Entries != nil {
			n.Entries = make(map[string]int, len(in.Entries))
			for k, v := range in.Entries {
				n.Entries[k] = v
			}
		}
		c.Inodes[id] = &n
	}
	return c
}

func split(p string) []string {
	if p == "" || p == "." {
		return nil
	}
	return strings.Split(p, "/")
}

// lookup resolves p without following a final symlink. Every symlink
// target in the campaign is an absolute path that does not exist, so one
// met on the way is ENOENT.
func (s *State) lookup(p string) (int, int) {
	id := rootID
	for _, name := range split(p) {
		in := s.Inodes[id]
		switch in.Kind {
		case Dir:
		case Symlink:
			return 0, int(unix.ENOENT)
		default:
			return 0, int(unix.ENOTDIR)
		}
		next, ok := in.Entries[name]
		if !ok {
			return 0, int(unix.ENOENT)
		}
		id = next
	}
	return id, 0
}

// follow is lookup for calls that follow a final symlink.
func (s *State) follow(p string) (*Inode, int) {
	id, e := s.lookup(p)
	if e != 0 {
		return nil, e
	}
	in := s.Inodes[id]
	if in.Kind == Symlink {
		return nil, int(unix.ENOENT)
	}
	return in, 0
}

// parent resolves the directory that holds (or would hold) p.
func (s *State) parent(p string) (*Inode, string, int) {
	dir, name := path.Split(p)
	dir = strings.TrimSuffix(dir, "/")
	id, e := s.lookup(dir)
	if e != 0 {
		return nil, "", e
	}
	d := s.Inodes[id]
	switch d.Kind {
	case Dir:
		return d, name, 0
	case Symlink:
		return nil, "", int(unix.ENOENT)
	}
	return nil, "", int(unix.ENOTDIR)
}

// Get is the inode at p, or nil.
func (s *State) Get(p string) *Inode {
	id, e := s.lookup(p)
	if e != 0 {
		return nil
	}
	return s.Inodes[id]
}

// Nlink is what stat must report.
func (s *State) Nlink(in *Inode) uint64 {
	if in.Kind != Dir {
		return uint64(in.Links)
	}
	n := uint64(2)
	for _, id := range in.Entries {
		if s.Inodes[id].Kind == Dir {
			n++
		}
	}
	return n
}

// Walk calls fn for every path below the root (parents first, names in
// order).
func (s *State) Walk(fn func(p string, in *Inode)) {
	var walk func(prefix string, d *Inode)
	walk = func(prefix string, d *Inode) {
		names := make([]string, 0, len(d.Entries))
		for n := range d.Entries {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			in := s.Inodes[d.Entries[n]]
			p := path.Join(prefix, n)
			fn(p, in)
			if in.Kind == Dir {
				walk(p, in)
			}
		}
	}
	walk("", s.Inodes[rootID])
}

// Paths lists the paths that name inode id.
func (s *State) Paths(id int) []string {
	var out []string
	s.Walk(func(p string, in *Inode) {
		if in.ID == id {
			out = append(out, p)
		}
	})
	return out
}

func (s *State) newInode(op *Op, kind Kind, mode uint32) *Inode {
	if op.NewID == 0 {
		op.NewID = s.Next
	}
	if op.NewID >= s.Next {
		s.Next = op.NewID + 1
	}
	in := &Inode{ID: op.NewID, Kind: kind, Mode: mode, Links: 1}
	if kind == Dir {
		in.Entries = map[string]int{}
	}
	s.Inodes[in.ID] = in
	return in
}

// touchDir: an entry of d changed, so its mtime did.
func touchDir(d *Inode) { d.MtimeKnown = false }

// writeAt returns data with b written at off (zeros between).
func writeAt(data []byte, off int64, b []byte) []byte {
	end := off + int64(len(b))
	n := int64(len(data))
	if end > n {
		n = end
	}
	out := make([]byte, n)
	copy(out, data)
	copy(out[off:], b)
	return out
}

func resize(data []byte, size int64) []byte {
	out := make([]byte, size)
	copy(out, data)
	return out
}

func (in *Inode) write(off int64, b []byte) {
	in.Data = writeAt(in.Data, off, b)
	in.MtimeKnown = false
}

// Apply does op to s as Linux would, and returns the errno it must
// answer (0: s changed as the call says). Operations through descriptors
// find their inode in op.Ino; checks change nothing and answer their
// errno here (what they must see is compared by the checker).
func (s *State) Apply(op *Op) int {
	const (
		ENOENT    = int(unix.ENOENT)
		EEXIST    = int(unix.EEXIST)
		EISDIR    = int(unix.EISDIR)
		ENOTDIR   = int(unix.ENOTDIR)
		ELOOP     = int(unix.ELOOP)
		EINVAL    = int(unix.EINVAL)
		ENOTEMPTY = int(unix.ENOTEMPTY)
		EPERM     = int(unix.EPERM)
		ENODATA   = int(unix.ENODATA)
		ENXIO     = int(unix.ENXIO)
	)
	switch op.Kind {
	case "create", "mkdir", "symlink", "mkfifo":
		d, name, e := s.parent(op.Path)
		if e != 0 {
			return e
		}
		if _, ok := d.Entries[name]; ok {
			return EEXIST
		}
		var in *Inode
		switch op.Kind {
		case "create":
			in = s.newInode(op, File, op.Mode)
			in.Data = wire.Pattern(op.Seq, 0, op.Len)
		case "mkdir":
			in = s.newInode(op, Dir, op.Mode)
		case "symlink":
			in = s.newInode(op, Symlink, 0o777)
			in.Target = op.Path2
		case "mkfifo":
			in = s.newInode(op, Fifo, op.Mode)
		}
		d.Entries[name] = in.ID
		touchDir(d)
		return 0
	case "write", "append", "open", "fsync", "fsyncdir", "read":
		id, e := s.lookup(op.Path)
		if e != 0 {
			return e
		}
		in := s.Inodes[id]
		switch {
		case in.Kind == Symlink:
			return ELOOP
		case in.Kind == Dir && (op.Kind == "write" || op.Kind == "append" || op.Kind == "open" && op.Mode == 0):
			return EISDIR
		case in.Kind == Dir && op.Kind == "read":
			return EISDIR // the open succeeds, the read fails
		case in.Kind != Dir && op.Kind == "open" && op.Mode != 0:
			return ENOTDIR
		case in.Kind == Fifo && (op.Kind == "write" || op.Kind == "append" || op.Kind == "open"):
			return ENXIO // O_WRONLY|O_NONBLOCK and no reader; the worker opens none
		case in.Kind == Fifo && (op.Kind == "fsync" || op.Kind == "fsyncdir"):
			return EINVAL
		case in.Kind == Fifo && op.Kind == "read":
			return int(unix.ESPIPE)
		}
		op.Ino = id
		switch op.Kind {
		case "write":
			in.write(op.Off, wire.Pattern(op.Seq, op.Off, op.Len))
		case "append":
			in.write(int64(len(in.Data)), wire.Pattern(op.Seq, op.Off, op.Len))
		}
		return 0
	case "truncate":
		id, e := s.lookup(op.Path)
		if e != 0 {
			return e
		}
		in := s.Inodes[id]
		switch in.Kind {
		case Symlink:
			return ENOENT
		case Dir:
			return EISDIR
		case Fifo:
			return EINVAL
		}
		op.Ino = id
		in.truncate(op.Len)
		return 0
	case "rename":
		return s.rename(op)
	case "link":
		id, e := s.lookup(op.Path)
		if e != 0 {
			return e
		}
		d, name, e := s.parent(op.Path2)
		if e != 0 {
			return e
		}
		if _, ok := d.Entries[name]; ok {
			return EEXIST
		}
		in := s.Inodes[id]
		if in.Kind == Dir {
			return EPERM
		}
		d.Entries[name] = id
		in.Links++
		touchDir(d)
		op.Ino = id
		return 0
	case "unlink", "rmdir":
		d, name, e := s.parent(op.Path)
		if e != 0 {
			return e
		}
		id, ok := d.Entries[name]
		if !ok {
			return ENOENT
		}
		in := s.Inodes[id]
		if op.Kind == "unlink" && in.Kind == Dir {
			return EISDIR
		}
		if op.Kind == "rmdir" {
			if in.Kind != Dir {
				return ENOTDIR
			}
			if len(in.Entries) > 0 {
				return ENOTEMPTY
			}
		}
		delete(d.Entries, name)
		in.Links--
		touchDir(d)
		op.Ino = id
		return 0
	case "chmod", "utimes", "setxattr", "removexattr":
		in, e := s.follow(op.Path)
		if e != 0 {
			return e
		}
		op.Ino = in.ID
		return in.setAttr(op)
	case "stat", "readdir":
		id, e := s.lookup(op.Path)
		if e != 0 {
			return e
		}
		if op.Kind == "readdir" && s.Inodes[id].Kind != Dir {
			return ENOTDIR
		}
		op.Ino = id
		return 0
	// Through a descriptor: the inode is op.Ino (which a replay without
	// the call that made it does not have).
	case "ftruncate", "fchmod", "fsetxattr", "flush", "zero", "bytes":
		if s.Inodes[op.Ino] == nil {
			return int(unix.EBADF)
		}
	}
	switch op.Kind {
	case "pwrite":
		// Written at close or fsync (Runner.flush): until then only the
		// descriptor sees it.
		return 0
	case "ftruncate":
		s.Inodes[op.Ino].truncate(op.Len)
		return 0
	case "fchmod", "fsetxattr":
		in := s.Inodes[op.Ino]
		return in.setAttr(op)
	case "flush":
		in := s.Inodes[op.Ino]
		for _, w := range op.Writes {
			in.write(w.Off, wire.Pattern(w.Seq, w.Off, w.Len))
		}
		return 0
	case "zero":
		// Not a call: bytes a failed call cut (see partialTruncate).
		s.Inodes[op.Ino].write(op.Off, make([]byte, op.Len))
		return 0
	case "bytes":
		// Not a call: what a failed flush left, in part (see mixedFlush).
		in := s.Inodes[op.Ino]
		in.Data = append([]byte(nil), op.Data...)
		in.MtimeKnown = false
		return 0
	case "fdfsync", "fstat", "pread", "close", "flock", "fcntl", "getlk", "dup":
		return 0
	}
	panic("model: unknown operation " + op.Kind)
}

func (in *Inode) truncate(size int64) {
	in.Data = resize(in.Data, size)
	in.MtimeKnown = false
	if size == 0 {
		in.DataUnknown = false
	}
}

func (in *Inode) setAttr(op *Op) int {
	switch op.Kind {
	case "chmod", "fchmod":
		in.Mode = op.Mode
	case "utimes":
		in.Mtime, in.MtimeKnown = op.Len, true
	case "setxattr", "fsetxattr":
		if in.Kind != File && in.Kind != Dir {
			return int(unix.EPERM)
		}
		if in.Xattr == nil {
			in.Xattr = map[string]string{}
		}
		in.Xattr[op.Name] = op.Value
	case "removexattr":
		if in.Kind != File && in.Kind != Dir {
			return int(unix.EPERM)
		}
		if _, ok := in.Xattr[op.Name]; !ok {
			return int(unix.ENODATA)
		}
		delete(in.Xattr, op.Name)
	}
	return 0
}

// isAncestor: a is b or a directory above it.
func isAncestor(a, b string) bool {
	return a == b || a == "" || strings.HasPrefix(b, a+"/")
}

// rename follows do_renameat2 and vfs_rename in the order they check.
func (s *State) rename(op *Op) int {
	od, oname, e := s.parent(op.Path)
	if e != 0 {
		return e
	}
	nd, nname, e := s.parent(op.Path2)
	if e != 0 {
		return e
	}
	oid, ok := od.Entries[oname]
	if !ok {
		return int(unix.ENOENT)
	}
	old := s.Inodes[oid]
	// The source must not be an ancestor of the target's directory.
	if old.Kind == Dir && isAncestor(op.Path, path.Dir(op.Path2)) && op.Path != op.Path2 {
		return int(unix.EINVAL)
	}
	nid, exists := nd.Entries[nname]
	// The target must not be an ancestor of the source's directory.
	if exists && isAncestor(op.Path2, path.Dir(op.Path)) && op.Path != op.Path2 && path.Dir(op.Path) != "." {
		return int(unix.ENOTEMPTY)
	}
	op.Ino = oid
	if exists && nid == oid {
		return 0 // the same file: nothing happens
	}
	if exists {
		victim := s.Inodes[nid]
		switch {
		case old.Kind == Dir && victim.Kind != Dir:
			return int(unix.ENOTDIR)
		case old.Kind != Dir && victim.Kind == Dir:
			return int(unix.EISDIR)
		case victim.Kind == Dir && len(victim.Entries) > 0:
			return int(unix.ENOTEMPTY)
		}
		victim.Links--
		op.Victim = nid
	}
	delete(od.Entries, oname)
	nd.Entries[nname] = oid
	touchDir(od)
	touchDir(nd)
	if old.Kind == Dir {
		old.MtimeKnown = false
	}
	return 0
}
