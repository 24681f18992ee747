package fsck

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// scanPaths reads every path document after a refresh, settles the
// intents of finished operations and dead mounts (when repairing), and
// reports paths whose parent is missing or no directory (removing them
// when repairing). It keeps what readers see for the inode checks.
func (c *checker) scanPaths(ctx context.Context) error {
	if err := c.fb.Refresh(ctx, store.SearchedAll); err != nil {
		return err
	}
	sc := c.fb.ScanTree("/", store.DefaultPageSize)
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			sc.Close()
			return err
		}
		for _, b := range bad {
			c.corrupt(ctx, "corrupt path document", b)
		}
		if page == nil {
			break
		}
		for _, d := range page {
			c.rep.Paths++
			if d.Intent.Op != "" {
				vis, ok, err := c.view.Resolve(ctx, d)
				if err != nil {
					sc.Close()
					return err
				}
				rec, _ := c.fb.GetOp(ctx, d.Intent.Op)
				if rec.State != store.OpDone && !c.dead(ctx, rec.Owner) {
					// In flight: judged when it finishes.
				} else {
					p := Problem{Kind: "stray intent", Subject: d.Path, Detail: fmt.Sprintf("%s of operation %s (%s)", d.Intent.Role, d.Intent.Op, rec.State)}
					if c.repair {
						rerr := c.co.Journal.ResolveStray(ctx, d)
						// Settled, here or by a mount's sweeper meanwhile
						// (then this one's write failed): what is there
						// now, at its version, is what later steps judge.
						now, err := c.fb.GetDentry(ctx, d.Path)
						switch {
						case errors.Is(err, store.ErrNotFound):
							ok, p.Repaired = false, true
						case err == nil && now.Intent.Op != d.Intent.Op:
							p.Repaired = true
							if now.Intent.Op == "" {
								vis = now
							}
						default:
							p.Repaired = rerr == nil
						}
						if !p.Repaired && rerr != nil {
							p.Detail += ": " + rerr.Error()
						}
					}
					c.rep.Problems = append(c.rep.Problems, p)
				}
				if !ok {
					continue
				}
				d = vis
			}
			c.docs = append(c.docs, d)
			c.paths[d.Path] = pathInfo{d.Type, d.Ino}
		}
	}
	sc.Close()
	c.orphans(ctx)
	for i, d := range c.docs {
		c.links[d.Ino] = append(c.links[d.Ino], d.Path)
		c.docAt[d.Path] = i
		if d.Path != "/" {
			c.entries[d.Parent]++
			if d.Type == store.TypeDir {
				c.subdirs[d.Parent]++
			}
		}
	}
	return nil
}

