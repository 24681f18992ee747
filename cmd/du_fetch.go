package cmd

// esfs du's reads: the model of a PATH's tree (duNode), from the store.

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// duBuilder builds the models of the operands of one invocation.
type duBuilder struct {
	st       *store.Store
	view     *locking.View
	all      bool
	maxDepth int
	// operands are the paths of all the PATHs when there are several:
	// a file among them may be met twice (as an operand, and in its
	// directory), so it is never summed with the others.
	operands map[string]bool
	log      *slog.Logger
}

// duProblem is a path du cannot stat (it says so, and goes on).
type duProblem struct{ path, what string }

// build returns the model of the tree at path, a path in the filesystem;
// nil with a problem if path names nothing (or, dirOnly, no directory).
func (b *duBuilder) build(ctx context.Context, path string, dirOnly bool) (*duNode, []duProblem, error) {
	// The shape of the tree is read beside the path itself, for the
	// round trip: most operands are directories.
	var e locking.Entry
	var sh store.TreeShape
	err := sideBySide(
		func() (err error) { e, err = b.view.Get(ctx, path); return },
		func() (err error) { sh, err = b.st.TreeShape(ctx, path); return },
	)
	if err != nil {
		return nil, nil, err
	}
	if !e.Found {
		return nil, []duProblem{{path, b.missing(ctx, path)}}, nil
	}
	switch {
	case dirOnly && e.Type == store.TypeSymlink:
		return nil, []duProblem{{path, "a symbolic link (give the directory it leads to)"}}, nil
	case dirOnly && e.Type != store.TypeDir:
		return nil, []duProblem{{path, "Not a directory"}}, nil
	}
	if e.Type != store.TypeDir {
		a, err := b.st.GetInode(ctx, e.Ino)
		if errors.Is(err, store.ErrNotFound) {
			return nil, []duProblem{{path, "No such file or directory"}}, nil
		}
		if err != nil {
			return nil, nil, err
		}
		return b.node(a, ""), nil, nil
	}
	n, problems, ok, err := b.fast(ctx, path, sh)
	if err != nil || ok {
		return n, problems, err
	}
	b.log.Debug("du: reading the whole tree: the index cannot sum it (a rename in flight, or documents that disagree)", "path", path)
	return b.whole(ctx, path)
}

// missing says why path is not found, as the kernel would: a component
// on the way that is not a directory.
func (b *duBuilder) missing(ctx context.Context, path string) string {
	for dir, _ := store.Split(path); dir != "" && dir != "/"; dir, _ = store.Split(dir) {
		e, err := b.view.Get(ctx, dir)
		if err != nil || !e.Found {
			continue
		}
		switch e.Type {
		case store.TypeDir:
			return "No such file or directory"
		case store.TypeSymlink:
			return "a symbolic link on the way (give the path it points to)"
		}
		return "Not a directory"
	}
	return "No such file or directory"
}

// node is the model of inode a, named name.
func (b *duBuilder) node(a store.Inode, name string) *duNode {
	return &duNode{name: name, ino: a.Ino, typ: a.Type, nlink: a.Nlink,
		own: duSum{blocks: a.Blocks(b.st.ChunkSize()), bytes: a.Size}}
}

// whole builds the tree at root, a directory, from every path below it
// and every inode they name: the way that needs nothing of the index but
// its documents, and reads all of them.
func (b *duBuilder) whole(ctx context.Context, root string) (*duNode, []duProblem, error) {
	pages, err := b.view.Scan(ctx, root)
	if err != nil {
		return nil, nil, err
	}
	defer pages.Close()
	var paths []store.Dentry
	for {
		page, bad, err := pages.Next(ctx)
		if err != nil {
			return nil, nil, err
		}
		for _, e := range bad {
			return nil, nil, e // a damaged path document: no answer is better than a wrong one
		}
		if page == nil {
			break
		}
		paths = append(paths, page...)
	}
	inos := make([]uint64, len(paths))
	for i, d := range paths {
		inos[i] = d.Ino
	}
	inodes, err := b.inodes(ctx, inos)
	if err != nil {
		return nil, nil, err
	}
	var problems []duProblem
	dirs := map[string]*duNode{}
	var top *duNode
	for _, d := range paths {
		a, ok := inodes[d.Ino]
		if !ok {
			problems = append(problems, duProblem{d.Path, "No such file or directory"})
			continue
		}
		n := b.node(a, d.Name)
		if d.Path == root {
			top = n
		} else if dir := dirs[d.Parent]; dir != nil {
			dir.kids = append(dir.kids, n)
			dir.entries++
		} else {
			continue // below a directory whose inode is missing
		}
		if n.typ == store.TypeDir {
			dirs[d.Path] = n
		}
	}
	if top == nil {
		return nil, append(problems, duProblem{root, "No such file or directory"}), nil
	}
	for _, d := range dirs {
		sortListing(d.kids, d.entries)
	}
	return top, problems, nil
}

