package locking

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/esfs/esfs/store"
)

// FsckBackend is what fsck reads and repairs, beyond Backend.
type FsckBackend interface {
	Backend
	RefreshAll(ctx context.Context) error
	ScanInodes() *store.InodeScanner
	GetInodes(ctx context.Context, inos []uint64) ([]store.InodeResult, error)
	DeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (int64, error)
	ChunkSize() int64
	GetInode(ctx context.Context, ino uint64) (store.Inode, error)
	ScanChunks() *store.ChunkScanner
}

var _ FsckBackend = (*store.Store)(nil)

// Problem is one broken invariant.
type Problem struct {
	Kind     string // short name of the invariant
	Subject  string // path, inode or record
	Detail   string
	Repaired bool
}

func (p Problem) String() string {
	s := fmt.Sprintf("%s: %s: %s", p.Kind, p.Subject, p.Detail)
	if p.Repaired {
		s += " (repaired)"
	}
	return s
}

// Report is what fsck found.
type Report struct {
	Paths, Inodes, Locks, Ops int
	InFlight                  []string // operations of live mounts, not problems
	Problems                  []Problem

	Chunks int // data chunks checked
}

// Clean reports whether no invariant is broken (repaired ones count).
func (r Report) Clean() bool { return len(r.Problems) == 0 }

// Unrepaired counts problems left.
func (r Report) Unrepaired() int {
	n := 0
	for _, p := range r.Problems {
		if !p.Repaired {
			n++
		}
	}
	return n
}