// orphans reports the paths whose parent is missing or no directory, and
// those below them (whose parents would be next), and removes them when
// repairing: no path leads to them, so no mount can reach them. They are
// left out of the snapshot either way, so that what they name is judged
// as if they were gone (their inodes then are unreachable, removed in
// the same run).
func (c *checker) orphans(ctx context.Context) {
	reachable := map[string]bool{"/": true}
	var reach func(path string) bool
	reach = func(path string) bool {
		if r, ok := reachable[path]; ok {
			return r
		}
		// A path's parent is its directory (the decoder checks it), so
		// the walk up ends at the root.
		dir, _ := store.Split(path)
		parent, ok := c.paths[dir]
		r := ok && parent.typ == store.TypeDir && reach(dir)
		reachable[path] = r
		return r
	}
	if _, ok := c.paths["/"]; !ok {
		// Without the root every path would be an orphan.
		p := Problem{Kind: "missing root", Subject: "/", Detail: "no path document of the root"}
		if c.repair {
			root := store.Dentry{Path: "/", Ino: store.RootIno, Type: store.TypeDir}
			v, err := c.fb.Write(ctx, store.CreateDentry(root))
			p.Repaired = err == nil
			if err != nil {
				p.Detail += ": " + err.Error()
			} else {
				root.Ver = v
				c.docs = append(c.docs, root)
				c.paths["/"] = pathInfo{store.TypeDir, store.RootIno}
			}
		}
		c.rep.Problems = append(c.rep.Problems, p)
		if !c.repair || !p.Repaired {
			return
		}
	}
	subdirs := map[string]uint32{}
	for _, d := range c.docs {
		if d.Type == store.TypeDir && d.Path != "/" {
			subdirs[d.Parent]++
		}
	}
	reported := map[string]bool{}
	pending := map[string]bool{} // left out, below a directory not made
	var madeDocs []store.Dentry
	kept := c.docs[:0]
	for _, d := range c.docs {
		if d.Path == "/" || reach(d.Path) {
			kept = append(kept, d)
			continue
		}
		// The directories missing above it, up to the nearest path that
		// has a document: made again when that is a directory, so that
		// nothing below them is lost.
		var missing []string
		top := d.Parent
		for {
			if _, ok := c.paths[top]; ok {
				break
			}
			missing = append(missing, top)
			top = parentOf(top)
		}
		if (len(missing) > 0 || pending[top]) && c.paths[top].typ == store.TypeDir && (top == "/" || reach(top) || pending[top]) {
			ok := c.repair && !pending[top]
			for i := len(missing) - 1; i >= 0; i-- {
				dir := missing[i]
				if reported[dir] {
					continue
				}
				reported[dir] = true
				p := Problem{Kind: "missing directory", Subject: dir, Detail: "no document, and paths below it"}
				if c.repair {
					nd, err := c.makeDir(ctx, dir, subdirs[dir])
					if err != nil {
						p.Detail += ": " + err.Error()
						ok = false
					} else {
						p.Repaired = true
						p.Detail += fmt.Sprintf(" (made again, inode %d)", nd.Ino)
						madeDocs = append(madeDocs, nd)
						c.paths[dir] = pathInfo{store.TypeDir, nd.Ino}
						subdirs[parentOf(dir)]++
					}
				}
				c.rep.Problems = append(c.rep.Problems, p)
				if !ok {
					break
				}
			}
			if ok {
				for k, r := range reachable {
					if !r {
						delete(reachable, k)
					}
				}
				kept = append(kept, d)
				continue
			}
			// Left as it is, out of the snapshot: a check, or a repair
			// that could not make its directory (the next run tries).
			pending[d.Path] = true
			c.awaitingDir[d.Ino] = true
			continue
		}
		p := Problem{Kind: "orphan path", Subject: d.Path, Detail: "its parent is not a directory"}
		if len(missing) > 0 {
			p.Detail = "no directory leads to it"
		}
		if c.repair {
			_, err := c.fb.Write(ctx, store.DeleteDentry(d.Path, d.Ver))
			p.Repaired = err == nil || errors.Is(err, store.ErrNotFound)
			if !p.Repaired {
				p.Detail += ": " + err.Error()
			}
		}
		c.rep.Problems = append(c.rep.Problems, p)
		c.orphaned[d.Path] = true
		delete(c.paths, d.Path)
	}
	for p := range pending {
		c.orphaned[p] = true
		delete(c.paths, p)
	}
	c.docs = append(kept, madeDocs...)
}

// makeDir makes directory path again (a new, empty inode with subdirs
// subdirectories), whose document is missing while paths below it have
// theirs, under the change lock of its parent.
func (c *checker) makeDir(ctx context.Context, path string, subdirs uint32) (store.Dentry, error) {
	parent, _ := store.Split(path)
	n := c.blank(store.NewIno(), store.TypeDir, path)
	n.Nlink = vfs.DirLinks(subdirs)
	txn, err := c.co.Begin(ctx, []locking.Request{locking.Change(c.paths[parent].ino, parent)})
	if err != nil {
		return store.Dentry{}, err
	}
	defer txn.End(ctx)
	v, err := c.fb.Write(ctx, store.CreateInode(n))
	if err != nil {
		return store.Dentry{}, err
	}
	n.Ver = v
	d := store.Dentry{Path: path, Ino: n.Ino, Type: store.TypeDir}
	if d.Ver, err = c.fb.Write(ctx, store.CreateDentry(d)); err != nil {
		_, _ = c.fb.Write(ctx, store.DeleteInode(n.Ino, v))
		return store.Dentry{}, err
	}
	d.Parent, d.Name = store.Split(path)
	c.inodes[n.Ino] = n
	return d, nil
}

// corrupt reports a document a scan could not decode and deletes it when
// repairing: nothing in it can be read, and every reader stumbles on it.
// A name that pointed at it is gone with it; an inode a path names is
// made again (see names).
func (c *checker) corrupt(ctx context.Context, kind string, b error) {
	p := Problem{Kind: kind, Subject: "?", Detail: b.Error()}
	var cd *store.DocError
	if errors.As(b, &cd) {
		p.Subject = cd.ID
		if c.repair {
			_, err := c.fb.Write(ctx, c.fb.DeleteDamaged(cd))
			p.Repaired = err == nil || errors.Is(err, store.ErrNotFound)
			if !p.Repaired {
				p.Detail += ": " + err.Error()
			}
		}
	}
	c.rep.Problems = append(c.rep.Problems, p)
}

