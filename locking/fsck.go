package locking

import (
	"context"
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
	PutInode(ctx context.Context, n store.Inode, ifVer store.Version) (store.Version, error)
	DeleteInode(ctx context.Context, ino uint64, ifVer store.Version) (store.Version, error)
	DeleteDentry(ctx context.Context, path string, ifVer store.Version) (store.Version, error)
	DeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (int64, error)
	ChunkSize() int64
	ScanChunks() *store.ChunkScanner
	DeleteChunkRefs(ctx context.Context, refs []store.ChunkRef) ([]error, error)
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
// reachable, every data chunk belongs to a file and lies within its size
// (see fsckData). Sessions are judged dead as the sweeper does: declared, or
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
			if _, err := fb.WriteLocks(ctx, []store.LockWrite{{Doc: nd, Delete: len(keep) == 0 && len(waiters) == 0}}); err != nil {
				return rep, err
			}
		}
	}
	if err := fb.RefreshAll(ctx); err != nil {
		return rep, err
	}
	// Paths.
	type pathInfo struct {
		typ store.FileType
		ino uint64
	}
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
				vis, ok, err := c.Journal.Visible(ctx, d)
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
				_, err := fb.DeleteDentry(ctx, d.Path, d.Ver)
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
				_, err := fb.PutInode(ctx, fixed, n.Ver)
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
	for ino, n := range inodes {
		if _, ok := links[ino]; ok || ino == store.RootIno {
			continue
		}
		p := Problem{Kind: "unreachable inode", Subject: fmt.Sprintf("inode %d", ino), Detail: fmt.Sprintf("%s of %d bytes, no path names it", n.Type, n.Size)}
		if repair {
			_, err := fb.DeleteInode(ctx, ino, n.Ver)
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