// Fsck checks the invariants of the filesystem: every path document's
// parent exists and is a directory, its inode exists and agrees on the
// type, no path and no inode appears twice (unless hard-linked, and then
// the link count matches), no document carries the intent of a finished
// operation or of a dead mount's, no operation of a dead mount is
// unfinished, no lock entry of a dead mount is left, every inode is
// reachable, every directory's link count is 2 plus its subdirectories,
// every data chunk belongs to a file and lies within its size (see
// fsckData). Sessions are judged dead as the sweeper does: declared, or
// silent for their lease plus grace, which fsck waits for when it must.
// With repair, it does what recovery would: finishes or undoes dead
// mounts' operations, removes leftovers, orphans and strays.
func (c *Coordinator) Fsck(ctx context.Context, fb FsckBackend, repair bool, wait bool) (Report, error) {
	var rep Report
	if err := c.judgeAll(ctx, wait); err != nil {
		return rep, err
	}
	dead := func(sess string) bool {
		d, err := c.obs.Dead(ctx, sess)
		return err == nil && d
	}
	// Operations first: recovery changes paths and locks.
	recs, err := fb.SearchOps(ctx)
	if err != nil {
		return rep, err
	}
	rep.Ops = len(recs)
	for _, rec := range recs {
		if rec.State == store.OpDone {
			continue
		}
		if !dead(rec.Owner) {
			rep.InFlight = append(rep.InFlight, fmt.Sprintf("%s %s %q -> %q (owner %s)", rec.ID, rec.State, rec.Src, rec.Dst, rec.Owner))
			continue
		}
		p := Problem{Kind: "unfinished operation", Subject: rec.ID,
			Detail: fmt.Sprintf("%s rename %q -> %q of dead mount %s", rec.State, rec.Src, rec.Dst, rec.Owner)}
		if repair {
			if err := c.Journal.Recover(ctx, rec); err != nil {
				p.Detail += ": recovery failed: " + err.Error()
			} else {
				p.Repaired = true
			}
		}
		rep.Problems = append(rep.Problems, p)
	}
	// Lock entries of dead mounts.
	locks, err := fb.SearchLocks(ctx)
	if err != nil {
		return rep, err
	}
	rep.Locks = len(locks)
	for _, d := range locks {
		var keep []store.Holder
		changed := false
		for _, h := range d.Holders {
			if !dead(h.Session) {
				keep = append(keep, h)
				continue
			}
			p := Problem{Kind: "leftover lock", Subject: lockName(d), Detail: fmt.Sprintf("%s entry of dead mount %s, operation %s", h.Mode, h.Session, h.Op)}
			if repair {
				if gone, err := c.Locks.holderGone(ctx, h); err == nil && gone {
					p.Repaired, changed = true, true
				} else {
					keep = append(keep, h)
				}
			} else {
				keep = append(keep, h)
			}
			rep.Problems = append(rep.Problems, p)
		}
		var waiters []store.Waiter
		for _, w := range d.Waiters {
			if dead(w.Session) {
				rep.Problems = append(rep.Problems, Problem{Kind: "leftover waiter", Subject: lockName(d), Detail: "of dead mount " + w.Session, Repaired: repair})
				changed = changed || repair
				continue
			}
			waiters = append(waiters, w)
		}
		if len(d.Holders) == 0 && len(d.Waiters) == 0 {
			rep.Problems = append(rep.Problems, Problem{Kind: "empty lock document", Subject: lockName(d), Detail: "no holder", Repaired: repair})
			changed = changed || repair
		}
		if changed {
			nd := d
			nd.Holders, nd.Waiters = keep, waiters
			if _, err := fb.Bulk(ctx, store.WriteLocks([]store.LockWrite{{Doc: nd, Delete: len(keep) == 0 && len(waiters) == 0}})); err != nil {
				return rep, err
			}
		}
	}
	if err := fb.RefreshAll(ctx); err != nil {
		return rep, err
	}
	// Paths.
	paths := map[string]pathInfo{}
	var docs []store.Dentry
	sc := fb.ScanTree("/", store.DefaultPageSize)
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			sc.Close()
			return rep, err
		}
		for _, b := range bad {
			rep.Problems = append(rep.Problems, Problem{Kind: "corrupt path document", Subject: "?", Detail: b.Error()})
		}
		if page == nil {
			break
		}
		for _, d := range page {
			rep.Paths++
			if d.Intent.Op != "" {
				vis, ok, err := c.View.resolve(ctx, d)
				if err != nil {
					sc.Close()
					return rep, err
				}
				rec, _ := fb.GetOp(ctx, d.Intent.Op)
				if rec.State != store.OpDone && !dead(rec.Owner) {
					// In flight: judged when it finishes.
				} else {
					p := Problem{Kind: "stray intent", Subject: d.Path, Detail: fmt.Sprintf("%s of operation %s (%s)", d.Intent.Role, d.Intent.Op, rec.State)}
					if repair {
						p.Repaired = c.Journal.resolveStray(ctx, d) == nil
					}
					rep.Problems = append(rep.Problems, p)
				}
				if !ok {
					continue
				}
				d = vis
			}
			docs = append(docs, d)
			paths[d.Path] = pathInfo{d.Type, d.Ino}
		}
	}
	sc.Close()
	links := map[uint64][]string{}
	for _, d := range docs {
		links[d.Ino] = append(links[d.Ino], d.Path)
		if d.Path == "/" {
			continue
		}
		parent, ok := paths[d.Parent]
		if !ok || parent.typ != store.TypeDir {
			p := Problem{Kind: "orphan path", Subject: d.Path, Detail: "its parent is missing or not a directory"}
			if repair {
				_, err := fb.Write(ctx, store.DeleteDentry(d.Path, d.Ver))
				p.Repaired = err == nil
			}
			rep.Problems = append(rep.Problems, p)
		}
	}
	// Inodes: every path's inode exists, and every inode is reachable.
	inodes := map[uint64]store.Inode{}
	isc := fb.ScanInodes()
	for {
		page, bad, err := isc.Next(ctx)
		if err != nil {
			return rep, err
		}
		for _, b := range bad {
			rep.Problems = append(rep.Problems, Problem{Kind: "corrupt inode document", Subject: "?", Detail: b.Error()})
		}
		if page == nil {
			break
		}
		for _, n := range page {
			inodes[n.Ino] = n
		}
	}
	rep.Inodes = len(inodes)
	if err := c.lookAgain(ctx, fb, inodes, links, paths); err != nil {
		return rep, err
	}
	inos := make([]uint64, 0, len(links))
	for ino := range links {
		inos = append(inos, ino)
	}
	sort.Slice(inos, func(i, j int) bool { return inos[i] < inos[j] })
	for _, ino := range inos {
		ps := links[ino]
		n, ok := inodes[ino]
		if !ok {
			for _, p := range ps {
				pr := Problem{Kind: "missing inode", Subject: p, Detail: fmt.Sprintf("inode %d does not exist", ino)}
				rep.Problems = append(rep.Problems, pr)
			}
			continue
		}
		if n.Type == store.TypeDir && len(ps) > 1 {
			rep.Problems = append(rep.Problems, Problem{Kind: "duplicate directory", Subject: fmt.Sprintf("inode %d", ino), Detail: fmt.Sprintf("at %q", ps)})
		} else if n.Type != store.TypeDir && int(n.Nlink) != len(ps) {
			p := Problem{Kind: "link count", Subject: fmt.Sprintf("inode %d", ino), Detail: fmt.Sprintf("nlink %d but %d paths %q", n.Nlink, len(ps), ps)}
			if repair && int(n.Nlink) > len(ps) {
				fixed := n
				fixed.Nlink = uint32(len(ps))
				_, err := fb.Write(ctx, store.PutInode(fixed, n.Ver))
				p.Repaired = err == nil
			}
			rep.Problems = append(rep.Problems, p)
		}
		for _, p := range ps {
			if info := paths[p]; info.typ != n.Type {
				rep.Problems = append(rep.Problems, Problem{Kind: "type mismatch", Subject: p, Detail: fmt.Sprintf("path says %s, inode %d says %s", info.typ, ino, n.Type)})
			}
		}
	}
	// Directory link counts: 2 plus the subdirectories.
	subdirs := map[string]int{}
	for _, d := range docs {
		if d.Type == store.TypeDir && d.Path != "/" {
			subdirs[d.Parent]++
		}
	}
	for _, d := range docs {
		n, ok := inodes[d.Ino]
		if d.Type != store.TypeDir || !ok || n.Type != store.TypeDir || int64(n.Nlink) == 2+int64(subdirs[d.Path]) {
			continue
		}
		// The snapshots are older than now: a mkdir or rmdir since moved
		// the count, so it is judged again on a fresh read and count.
		n, subs, err := c.countDirLinks(ctx, fb, d.Path, d.Ino)
		if errors.Is(err, store.ErrNotFound) {
			continue // removed meanwhile
		}
		if err == nil && n.Type == store.TypeDir && int64(n.Nlink) == 2+int64(subs) {
			continue
		}
		if err != nil {
			n, subs = inodes[d.Ino], subdirs[d.Path]
		}
		p := Problem{Kind: "directory link count", Subject: d.Path,
			Detail: fmt.Sprintf("nlink %d, want %d (2 + %d subdirectories)", n.Nlink, 2+subs, subs)}
		if !n.DirLinksCounted() {
			p.Detail = fmt.Sprintf("not counted (made by an esfs that did not count; reported as 1), want %d (2 + %d subdirectories)", 2+subs, subs)
		}
		if err != nil {
			p.Detail += ": cannot count again: " + err.Error()
		} else if repair {
			// Written at the version read before the count, so that a
			// mkdir or rmdir that lands meanwhile makes the write fail
			// rather than be undone by it.
			n.Nlink = uint32(2 + subs)
			_, werr := fb.Write(ctx, store.PutInode(n, n.Ver))
			p.Repaired = werr == nil
			if werr != nil {
				p.Detail += ": changed while being counted (run fsck again): " + werr.Error()
			}
		}
		rep.Problems = append(rep.Problems, p)
	}
	for ino, n := range inodes {
		if _, ok := links[ino]; ok || ino == store.RootIno {
			continue
		}
		p := Problem{Kind: "unreachable inode", Subject: fmt.Sprintf("inode %d", ino), Detail: fmt.Sprintf("%s of %d bytes, no path names it", n.Type, n.Size)}
		if repair {
			_, err := fb.Write(ctx, store.DeleteInode(ino, n.Ver))
			if err == nil && n.Type == store.TypeFile && n.Size > 0 {
				_, err = fb.DeleteChunks(ctx, ino, 0, (n.Size-1)/fb.ChunkSize(), store.DataVersion(n.Dgen+1, 0))
			}
			p.Repaired = err == nil
		}
		rep.Problems = append(rep.Problems, p)
	}
	if err := c.fsckData(ctx, fb, repair, inodes, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

type pathInfo struct {
	typ store.FileType
	ino uint64
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
func (c *Coordinator) lookAgain(ctx context.Context, fb FsckBackend, inodes map[uint64]store.Inode, links map[uint64][]string, paths map[string]pathInfo) error {
	var suspects []uint64
	for ino, ps := range links {
		if n, ok := inodes[ino]; !ok || (n.Type != store.TypeDir && int(n.Nlink) != len(ps)) {
			suspects = append(suspects, ino)
		}
	}
	for ino := range inodes {
		if _, ok := links[ino]; !ok && ino != store.RootIno {
			suspects = append(suspects, ino)
		}
	}
	if len(suspects) == 0 {
		return nil
	}
	if err := fb.Refresh(ctx); err != nil {
		return err
	}
	sort.Slice(suspects, func(i, j int) bool { return suspects[i] < suspects[j] })
	named := map[uint64][]string{}
	const batch = 10000 // below index.max_terms_count
	for start := 0; start < len(suspects); start += batch {
		sc, err := c.View.Search("", suspects[start:min(start+batch, len(suspects))], store.SearchFilter{}, store.DefaultPageSize)
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
				named[vis.Ino] = append(named[vis.Ino], vis.Path)
				paths[vis.Path] = pathInfo{vis.Type, vis.Ino}
			}
		}
		sc.Close()
	}
	for _, ino := range suspects {
		if ps := named[ino]; len(ps) > 0 {
			links[ino] = ps
		} else {
			delete(links, ino)
		}
		n, err := fb.GetInode(ctx, ino)
		switch {
		case errors.Is(err, store.ErrNotFound):
			delete(inodes, ino)
		case err == nil:
			inodes[ino] = n
		} // else unreadable (a corrupt document, reported already): as the scan saw it
	}
	return nil
}

