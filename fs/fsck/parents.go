package fsck

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/esfs/esfs/store"
)

// parents checks that every file's stored directories (store.Inode.
// Parents: those whose delegations a change of its attributes recalls)
// are those of its links, and sets them so when repairing. Wrong ones are
// never unsafe (mounts then read the file's attributes in real time), but
// they cost the file its delegation; files made by an esfs that did not
// record them have none until a repair or a rename. The snapshots are
// older than now (a rename since moved a link), so what they disagree on
// is judged again on fresh reads of the inode, its paths and their
// directories, and a repair is written as any change of the file's
// attributes is: under the change lock of the directory the inode names
// now (recalling the mounts that may hold them), at the version read.
func (c *checker) parents(ctx context.Context) error {
	var suspects []uint64
	for ino, ps := range c.links {
		if n, ok := c.inodes[ino]; ok && n.Type != store.TypeDir && !sameDirs(n.Parents, linkDirs(ps, c.dirIno)) {
			suspects = append(suspects, ino)
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	slices.Sort(suspects)
	named, err := c.pathsNow(ctx, suspects)
	if err != nil {
		return err
	}
	for start := 0; start < len(suspects); start += store.DefaultPageSize {
		batch := suspects[start:min(start+store.DefaultPageSize, len(suspects))]
		res, err := c.fb.GetInodes(ctx, batch)
		if err != nil {
			return err
		}
		dirs, err := c.dirsNow(ctx, batch, named)
		if err != nil {
			return err
		}
		for i, ino := range batch {
			if res[i].Err != nil {
				continue // gone meanwhile, or corrupt (reported by the scan)
			}
			c.parent(ctx, res[i].Inode, named[ino], dirs)
		}
	}
	return nil
}

// dirIno is the inode of directory path in the scan (0: none there).
func (c *checker) dirIno(path string) uint64 {
	if d, ok := c.paths[path]; ok && d.typ == store.TypeDir {
		return d.ino
	}
	return 0
}

// linkDirs are the inodes of the directories of paths ps, sorted (dirIno:
// a directory's inode by path, 0 for none); nil if one is not known.
func linkDirs(ps []string, dirIno func(string) uint64) []uint64 {
	out := make([]uint64, 0, len(ps))
	for _, p := range ps {
		dir, _ := store.Split(p)
		ino := dirIno(dir)
		if ino == 0 {
			return nil
		}
		out = append(out, ino)
	}
	slices.Sort(out)
	return out
}

// sameDirs reports whether stored Parents are want (sorted), in any order.
func sameDirs(parents, want []uint64) bool {
	if want == nil {
		return true // an orphan path, or moved meanwhile: not judged here
	}
	got := slices.Clone(parents)
	slices.Sort(got)
	return slices.Equal(got, want)
}

// parent judges and repairs the Parents of n, read now, named by paths ps
// in directories dirs (both found now).
func (c *checker) parent(ctx context.Context, n store.Inode, ps []string, dirs map[string]uint64) {
	want := linkDirs(ps, func(dir string) uint64 { return dirs[dir] })
	if n.Type == store.TypeDir || len(ps) == 0 || sameDirs(n.Parents, want) {
		return
	}
	p := Problem{Kind: "stored directories", Subject: fmt.Sprintf("inode %d", n.Ino),
		Detail: fmt.Sprintf("records directories %v of its paths %q, want %v", n.Parents, ps, want)}
	if len(n.Parents) == 0 {
		p.Detail = fmt.Sprintf("none recorded (made by an esfs that did not record them: its attributes are read in real time), want %v of its paths %q", want, ps)
	}
	if c.repair {
		fixed := n
		fixed.Parents = want
		o := store.PutInode(fixed, n.Ver)
		var err error
		if holder := n.HeldBy(); holder != 0 {
			err = c.changeDir(ctx, holder, "", o)
		} else {
			_, err = c.fb.Write(ctx, o)
		}
		p.Repaired = err == nil
		if errors.Is(err, store.ErrConflict) {
			p.Detail += ": changed while being checked (run fsck again)"
		} else if err != nil {
			p.Detail += ": " + err.Error()
		}
	}
	c.rep.Problems = append(c.rep.Problems, p)
}

// pathsNow finds the paths that name inos now, after a refresh.
func (c *checker) pathsNow(ctx context.Context, inos []uint64) (map[uint64][]string, error) {
	if err := c.fb.Refresh(ctx, store.SearchedPaths); err != nil {
		return nil, err
	}
	named := map[uint64][]string{}
	const batch = 10000 // below index.max_terms_count
	for start := 0; start < len(inos); start += batch {
		sc, err := c.view.Search("", inos[start:min(start+batch, len(inos))], store.SearchFilter{}, store.DefaultPageSize)
		if err != nil {
			return nil, err
		}
		for {
			page, _, err := sc.Next(ctx)
			if err != nil {
				sc.Close()
				return nil, err
			}
			if page == nil {
				break
			}
			for _, vis := range page {
				named[vis.Ino] = append(named[vis.Ino], vis.Path)
			}
		}
		sc.Close()
	}
	return named, nil
}

// dirsNow reads, in real time, the directories of the paths that name
// inos: their inode by path (absent: gone, or no directory).
func (c *checker) dirsNow(ctx context.Context, inos []uint64, named map[uint64][]string) (map[string]uint64, error) {
	var paths []string
	seen := map[string]bool{}
	for _, ino := range inos {
		for _, p := range named[ino] {
			if dir, _ := store.Split(p); !seen[dir] {
				seen[dir] = true
				paths = append(paths, dir)
			}
		}
	}
	out := map[string]uint64{}
	if len(paths) == 0 {
		return out, nil
	}
	res, err := c.view.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	for i, e := range res {
		if e.Found && e.Type == store.TypeDir {
			out[paths[i]] = e.Ino
		}
	}
	return out, nil
}