// scanInodes reads every inode document and checks the inodes the paths
// name: each exists, agrees on the type, and a file's link count is its
// paths (lowered to them when repairing); a directory has one path.
func (c *checker) scanInodes(ctx context.Context) error {
	isc := c.fb.ScanInodes(store.AllInodes)
	for {
		page, bad, err := isc.Next(ctx)
		if err != nil {
			return err
		}
		for _, b := range bad {
			c.corrupt(ctx, "corrupt inode document", b)
		}
		if page == nil {
			break
		}
		for _, n := range page {
			c.inodes[n.Ino] = n
		}
	}
	c.rep.Inodes = len(c.inodes)
	if err := c.lookAgain(ctx); err != nil {
		return err
	}
	inos := make([]uint64, 0, len(c.links))
	for ino := range c.links {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		c.names(ctx, ino)
	}
	return nil
}

// dirLinks checks that every directory's link count is 2 plus its
// subdirectories, and sets it so when repairing.
func (c *checker) dirLinks(ctx context.Context) error {
	subdirs := map[string]uint32{}
	for _, d := range c.docs {
		if d.Type == store.TypeDir && d.Path != "/" {
			subdirs[d.Parent]++
		}
	}
	for _, d := range c.docs {
		n, ok := c.inodes[d.Ino]
		if d.Type != store.TypeDir || !ok || n.Type != store.TypeDir || n.Nlink == vfs.DirLinks(subdirs[d.Path]) || c.aliased[d.Path] {
			continue
		}
		// The snapshots are older than now: a mkdir or rmdir since moved
		// the count, so it is judged again on a fresh read and count.
		n, subs, err := c.countDirLinks(ctx, d.Path, d.Ino)
		if errors.Is(err, store.ErrNotFound) {
			continue // removed meanwhile
		}
		if err == nil && n.Type == store.TypeDir && n.Nlink == vfs.DirLinks(subs) {
			continue
		}
		if err != nil {
			n, subs = c.inodes[d.Ino], subdirs[d.Path]
		}
		p := Problem{Kind: "directory link count", Subject: d.Path,
			Detail: fmt.Sprintf("nlink %d, want %d (2 + %d subdirectories)", n.Nlink, vfs.DirLinks(subs), subs)}
		if !n.DirLinksCounted() {
			p.Detail = fmt.Sprintf("not counted (made by an esfs that did not count; reported as 1), want %d (2 + %d subdirectories)", vfs.DirLinks(subs), subs)
		}
		if err != nil {
			p.Detail += ": cannot count again: " + err.Error()
		} else if c.repair {
			// Written at the version read before the count, so that a
			// mkdir or rmdir that lands meanwhile makes the write fail
			// rather than be undone by it.
			n.Nlink = vfs.DirLinks(subs)
			werr := c.changeDir(ctx, d.Ino, d.Path, store.PutInode(n, n.Ver))
			p.Repaired = werr == nil
			if werr != nil {
				p.Detail += ": changed while being counted (run fsck again): " + werr.Error()
			}
		}
		c.rep.Problems = append(c.rep.Problems, p)
	}
	return nil
}

// changeDir writes o, a change of directory ino's own attributes, under
// the directory's change lock: mounts holding a delegation on it keep its
// attributes, so they are recalled first, as for any mount's change.
func (c *checker) changeDir(ctx context.Context, ino uint64, path string, o store.BulkOp) error {
	txn, err := c.co.Begin(ctx, []locking.Request{locking.Change(ino, path)})
	if err != nil {
		return err
	}
	_, err = c.fb.Write(ctx, o)
	if rerr := txn.End(ctx); err == nil {
		err = rerr
	}
	return err
}

