package campaign

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/esfs/esfs/test/campaign/wire"
)

// Op is one operation of a worker, as generated, dispatched and answered.
type Op struct {
	N     int64 // its number in the run
	Mount int
	Kind  string
	Path  string
	Path2 string
	FD    int // the model's descriptor, for operations through one
	Off   int64
	Len   int64
	Seq   int64
	Mode  uint32
	Name  string
	Value string
	Lock  string
	Seg   [2]int // the fcntl lock's segments, first and last
	// ReadOnly: an open for reading only (O_RDONLY).
	ReadOnly bool
	// Shape is the shape a "shape" operation runs (shapes.go).
	Shape string
	// NotSeenFrom is 1 + a mount whose look must not settle the
	// operation's unknown outcome if another's can: a shape checks that
	// mount's view after it.
	NotSeenFrom int

	// Filled by the model when it is applied.
	Ino    int // the inode it acted on
	NewID  int // the inode it made
	Victim int // the inode a rename replaced
	NewFD  int // the descriptor an open or a dup made
	// Writes are the descriptor's pending writes a flush (a close or an
	// fsync through it) lands.
	Writes []pwrite
	// Data is the file's bytes a "bytes" operation sets (see mixedFlush).
	Data []byte

	// The answer.
	Errno  int
	Failed string
	Resp   *wire.Resp
	Start  time.Time
	Took   time.Duration
}

type pwrite struct{ Off, Len, Seq int64 }

// isCheck: the operation changes nothing.
func (op *Op) isCheck() bool {
	switch op.Kind {
	case "stat", "read", "readdir", "fstat", "pread", "getlk":
		return true
	}
	return false
}

// throughFD: the operation names a descriptor, not a path.
func (op *Op) throughFD() bool {
	switch op.Kind {
	case "pwrite", "ftruncate", "fdfsync", "fchmod", "fsetxattr", "fstat", "pread", "close", "flock", "fcntl", "getlk", "dup":
		return true
	}
	return false
}

// opens: the worker opens (and closes) the file at Path for it, which
// ends the worker's fcntl locks on that file.
func (op *Op) opens() bool {
	switch op.Kind {
	case "write", "append", "fsync", "read":
		return true
	}
	return false
}

func (op *Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d m%d %s", op.N, op.Mount, op.Kind)
	if op.throughFD() {
		fmt.Fprintf(&b, " fd%d(ino%d)", op.FD, op.Ino)
	}
	if op.Path != "" {
		fmt.Fprintf(&b, " %s", op.Path)
	}
	if op.Path2 != "" {
		fmt.Fprintf(&b, " %s", op.Path2)
	}
	switch op.Kind {
	case "create", "write", "append", "pwrite":
		fmt.Fprintf(&b, " off=%d len=%d seq=%d", op.Off, op.Len, op.Seq)
	case "truncate", "ftruncate":
		fmt.Fprintf(&b, " size=%d", op.Len)
	case "chmod", "fchmod", "mkdir", "mkfifo":
		fmt.Fprintf(&b, " mode=%o", op.Mode)
	case "utimes":
		fmt.Fprintf(&b, " mtime=%d", op.Len)
	case "setxattr", "fsetxattr":
		fmt.Fprintf(&b, " %s=%s", op.Name, op.Value)
	case "removexattr":
		fmt.Fprintf(&b, " %s", op.Name)
	case "flock":
		fmt.Fprintf(&b, " %s", op.Lock)
	case "fcntl", "getlk":
		fmt.Fprintf(&b, " %s segs %d-%d", op.Lock, op.Seg[0], op.Seg[1])
	case "open":
		if op.Mode != 0 {
			b.WriteString(" (directory)")
		}
		if op.ReadOnly {
			b.WriteString(" (read-only)")
		}
	case "shape":
		fmt.Fprintf(&b, " %s", op.Shape)
	}
	return b.String()
}

// segBounds are the byte ranges fcntl locks take, by segment: [0,100),
// [100,200), [200,EOF).
var segBounds = [...]int64{0, 100, 200}

const nSegs = len(segBounds)

// req is the worker's request for op.
func (op *Op) req(fd int) *wire.Req {
	q := &wire.Req{ID: op.N, Op: op.Kind, Path: op.Path, Path2: op.Path2, FD: fd, Off: op.Off, Len: op.Len,
		Seq: op.Seq, Mode: op.Mode, Name: op.Name, Value: op.Value, Lock: op.Lock, ReadOnly: op.ReadOnly}
	if op.Kind == "fcntl" || op.Kind == "getlk" {
		q.Off = segBounds[op.Seg[0]]
		q.Len = 0
		if op.Seg[1] < nSegs-1 {
			q.Len = segBounds[op.Seg[1]+1] - q.Off
		}
	}
	if op.Kind == "fsyncdir" {
		q.Op = "fsync"
	}
	return q
}

// Footprint is what an operation touches: paths (a path conflicts with
// every path below or above it) and inodes. Operations whose footprints
// overlap run one after the other, so the model is exact for each.
type Footprint struct {
	Paths  []string
	Inodes []int
}

func (f *Footprint) overlaps(g *Footprint) bool {
	for _, p := range f.Paths {
		for _, q := range g.Paths {
			if isAncestor(p, q) || isAncestor(q, p) {
				return true
			}
		}
	}
	for _, a := range f.Inodes {
		for _, b := range g.Inodes {
			if a == b {
				return true
			}
		}
	}
	return false
}

func (f *Footprint) add(s *State, p string) {
	f.Paths = append(f.Paths, p)
	if in := s.Get(p); in != nil {
		f.addInode(s, in.ID)
	}
}

// addInode adds the inode and every path that names it (a hard link's
// other names see its changes).
func (f *Footprint) addInode(s *State, id int) {
	for _, x := range f.Inodes {
		if x == id {
			return
		}
	}
	f.Inodes = append(f.Inodes, id)
	if in := s.Inodes[id]; in != nil && in.Kind != Dir {
		f.Paths = append(f.Paths, s.Paths(id)...)
	}
}

func (f *Footprint) String() string {
	return fmt.Sprintf("paths %q inodes %v", f.Paths, f.Inodes)
}

// rootPath is how a footprint names the root directory: the ancestor of
// every path.
const rootPath = ""

func parentOf(p string) string {
	d := path.Dir(p)
	if d == "." {
		return rootPath
	}
	return d
}