// inodeBatch is how many inodes one _mget reads, and inodeReaders how
// many run at once.
const (
	inodeBatch   = 1000
	inodeReaders = 4
)

// inodes reads inodes inos (those found), in batches side by side.
func (b *duBuilder) inodes(ctx context.Context, inos []uint64) (map[uint64]store.Inode, error) {
	out := make(map[uint64]store.Inode, len(inos))
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		sem   = make(chan struct{}, inodeReaders)
	)
	for from := 0; from < len(inos); from += inodeBatch {
		batch := inos[from:min(from+inodeBatch, len(inos))]
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			res, err := b.st.GetInodes(ctx, batch)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if first == nil {
					first = err
				}
				return
			}
			for _, r := range res {
				switch {
				case r.Err == nil:
					out[r.Inode.Ino] = r.Inode
				case !errors.Is(r.Err, store.ErrNotFound) && first == nil:
					first = r.Err
				}
			}
		}()
	}
	wg.Wait()
	return out, first
}

// duDir is a directory of the tree the fast way builds.
type duDir struct {
	node    *duNode
	d       store.Dentry
	level   int
	subdirs []*duNode
	// links are the entries known one by one without a listing: the
	// files with several links, found by inode.
	links []*duNode
	// known counts the files the index places in the directory: summed,
	// read for lack of a blocks field, and links; a listing of it holds
	// as many (but for its subdirectories), or the index does not keep
	// the Parents of some, and the directory is listed (detail).
	known  int64
	detail bool
}