// countDirLinks reads a directory's inode, then counts its visible
// subdirectories in a listing taken after a refresh.
func (c *Coordinator) countDirLinks(ctx context.Context, fb FsckBackend, path string, ino uint64) (store.Inode, int, error) {
	res, err := fb.GetInodes(ctx, []uint64{ino})
	if err != nil {
		return store.Inode{}, 0, err
	}
	if res[0].Err != nil {
		return store.Inode{}, 0, res[0].Err
	}
	n := res[0].Inode
	if err := fb.Refresh(ctx); err != nil {
		return store.Inode{}, 0, err
	}
	sc := c.View.List(path, store.DefaultPageSize)
	defer sc.Close()
	count := 0
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

func lockName(d store.LockDoc) string {
	if d.ID == store.GlobalLockID {
		return "(global lock)"
	}
	return d.Path
}

// judgeAll watches every session long enough to tell live from dead:
// twice, a lease plus grace apart, when wait is set and some session is
// neither declared dead nor seen moving.
func (c *Coordinator) judgeAll(ctx context.Context, wait bool) error {
	first, err := c.obs.Watch(ctx)
	if err != nil {
		return err
	}
	if !wait {
		return nil
	}
	var longest time.Duration
	for _, s := range first {
		if s.ID != c.Session().ID() && !s.Dead {
			longest = max(longest, time.Duration(s.LeaseMs)*time.Millisecond)
		}
	}
	if longest == 0 {
		return nil
	}
	deadline := time.Now().Add(longest + c.cfg.Grace + longest/2)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(longest / 4):
		}
		all, err := c.obs.Watch(ctx)
		if err != nil {
			return err
		}
		undecided := false
		for _, s := range all {
			if s.ID == c.Session().ID() || s.Dead {
				continue
			}
			// Seen moving since the first look: alive.
			moved := true
			for _, f := range first {
				if f.ID == s.ID && f.Counter == s.Counter {
					moved = false
				}
			}
			if !moved {
				undecided = true
			}
		}
		if !undecided {
			return nil
		}
	}
	return nil
}
