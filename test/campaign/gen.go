package campaign

import (
	"fmt"
	"math/rand"
	"path"
)

// names is the namespace: few enough that operations collide.
var names = []string{"a", "b", "c", "d", "e", "f", "g", "h"}

// maxDepth bounds how deep the tree grows (renames of directories move
// whole subtrees; deeper ones are not generated).
const maxDepth = 3

// weights of the operations the generator picks from.
var weights = []struct {
	kind string
	w    int
}{
	{"create", 10}, {"mkdir", 6}, {"symlink", 2}, {"mkfifo", 1},
	{"write", 10}, {"append", 6}, {"truncate", 4},
	{"rename", 10}, {"link", 3}, {"unlink", 6}, {"rmdir", 4},
	{"chmod", 3}, {"utimes", 2}, {"setxattr", 3}, {"removexattr", 2},
	{"fsync", 3}, {"fsyncdir", 2},
	{"open", 5}, {"pwrite", 6}, {"ftruncate", 2}, {"fdfsync", 2}, {"fchmod", 1}, {"fsetxattr", 1},
	{"fstat", 2}, {"pread", 2}, {"close", 3}, {"flock", 4}, {"fcntl", 4}, {"getlk", 2}, {"dup", 1},
	{"stat", 10}, {"read", 8}, {"readdir", 6},
	{"shape", 4}, // several calls on one file, from two or three mounts at once (shapes.go)
}

var totalWeight = func() int {
	n := 0
	for _, w := range weights {
		n += w.w
	}
	return n
}()

// maxFDs is how many descriptors a worker keeps open at most.
const maxFDs = 4

func depth(p string) int {
	if p == rootPath {
		return 0
	}
	n := 1
	for _, c := range p {
		if c == '/' {
			n++
		}
	}
	return n
}

// genView is what the generator picks from: the model's paths by kind.
type genView struct {
	all, dirs, files []string
	home             string
}

func view(s *State, home string) genView {
	v := genView{dirs: []string{rootPath}, home: home}
	s.Walk(func(p string, in *Inode) {
		v.all = append(v.all, p)
		switch in.Kind {
		case Dir:
			v.dirs = append(v.dirs, p)
		case File:
			v.files = append(v.files, p)
		}
	})
	return v
}

// pick picks from list, mostly under the slot's home: the top-level
// name it mostly works under, so that a mount alone in a directory writes
// it in memory (write delegations), and the others come in often enough
// to recall it.
func (v genView) pick(rnd *rand.Rand, list []string) string {
	if len(list) == 0 {
		return rootPath
	}
	if rnd.Intn(10) < 6 {
		var mine []string
		for _, p := range list {
			if p != rootPath && isAncestor(v.home, p) {
				mine = append(mine, p)
			}
		}
		if len(mine) > 0 {
			return mine[rnd.Intn(len(mine))]
		}
	}
	return list[rnd.Intn(len(list))]
}

// newPath is a name in an existing directory not too deep, taken or not.
func (v genView) newPath(rnd *rand.Rand) string {
	var dirs []string
	for _, d := range v.dirs {
		if depth(d) < maxDepth {
			dirs = append(dirs, d)
		}
	}
	return path.Join(v.pick(rnd, dirs), names[rnd.Intn(len(names))])
}

// existing is mostly an existing path of the wanted list, sometimes any
// name (which may not exist, or be of another type).
func (v genView) existing(rnd *rand.Rand, list []string) string {
	if rnd.Intn(10) == 0 || len(list) == 0 {
		return v.newPath(rnd)
	}
	return v.pick(rnd, list)
}

func subtreeDepth(s *State, p string) int {
	in := s.Get(p)
	if in == nil || in.Kind != Dir {
		return 0
	}
	max := 0
	for n := range in.Entries {
		if d := 1 + subtreeDepth(s, path.Join(p, n)); d > max {
			max = d
		}
	}
	return max
}

var (
	fileModeChoices = []uint32{0o644, 0o600, 0o755, 0o640, 0o444, 0o664}
	dirModeChoices  = []uint32{0o755, 0o700, 0o775, 0o711}
	xattrNames      = []string{"user.a", "user.b", "user.c"}
)

