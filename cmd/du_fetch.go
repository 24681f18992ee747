package cmd

// esfs du's reads: the model of a PATH's tree (duNode), from the store.

import (
	"context"
	"errors"
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
}

// duProblem is a path du cannot stat (it says so, and goes on).
type duProblem struct{ path, what string }

// build returns the model of the tree at path, a path in the filesystem;
// nil with a problem if path names nothing.
func (b *duBuilder) build(ctx context.Context, path string) (*duNode, []duProblem, error) {
	e, err := b.view.Get(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	if !e.Found {
		return nil, []duProblem{{path, b.missing(ctx, path)}}, nil
	}
	if e.Type != store.TypeDir {
		a, err := b.st.GetInode(ctx, e.Ino)
		if errors.Is(err, store.ErrNotFound) {
			return nil, []duProblem{{path, "No such file or directory"}}, nil
		}
		if err != nil {
			return nil, nil, err
		}
		n := b.node(a, "")
		n.isRoot = true
		return n, nil, nil
	}
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
			n.isRoot, top = true, n
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