// unreachable reports the inodes no path names (but the root's), and
// deletes them with their data when repairing. A file a live mount keeps
// open without links (store.Inode.Keeper) is in use, not unreachable; one
// whose keeper is dead is that mount's leftover (the sweepers of live
// mounts delete it too).
func (c *checker) unreachable(ctx context.Context) error {
	for ino, n := range c.inodes {
		if _, ok := c.links[ino]; ok || ino == store.RootIno || c.awaitingDir[ino] {
			continue
		}
		p := Problem{Kind: "unreachable inode", Subject: fmt.Sprintf("inode %d", ino), Detail: fmt.Sprintf("%s of %d bytes, no path names it", n.Type, n.Size)}
		if n.Keeper != "" && n.Nlink == 0 {
			if !c.dead(ctx, n.Keeper) {
				c.rep.InFlight = append(c.rep.InFlight, fmt.Sprintf("inode %d: %s of %d bytes without links, open on live mount %s (deleted at its last close there)", ino, n.Type, n.Size, n.Keeper))
				continue
			}
			p.Kind, p.Detail = "leftover unlinked file", fmt.Sprintf("%s of %d bytes, kept open without links by dead mount %s", n.Type, n.Size, n.Keeper)
		}
		if c.repair {
			kept, err := locking.RemoveUnlinked(ctx, c.fb, n)
			p.Repaired = err == nil && !kept
		}
		c.rep.Problems = append(c.rep.Problems, p)
	}
	return nil
}

// lookAgain reads again, now, the inodes on which the two snapshots fsck
// compares disagree: an inode without a path, a path without its inode, a
// link count that differs from the paths. The snapshots are taken one after
// the other (paths, then inodes), so a file created between them has an
// inode but no path, one removed between them a path but no inode, a link
// made between them one link too many; and repairing those as damage would
// delete a live file or lower its link count below its paths. For each
// such inode the paths that name it are searched again after a refresh
// (which shows every path written before it) and the inode is read in real
// time; the checks then judge what was read last.
func (c *checker) lookAgain(ctx context.Context) error {
	var suspects []uint64
	for ino, ps := range c.links {
		if n, ok := c.inodes[ino]; !ok || (n.Type != store.TypeDir && int(n.Nlink) != len(ps)) {
			suspects = append(suspects, ino)
		}
	}
	for ino := range c.inodes {
		if _, ok := c.links[ino]; !ok && ino != store.RootIno {
			suspects = append(suspects, ino)
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	if err := c.fb.Refresh(ctx, store.SearchedPaths); err != nil {
		return err
	}
	sort.Slice(suspects, func(i, j int) bool { return suspects[i] < suspects[j] })
	named := map[uint64][]string{}
	const batch = 10000 // below index.max_terms_count
	for start := 0; start < len(suspects); start += batch {
		sc, err := c.view.Search("", suspects[start:min(start+batch, len(suspects))], store.SearchFilter{}, store.DefaultPageSize)
		if err != nil {
			return err
		}
		for {
			page, _, err := sc.Next(ctx)
			if err != nil {
				sc.Close()
				return err
			}
			if page == nil {
				break
			}
			for _, vis := range page {
				if c.orphaned[vis.Path] {
					continue // no directory leads to it (see orphans)
				}
				named[vis.Ino] = append(named[vis.Ino], vis.Path)
				c.paths[vis.Path] = pathInfo{vis.Type, vis.Ino}
			}
		}
		sc.Close()
	}
	for _, ino := range suspects {
		if ps := named[ino]; len(ps) > 0 {
			c.links[ino] = ps
		} else {
			delete(c.links, ino)
		}
		n, err := c.fb.GetInode(ctx, ino)
		switch {
		case errors.Is(err, store.ErrNotFound):
			delete(c.inodes, ino)
		case err == nil:
			c.inodes[ino] = n
		} // else unreadable (a corrupt document, reported already): as the scan saw it
	}
	return nil
}

// countDirLinks reads a directory's inode, then counts its visible
// subdirectories in a listing taken after a refresh.
func (c *checker) countDirLinks(ctx context.Context, path string, ino uint64) (store.Inode, uint32, error) {
	res, err := c.fb.GetInodes(ctx, []uint64{ino})
	if err != nil {
		return store.Inode{}, 0, err
	}
	if res[0].Err != nil {
		return store.Inode{}, 0, res[0].Err
	}
	n := res[0].Inode
	if err := c.fb.Refresh(ctx, store.SearchedPaths); err != nil {
		return store.Inode{}, 0, err
	}
	sc := c.view.List(path, store.DefaultPageSize)
	defer sc.Close()
	var count uint32
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return store.Inode{}, 0, err
		}
		if len(bad) > 0 {
			return store.Inode{}, 0, fmt.Errorf("cannot count the subdirectories of %s: %w", path, bad[0])
		}
		if page == nil {
			return n, count, nil
		}
		for _, vis := range page {
			if vis.Type == store.TypeDir {
				count++
			}
		}
	}
}

func parentOf(path string) string {
	dir, _ := store.Split(path)
	return dir
}
