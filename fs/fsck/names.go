package fsck

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// names checks the paths that name inode ino against it, and repairs
// them so that one run settles them, choosing what loses nothing:
//
//   - an inode that does not exist (or whose document was corrupt, and
//     deleted) is made again, empty, of its paths' type, so that what is
//     below a directory stays reachable;
//   - a path whose type is not its inode's takes the inode's type when
//     nothing is below it and that makes no directory twice named;
//     otherwise it gets an inode of its own, of its type;
//   - a directory named twice (the root's inode at /loop, an ancestor's
//     below itself: loops for every walk) keeps its inode at the name
//     nearest the root (the root itself for the root's inode; between
//     names as deep, the one with more entries, then the first by byte
//     order); every other name becomes a directory of its own, a new
//     inode with the same attributes, its entries kept;
//   - a file's link count is set to its paths.
//
// A check reports the same and writes nothing; the names a repair would
// give their own inode are then left out of the directory link counts,
// which would otherwise judge one inode by two directories.
func (c *checker) names(ctx context.Context, ino uint64) {
	ps := c.links[ino]
	n, ok := c.inodes[ino]
	if !ok {
		for _, p := range ps {
			c.rep.Problems = append(c.rep.Problems, Problem{Kind: "missing inode", Subject: p, Detail: fmt.Sprintf("inode %d does not exist", ino)})
		}
		if !c.repair {
			return
		}
		made, err := c.remake(ctx, ino, ps)
		last := len(c.rep.Problems) - len(ps)
		for i := range ps {
			p := &c.rep.Problems[last+i]
			p.Repaired = err == nil
			if err != nil {
				p.Detail += ": " + err.Error()
			} else if made.Size > 0 {
				p.Detail += fmt.Sprintf(" (made again: a %s of %d bytes, as its data chunks hold)", made.Type, made.Size)
			} else {
				p.Detail += fmt.Sprintf(" (made again: an empty %s)", made.Type)
			}
		}
		if err != nil {
			return
		}
		n = made
	}
	// Paths whose type is not the inode's.
	var agree []string
	for _, p := range ps {
		if c.paths[p].typ == n.Type {
			agree = append(agree, p)
		}
	}
	for _, p := range ps {
		typ := c.paths[p].typ
		if typ == n.Type {
			continue
		}
		pr := Problem{Kind: "type mismatch", Subject: p, Detail: fmt.Sprintf("path says %s, inode %d says %s", typ, ino, n.Type)}
		// Taking the inode's type: only for a path with nothing below it,
		// and not as a directory's second name.
		take := c.entries[p] == 0 && (n.Type != store.TypeDir || len(agree) == 0)
		if take {
			agree = append(agree, p)
		}
		if c.repair {
			var err error
			if take {
				pr.Detail += " (the path takes the inode's type)"
				err = c.retype(ctx, p, n)
			} else {
				pr.Detail += fmt.Sprintf(" (the path gets a %s of its own)", typ)
				_, err = c.ownInode(ctx, p, typ, n)
			}
			pr.Repaired = err == nil
			if err != nil {
				pr.Detail += ": " + err.Error()
			}
		} else if !take {
			c.aliased[p] = true
		}
		c.rep.Problems = append(c.rep.Problems, pr)
	}
	ps = agree
	sort.Strings(ps)
	c.links[ino] = ps
	if len(ps) == 0 {
		// Named by nothing now: unreachable, in this run.
		delete(c.links, ino)
		return
	}
	if n.Type == store.TypeDir && len(ps) > 1 {
		keep := c.keeper(ino, ps)
		for _, p := range ps {
			if p == keep {
				continue
			}
			pr := Problem{Kind: "duplicate directory", Subject: p, Detail: fmt.Sprintf("names inode %d, which %s names", ino, keep)}
			if c.repair {
				made, err := c.ownInode(ctx, p, store.TypeDir, n)
				pr.Repaired = err == nil
				if err != nil {
					pr.Detail += ": " + err.Error()
				} else {
					pr.Detail += fmt.Sprintf(" (now a directory of its own, inode %d)", made)
				}
			} else {
				c.aliased[p] = true
			}
			c.rep.Problems = append(c.rep.Problems, pr)
		}
		c.links[ino] = []string{keep}
		return
	}
	if n.Type != store.TypeDir && len(ps) > 0 && int(n.Nlink) != len(ps) {
		pr := Problem{Kind: "link count", Subject: fmt.Sprintf("inode %d", ino), Detail: fmt.Sprintf("nlink %d but %d paths %q", n.Nlink, len(ps), ps)}
		if c.repair {
			fixed := n
			fixed.Nlink = uint32(len(ps))
			_, err := c.fb.Write(ctx, store.PutInode(fixed, n.Ver))
			pr.Repaired = err == nil
			if err != nil {
				pr.Detail += ": " + err.Error()
			}
		}
		c.rep.Problems = append(c.rep.Problems, pr)
	}
}

