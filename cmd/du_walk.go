package cmd

// esfs du's walk: GNU du's traversal (coreutils 9.1 src/du.c over
// gnulib's fts) replayed over a model of the tree, in which what du does
// not print nor need to tell apart (the files of a directory with one
// link) may come summed rather than one by one.

import (
	"bufio"
	"cmp"
	"math"
	"slices"

	"github.com/esfs/esfs/store"
)

// duNode is a file or a directory as du meets it.
type duNode struct {
	name  string // raw bytes: the name in its directory
	ino   uint64
	typ   store.FileType
	nlink uint32
	own   duSum // its own st_blocks and st_size

	// A directory's contents: kids are the entries known one by one, in
	// the order fts meets them (sortListing); rest sums the others,
	// files with one link that no other PATH names (so that none of them
	// can be met twice), which du neither prints nor tells apart.
	kids    []*duNode
	rest    duSum
	entries int64 // how many entries the directory lists, kids and rest
}

// duSum is what du adds up: 512-byte blocks, and bytes of apparent size.
type duSum struct{ blocks, bytes int64 }

func (s *duSum) add(o duSum) { s.blocks += o.blocks; s.bytes += o.bytes }

// The order in which fts reads a directory's entries (gnulib lib/fts.c,
// fts_build): readdir's, which through a mount is the store's
// (store.CompareNames), in batches of ftsMaxReaddirEntries; a batch of
// more than ftsInodeSortThreshold entries is sorted by inode number
// first (on any filesystem but tmpfs, NFS and CIFS: FUSE's included).
const (
	ftsMaxReaddirEntries  = 100000
	ftsInodeSortThreshold = 10000
)

// sortListing puts kids, the known entries of a directory that lists
// entries names, in the order fts meets them. Past ftsMaxReaddirEntries
// entries, where the batch an entry falls in depends on its rank among
// all names, kids must hold all of them. Two links of one file in one
// directory of more than ftsInodeSortThreshold entries have the same
// inode number, and qsort may put either first: esfs du puts the first
// name first.
func sortListing(kids []*duNode, entries int64) {
	byName := func(a, b *duNode) int { return store.CompareNames(a.name, b.name) }
	byIno := func(a, b *duNode) int { return cmp.Or(cmp.Compare(a.ino, b.ino), byName(a, b)) }
	switch {
	case entries <= ftsInodeSortThreshold:
		slices.SortFunc(kids, byName)
	case entries <= ftsMaxReaddirEntries:
		slices.SortFunc(kids, byIno)
	default:
		slices.SortFunc(kids, byName)
		for from := 0; from < len(kids); from += ftsMaxReaddirEntries {
			batch := kids[from:min(from+ftsMaxReaddirEntries, len(kids))]
			if len(batch) > ftsInodeSortThreshold {
				slices.SortFunc(batch, byIno)
			}
		}
	}
}

// duWalk is one invocation's walk over its PATH operands.
type duWalk struct {
	all, apparent bool
	maxDepth      int // math.MaxInt: no limit
	units         duUnits
	out           *bufio.Writer
	// seen are the inodes met, as du's hash of device and inode numbers:
	// files with several links always, everything with several PATHs
	// (hashAll), so that nothing is counted twice in one invocation.
	seen    map[uint64]bool
	hashAll bool
	total   duSum
}

func newDuWalk(o duOptions, out *bufio.Writer, operands int) *duWalk {
	depth := o.maxDepth
	if depth < 0 {
		depth = math.MaxInt
	}
	if o.summarize {
		depth = 0
	}
	return &duWalk{all: o.all, apparent: o.apparent, maxDepth: depth, units: o.units, out: out,
		seen: map[uint64]bool{}, hashAll: operands > 1}
}

// operand walks one PATH, shown as the user gave it.
func (w *duWalk) operand(n *duNode, shown string) {
	w.node(n, shown, 0)
}

// node walks n, met at path and level (0 for an operand), and returns
// what it adds to its directory; false if du skips it, met before.
func (w *duWalk) node(n *duNode, path string, level int) (duSum, bool) {
	if w.hashAll || n.typ != store.TypeDir && n.nlink > 1 {
		if w.seen[n.ino] {
			return duSum{}, false // a directory skipped with all it holds
		}
		w.seen[n.ino] = true
	}
	sum := n.own
	w.total.add(n.own)
	if n.typ != store.TypeDir {
		if w.all && level <= w.maxDepth || level == 0 {
			w.print(sum, path)
		}
		return sum, true
	}
	for _, k := range n.kids {
		s, _ := w.node(k, childPath(path, k.name), level+1)
		sum.add(s)
	}
	sum.add(n.rest)
	w.total.add(n.rest)
	if level <= w.maxDepth {
		w.print(sum, path)
	}
	return sum, true
}

// childPath is the path fts gives an entry of the directory at dir: no
// second slash after one that ends it ("/", or an operand "a/").
func childPath(dir, name string) string {
	if len(dir) > 0 && dir[len(dir)-1] == '/' {
		return dir + name
	}
	return dir + "/" + name
}

func (w *duWalk) size(s duSum) uint64 {
	if w.apparent {
		return uint64(max(s.bytes, 0))
	}
	return uint64(s.blocks) * 512
}

func (w *duWalk) print(s duSum, path string) {
	w.out.WriteString(w.units.format(w.size(s)))
	w.out.WriteByte('\t')
	w.out.WriteString(path)
	w.out.WriteByte('\n')
}

// printTotal is -c's line.
func (w *duWalk) printTotal() { w.print(w.total, "total") }