// fast builds the tree at root, a directory of shape sh, from what the
// index sums: its directories from the path index, their files'
// st_blocks and sizes summed by directory over the inode index
// (store.FileSums, by Parents), and one by one only what must be: files with several links (to count
// each once, where du meets it first), inodes written without the blocks
// field, and the entries of the directories du prints the files of
// (-a), of those past ftsMaxReaddirEntries (whose order needs every
// name), and of those whose count of entries the sums do not account for
// (a file whose Parents are not kept: from an older esfs, or a link
// removed where its directory was unknown). ok is false when the index
// cannot answer so (a rename in flight below root, or documents that do
// not agree): the caller builds the tree whole, through the view.
func (b *duBuilder) fast(ctx context.Context, root string, sh store.TreeShape) (top *duNode, problems []duProblem, ok bool, err error) {
	if sh.Intents > 0 || len(sh.Dirs) == 0 || sh.Dirs[0].Path != root {
		return nil, nil, false, nil
	}
	dirs := make(map[string]*duDir, len(sh.Dirs))
	byIno := make(map[uint64]*duDir, len(sh.Dirs))
	inos := make([]uint64, len(sh.Dirs))
	for i, d := range sh.Dirs {
		x := &duDir{d: d}
		if d.Path != root {
			parent := dirs[d.Parent]
			if parent == nil {
				return nil, nil, false, nil
			}
			x.level = parent.level + 1
		}
		dirs[d.Path], byIno[d.Ino], inos[i] = x, x, d.Ino
	}
	if len(byIno) != len(dirs) {
		return nil, nil, false, nil // a directory at two paths
	}
	var (
		dirInodes map[uint64]store.Inode
		sums      map[uint64]store.FileSum
		unsummed  []store.Inode
	)
	err = sideBySide(
		func() (err error) { dirInodes, err = b.inodes(ctx, inos); return },
		func() (err error) { sums, err = b.st.FileSums(ctx, inos); return },
		func() (err error) { unsummed, err = b.st.Unsummed(ctx, inos); return },
	)
	if errors.Is(err, store.ErrInexactSum) {
		return nil, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, err
	}
	for _, x := range dirs {
		a, found := dirInodes[x.d.Ino]
		if !found || a.Type != store.TypeDir {
			return nil, nil, false, nil
		}
		x.node = b.node(a, x.d.Name)
		x.node.entries = sh.Entries[x.d.Path]
		if x.d.Path != root {
			parent := dirs[x.d.Parent]
			parent.subdirs = append(parent.subdirs, x.node)
		}
		s := sums[x.d.Ino]
		x.node.rest = duSum{blocks: s.Blocks, bytes: s.Bytes}
		x.known = s.Count
	}
	var multi []uint64
	multiInode := map[uint64]store.Inode{}
	for _, a := range unsummed {
		if a.Nlink > 1 {
			multi = append(multi, a.Ino)
			multiInode[a.Ino] = a
			continue
		}
		// One link, written without the blocks field: summed here, in
		// each directory its Parents name (more than one: the count of
		// entries of all but one tells, and they are listed).
		seen := map[uint64]bool{}
		for _, p := range a.Parents {
			if x := byIno[p]; x != nil && !seen[p] {
				seen[p] = true
				x.node.rest.add(b.node(a, "").own)
				x.known++
			}
		}
	}
	if len(multi) > 0 {
		links, err := b.st.PathsOf(ctx, multi, root)
		if err != nil {
			return nil, nil, false, err
		}
		for _, l := range links {
			a, found := multiInode[l.Ino]
			x := dirs[l.Parent]
			if !found || x == nil || l.Type == store.TypeDir || l.Intent.Op != "" {
				return nil, nil, false, nil
			}
			x.links = append(x.links, b.node(a, l.Name))
			x.known++
		}
	}
	var listed []string
	for _, x := range dirs {
		files := x.node.entries - int64(len(x.subdirs))
		x.detail = files != x.known || x.node.entries > ftsMaxReaddirEntries || b.all && x.level < b.maxDepth
		if x.detail {
			listed = append(listed, x.d.Path)
		}
	}
	for p := range b.operands {
		if p == "/" || p == "" {
			continue
		}
		if parent, _ := store.Split(p); dirs[parent] != nil && !dirs[parent].detail && dirs[p] == nil {
			dirs[parent].detail = true
			listed = append(listed, parent)
		}
	}
	if len(listed) > 0 {
		if problems, ok, err = b.list(ctx, dirs, listed, multiInode); !ok || err != nil {
			return nil, nil, false, err
		}
	}
	for _, x := range dirs {
		if !x.detail {
			x.node.kids = append(x.subdirs, x.links...)
		}
		sortListing(x.node.kids, x.node.entries)
	}
	top = dirs[root].node
	b.log.Debug("du: summed by directory", "path", root, "directories", len(dirs), "listed", len(listed),
		"inodes read one by one", len(unsummed), "links", len(multi))
	return top, problems, true, nil
}

// list makes the directories at paths listed one entry by one: their
// path documents, and the inodes they name (multi: those read already).
func (b *duBuilder) list(ctx context.Context, dirs map[string]*duDir, paths []string, multi map[uint64]store.Inode) ([]duProblem, bool, error) {
	entries, err := b.st.PathsIn(ctx, paths)
	if err != nil {
		return nil, false, err
	}
	var need []uint64
	for _, e := range entries {
		if _, ok := multi[e.Ino]; !ok && e.Type != store.TypeDir {
			need = append(need, e.Ino)
		}
	}
	inodes, err := b.inodes(ctx, need)
	if err != nil {
		return nil, false, err
	}
	var problems []duProblem
	listed := map[string]int64{}
	for _, e := range entries {
		x := dirs[e.Parent]
		if x == nil || e.Intent.Op != "" {
			return nil, false, nil
		}
		listed[e.Parent]++
		x.node.rest = duSum{}
		if e.Type == store.TypeDir {
			sub := dirs[e.Path]
			if sub == nil {
				return nil, false, nil
			}
			x.node.kids = append(x.node.kids, sub.node)
			continue
		}
		a, found := multi[e.Ino]
		if !found {
			a, found = inodes[e.Ino]
		}
		if !found {
			problems = append(problems, duProblem{e.Path, "No such file or directory"})
			continue
		}
		x.node.kids = append(x.node.kids, b.node(a, e.Name))
	}
	for _, p := range paths {
		x := dirs[p]
		if listed[p] != x.node.entries {
			return nil, false, nil // changed since it was counted
		}
		x.node.rest = duSum{}
	}
	return problems, true, nil
}

// sideBySide runs fns side by side and returns the first error.
func sideBySide(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