// keeper is the name of directory ino that keeps the inode (see names).
func (c *checker) keeper(ino uint64, ps []string) string {
	if ino == store.RootIno {
		for _, p := range ps {
			if p == "/" {
				return p
			}
		}
	}
	depth := func(p string) int {
		if p == "/" {
			return 0
		}
		return strings.Count(p, "/")
	}
	best := ps[0]
	for _, p := range ps[1:] {
		switch dp, db := depth(p), depth(best); {
		case dp < db:
			best = p
		case dp == db && c.entries[p] > c.entries[best]:
			best = p
		}
	}
	return best
}

// remake writes inode ino again, empty, of the type its paths say (the
// first's when they disagree: the others are then judged as mismatches).
func (c *checker) remake(ctx context.Context, ino uint64, ps []string) (store.Inode, error) {
	typ := c.paths[ps[0]].typ
	n := c.blank(ino, typ, ps[0])
	if typ != store.TypeDir {
		n.Nlink = uint32(len(ps))
		n.Parents = nil // set by parents
	}
	if typ == store.TypeFile {
		if err := c.sizeFromChunks(ctx, &n); err != nil {
			return store.Inode{}, err
		}
	}
	v, err := c.fb.Write(ctx, store.CreateInode(n))
	if err != nil {
		return store.Inode{}, err
	}
	n.Ver = v
	c.inodes[ino] = n
	return n, nil
}

// sizeFromChunks gives file n, made again, the data its chunks hold:
// its size ends with its last chunk, and its data generation is past
// theirs (a writer's chunks must outrank those stored, see
// store.DataVersion).
func (c *checker) sizeFromChunks(ctx context.Context, n *store.Inode) error {
	if err := c.fb.Refresh(ctx, store.SearchedData); err != nil {
		return err
	}
	var nums []int64
	for from := int64(0); ; {
		page, err := c.fb.StoredChunks(ctx, n.Ino, from, 10000)
		if err != nil {
			return err
		}
		nums = append(nums, page...)
		if len(page) < 10000 {
			break
		}
		from = page[len(page)-1] + 1
	}
	if len(nums) == 0 {
		return nil
	}
	last := nums[len(nums)-1]
	data, vers, err := c.fb.ReadChunks(ctx, n.Ino, last, last)
	if err != nil {
		return err
	}
	n.Size = last*c.fb.ChunkSize() + int64(len(data[last]))
	n.Chunks = int64(len(nums))
	// The generations of the other chunks are not read: past the last
	// one's by a margin, and past any a request counter can reach.
	n.Dgen = uint64(vers[last])>>store.DataCounterBits + 1<<16
	if n.Dgen > store.MaxDataGen {
		n.Dgen = store.MaxDataGen
	}
	return nil
}

// blank is an empty inode of type typ for path p.
func (c *checker) blank(ino uint64, typ store.FileType, p string) store.Inode {
	now := time.Now().UnixNano()
	n := store.Inode{Ino: ino, Type: typ, Mode: 0o644, Nlink: 1, Atime: now, Mtime: now, Ctime: now, Btime: now}
	switch typ {
	case store.TypeDir:
		n.Mode, n.Nlink = 0o755, vfs.DirLinks(c.subdirs[p])
	case store.TypeSymlink:
		n.Mode = 0o777
	}
	return n
}