// offset of a write: mostly in the first bytes, sometimes far (a hole,
// another 1 MiB chunk).
func offset(rnd *rand.Rand, size int64) int64 {
	switch r := rnd.Intn(20); {
	case r < 12:
		return rnd.Int63n(8 << 10)
	case r < 16 && size > 0:
		return rnd.Int63n(size + 1)
	case r < 19:
		return rnd.Int63n(64 << 10)
	}
	return rnd.Int63n(2500 << 10)
}

func length(rnd *rand.Rand) int64 {
	if rnd.Intn(10) == 0 {
		return 1 + rnd.Int63n(64<<10)
	}
	return 1 + rnd.Int63n(4096)
}

// generate picks the next operation of slot sl from the model as it is
// (r.mu held). The model may change before it runs: what it must answer
// is decided when it is dispatched.
func (r *Runner) generate(sl *slot) *Op {
	rnd := sl.rnd
	op := &Op{Mount: sl.idx}
	if len(sl.atRisk) > 40 {
		// Bound what a death can take back: fsync makes all of it durable.
		op.Kind, op.Path = "fsyncdir", rootPath
		return op
	}
	v := view(r.st, names[sl.idx%len(names)])
	myFDs := r.fdsOf(sl.idx)
	for {
		x := rnd.Intn(totalWeight)
		for _, w := range weights {
			if x < w.w {
				op.Kind = w.kind
				break
			}
			x -= w.w
		}
		if op.throughFD() && len(myFDs) == 0 {
			continue
		}
		if (op.Kind == "open" || op.Kind == "dup") && len(myFDs) >= maxFDs {
			op.Kind = "close"
		}
		if op.Kind == "shape" {
			if op.Shape = r.pickShape(sl); op.Shape == "" {
				continue
			}
		}
		break
	}
	if op.Kind == "shape" {
		return op
	}
	if op.throughFD() {
		fd := myFDs[rnd.Intn(len(myFDs))]
		op.FD = fd.ID
		if fd.Fifo {
			op.Kind = "close"
		}
		if fd.Dir {
			op.Kind = "fdfsync" // fsyncdir through a directory kept open
			if rnd.Intn(3) == 0 {
				op.Kind = "close"
			}
		}
		if fd.ReadOnly {
			// What a descriptor open for reading may do instead.
			switch op.Kind {
			case "pwrite":
				op.Kind = "pread"
			case "ftruncate":
				op.Kind = "fstat"
			}
		}
		in := r.st.Inodes[fd.Ino]
		switch op.Kind {
		case "pwrite":
			if r.pendingElsewhere(fd) {
				op.Kind = "fdfsync" // two mounts' unflushed writes to one file are not merged
				break
			}
			op.Len = length(rnd)
			op.Off = oneChunk(offset(rnd, int64(len(in.Data))), op.Len)
		case "ftruncate":
			if r.pending(fd.Ino) {
				op.Kind = "fdfsync"
				break
			}
			op.Len = truncSize(rnd, int64(len(in.Data)))
		case "fchmod":
			op.Mode = fileModeChoices[rnd.Intn(len(fileModeChoices))]
		case "fsetxattr":
			op.Name, op.Value = xattrNames[rnd.Intn(len(xattrNames))], fmt.Sprintf("v%d", rnd.Intn(1000))
		case "flock":
			if r.locks.heldFlock(r.ownerFlock(fd)) {
				op.Lock = "un"
			} else {
				op.Lock = []string{"sh", "ex"}[rnd.Intn(2)]
			}
		case "fcntl", "getlk":
			op.Lock = []string{"sh", "ex", "un"}[rnd.Intn(3)]
			if op.Kind == "getlk" {
				op.Lock = []string{"sh", "ex"}[rnd.Intn(2)]
			} else if fd.ReadOnly && op.Lock == "ex" {
				op.Lock = "sh" // a write lock needs a descriptor open for writing (EBADF)
			}
			a := rnd.Intn(nSegs)
			op.Seg = [2]int{a, a + rnd.Intn(nSegs-a)}
		}
		return op
	}
	switch op.Kind {
	case "create":
		op.Path, op.Mode, op.Len = v.newPath(rnd), fileModeChoices[rnd.Intn(len(fileModeChoices))], 0
		if rnd.Intn(3) > 0 {
			op.Len = length(rnd)
		}
	case "mkdir":
		op.Path, op.Mode = v.newPath(rnd), dirModeChoices[rnd.Intn(len(dirModeChoices))]
	case "symlink":
		op.Path, op.Path2 = v.newPath(rnd), fmt.Sprintf("/nonexistent/esfs-campaign/%d", rnd.Intn(1000))
	case "mkfifo":
		op.Path, op.Mode = v.newPath(rnd), 0o644
	case "write", "append", "truncate":
		op.Path = v.existing(rnd, v.files)
		in := r.st.Get(op.Path)
		if in != nil && r.pending(in.ID) {
			op.Kind = "stat" // unflushed writes of a descriptor: no other write meanwhile
			break
		}
		size := int64(0)
		if in != nil {
			size = int64(len(in.Data))
		}
		if op.Kind == "truncate" {
			op.Len = truncSize(rnd, size)
		} else {
			op.Len = length(rnd)
			if op.Kind == "write" {
				op.Off = offset(rnd, size)
			}
		}
	case "rename":
		if rnd.Intn(4) == 0 {
			op.Path = v.existing(rnd, v.dirs[1:])
		} else {
			op.Path = v.existing(rnd, v.all)
		}
		if rnd.Intn(3) == 0 {
			op.Path2 = v.existing(rnd, v.all) // over an existing target
		} else {
			op.Path2 = v.newPath(rnd)
		}
		if depth(op.Path2)+subtreeDepth(r.st, op.Path) > maxDepth {
			op.Kind, op.Path2 = "stat", ""
		}
	case "link":
		op.Path, op.Path2 = v.existing(rnd, v.files), v.newPath(rnd)
	case "unlink":
		op.Path = v.existing(rnd, v.all)
	case "rmdir":
		op.Path = v.existing(rnd, v.dirs[1:])
	case "chmod":
		op.Path = v.existing(rnd, v.all)
		if in := r.st.Get(op.Path); in != nil && in.Kind == Dir {
			op.Mode = dirModeChoices[rnd.Intn(len(dirModeChoices))]
		} else {
			op.Mode = fileModeChoices[rnd.Intn(len(fileModeChoices))]
		}
	case "utimes":
		op.Path = v.existing(rnd, v.all)
		op.Len = 1_600_000_000_000_000_000 + rnd.Int63n(100_000_000_000_000_000)
	case "setxattr", "removexattr":
		op.Path = v.existing(rnd, v.all)
		op.Name, op.Value = xattrNames[rnd.Intn(len(xattrNames))], fmt.Sprintf("v%d", rnd.Intn(1000))
		if op.Kind == "removexattr" {
			op.Value = ""
		}
	case "fsync":
		op.Path = v.existing(rnd, v.files)
	case "fsyncdir":
		op.Path = v.pick(rnd, v.dirs)
	case "open":
		if rnd.Intn(6) == 0 {
			op.Path, op.Mode = v.pick(rnd, v.dirs), 1
		} else {
			op.Path = v.existing(rnd, v.files)
		}
	case "stat":
		op.Path = v.existing(rnd, append(v.all, rootPath))
	case "read":
		op.Path = v.existing(rnd, v.files)
	case "readdir":
		op.Path = v.existing(rnd, v.dirs)
	}
	return op
}

// oneChunk moves a write of n bytes at off back into the 1 MiB chunk off
// falls in, if it would cross its end: a descriptor's write lands whole
// or not at all, as the checker of its failed flush assumes.
func oneChunk(off, n int64) int64 {
	const chunk = 1 << 20
	if end := (off/chunk + 1) * chunk; off+n > end {
		return end - n
	}
	return off
}

func truncSize(rnd *rand.Rand, size int64) int64 {
	switch rnd.Intn(6) {
	case 0:
		return 0
	case 1, 2:
		if size > 0 {
			return rnd.Int63n(size)
		}
		return 0
	case 3:
		return size + rnd.Int63n(8<<10)
	case 4:
		return rnd.Int63n(64 << 10)
	}
	return rnd.Int63n(2 << 20)
}