// ownInode gives path p an inode of its own, of type typ, with the
// attributes of from (its contents only if of the same type: a
// directory's entries are found by path and stay), and returns its
// number. It is a change of the entries of p's directory, and of those of
// p when p was a directory: their delegations are recalled first.
func (c *checker) ownInode(ctx context.Context, p string, typ store.FileType, from store.Inode) (uint64, error) {
	i, ok := c.docAt[p]
	if !ok {
		return 0, fmt.Errorf("no document of %s", p)
	}
	d := c.docs[i]
	fresh := from
	fresh.Ino, fresh.Ver, fresh.Keeper, fresh.Parents, fresh.LinkSeq, fresh.LinkOps, fresh.Dgen = store.NewIno(), store.Version{}, "", nil, 0, nil, 0
	if typ != from.Type {
		blank := c.blank(fresh.Ino, typ, p)
		fresh.Type, fresh.Size, fresh.Target, fresh.Rdev, fresh.Chunks, fresh.Mode = typ, 0, "", 0, 0, blank.Mode
	}
	if typ == store.TypeDir {
		fresh.Nlink = vfs.DirLinks(c.subdirs[p])
	} else {
		fresh.Nlink = 1
		if dir := c.dirIno(d.Parent); dir != 0 {
			fresh.Parents = []uint64{dir}
		}
	}
	reqs := []locking.Request{}
	if dir := c.dirIno(d.Parent); dir != 0 {
		reqs = append(reqs, locking.Change(dir, d.Parent))
	}
	if d.Type == store.TypeDir && d.Ino != c.dirIno(d.Parent) {
		reqs = append(reqs, locking.Change(d.Ino, p))
	}
	txn, err := c.co.Begin(ctx, reqs)
	if err != nil {
		return 0, err
	}
	defer txn.End(ctx)
	v, err := c.fb.Write(ctx, store.CreateInode(fresh))
	if err != nil {
		return 0, err
	}
	fresh.Ver = v
	nd := d
	nd.Ino, nd.Type = fresh.Ino, typ
	dv, err := c.fb.Write(ctx, store.PutDentry(nd, d.Ver))
	if err != nil {
		// The new inode is named by nothing: deleted as unreachable.
		if _, derr := c.fb.Write(ctx, store.DeleteInode(fresh.Ino, v)); derr != nil && !errors.Is(derr, store.ErrNotFound) {
			err = fmt.Errorf("%w (and inode %d it made is left: %v)", err, fresh.Ino, derr)
		}
		if errors.Is(err, store.ErrConflict) {
			err = fmt.Errorf("changed while being checked (run fsck again): %w", err)
		}
		return 0, err
	}
	nd.Ver = dv
	c.docs[i] = nd
	c.paths[p] = pathInfo{typ, fresh.Ino}
	c.inodes[fresh.Ino] = fresh
	c.links[fresh.Ino] = []string{p}
	return fresh.Ino, nil
}

// retype sets path p's type to its inode n's.
func (c *checker) retype(ctx context.Context, p string, n store.Inode) error {
	i, ok := c.docAt[p]
	if !ok {
		return fmt.Errorf("no document of %s", p)
	}
	d := c.docs[i]
	nd := d
	nd.Type = n.Type
	var reqs []locking.Request
	if dir := c.dirIno(d.Parent); dir != 0 {
		reqs = append(reqs, locking.Change(dir, d.Parent))
	}
	txn, err := c.co.Begin(ctx, reqs)
	if err != nil {
		return err
	}
	defer txn.End(ctx)
	v, err := c.fb.Write(ctx, store.PutDentry(nd, d.Ver))
	if err != nil {
		return err
	}
	nd.Ver = v
	c.docs[i] = nd
	c.paths[p] = pathInfo{n.Type, n.Ino}
	return nil
}
