// Package fsck checks the invariants of a filesystem and repairs what
// breaks them: the operations and locks dead mounts left, the path and
// inode documents (parents, types, link counts, reachability) and the
// data chunks. It reads the tree through the protocol's view and settles
// what dead mounts left as recovery would: a check (Check) without a
// session, writing nothing; a repair (Repair) in an admin session.
package fsck

import (
	"context"
	"errors"
	"fmt"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// Backend is what fsck reads and repairs, beyond what the protocol uses.
type Backend interface {
	locking.Backend
	ScanInodes(which store.InodeSet) *store.InodeScanner
	GetInodes(ctx context.Context, inos []uint64) ([]store.InodeResult, error)
	DeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (int64, error)
	ChunkSize() int64
	GetInode(ctx context.Context, ino uint64) (store.Inode, error)
	ScanChunks() *store.ChunkScanner
	DamagedLockDocs(ctx context.Context) ([]*store.DocError, error)
	StoredChunks(ctx context.Context, ino uint64, from int64, limit int) ([]int64, error)
	ReadChunks(ctx context.Context, ino uint64, first, last int64) (map[int64][]byte, map[int64]int64, error)
	DeleteDamaged(c *store.DocError) store.BulkOp
}

var _ Backend = (*store.Store)(nil)

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
	// Leases: lock entries of dead mounts that cover no journaled
	// operation (create leases, delegations, a rename that never wrote
	// its record). Nothing was done under them that needs finishing:
	// whoever needs such a lock drops the entry; --repair drops them.
	Leases   []string
	Problems []Problem

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

// Judge tells live sessions from dead ones: a locking.Reader, which only
// judges (Check), or the session of a repair, which declares (Repair).
type Judge interface {
	Dead(ctx context.Context, id string) (bool, error)
	JudgeSessions(ctx context.Context, wait bool) error
}

// checker is one run of fsck: what it was asked, and the snapshots its
// steps compare.
type checker struct {
	judge Judge
	view  *locking.View
	co    *locking.Coordinator // the session that repairs; nil for a check
	fb    Backend
	// repair is co != nil.
	repair bool
	rep    Report

	paths  map[string]pathInfo    // visible paths
	docs   []store.Dentry         // the same, as read
	links  map[uint64][]string    // inode -> the paths that name it
	inodes map[uint64]store.Inode // the inode scan, read again where suspect
	docAt  map[string]int         // path -> its index in docs
	// entries and subdirs count the entries, and the directories among
	// them, of each path in docs.
	entries, subdirs map[string]uint32
	// aliased are the paths a repair would give an inode of their own
	// (see names), in a check.
	aliased map[string]bool
	// orphaned are the paths no directory leads to, left out of the
	// snapshot (see orphans).
	orphaned map[string]bool
	// awaitingDir are the inodes named by paths below a missing directory
	// that a repair makes again (left out of the snapshot until it is
	// made): named, not unreachable, though no path in the snapshot
	// names them.
	awaitingDir map[uint64]bool
}

type pathInfo struct {
	typ store.FileType
	ino uint64
}

// Check checks the invariants of the filesystem: every path document's
// parent exists and is a directory, its inode exists and agrees on the
// type, no path and no inode appears twice (unless hard-linked, and then
// the link count matches), no document carries the intent of a finished
// operation or of a dead mount's, no operation of a dead mount is
// unfinished, no lock entry of a dead mount is left, every inode is
// reachable, every directory's link count is 2 plus its subdirectories,
// every file's stored directory holds one of its links (see parents),
// every data chunk belongs to a file and lies within its size (see
// checker.data). Sessions are judged dead as the sweeper does: declared,
// or silent for their lease plus grace, which fsck waits for when it
// must (wait). It writes nothing: r has no session.
func Check(ctx context.Context, r *locking.Reader, fb Backend, wait bool) (Report, error) {
	return run(ctx, &checker{judge: r, view: r.View, fb: fb}, wait)
}

// Repair is Check that also does what recovery would: finishes or undoes
// dead mounts' operations, removes leftovers, orphans and strays. co is
// the session fsck runs in; it declares dead the sessions it judges so.
func Repair(ctx context.Context, co *locking.Coordinator, fb Backend, wait bool) (Report, error) {
	return run(ctx, &checker{judge: co, view: co.View, co: co, fb: fb, repair: true}, wait)
}

func run(ctx context.Context, c *checker, wait bool) (Report, error) {
	c.paths, c.links, c.inodes = map[string]pathInfo{}, map[uint64][]string{}, map[uint64]store.Inode{}
	c.docAt, c.entries, c.subdirs, c.aliased, c.orphaned, c.awaitingDir = map[string]int{}, map[string]uint32{}, map[string]uint32{}, map[string]bool{}, map[string]bool{}, map[uint64]bool{}
	if err := c.judge.JudgeSessions(ctx, wait); err != nil {
		return c.rep, err
	}
	// Operations first: recovery changes paths and locks.
	for _, step := range []func(context.Context) error{c.ops, c.locks, c.damagedLockDocs, c.scanPaths, c.scanInodes, c.dirLinks, c.parents, c.unreachable, c.data} {
		if err := step(ctx); err != nil {
			return c.rep, err
		}
	}
	return c.rep, nil
}

func (c *checker) dead(ctx context.Context, sess string) bool {
	d, err := c.judge.Dead(ctx, sess)
	return err == nil && d
}

// ops reports the unfinished operations of dead mounts, and recovers
// them when repairing.
func (c *checker) ops(ctx context.Context) error {
	recs, err := c.fb.SearchOps(ctx)
	if err != nil {
		return err
	}
	c.rep.Ops = len(recs)
	for _, rec := range recs {
		if rec.State == store.OpDone || (rec.State == store.OpAborted && rec.SrcIno == 0) {
			// Done, or the fence written when a dead mount's lock entry
			// was dropped for an operation that had no record: nothing
			// to finish or undo (the sweeper collects both).
			continue
		}
		if !c.dead(ctx, rec.Owner) {
			c.rep.InFlight = append(c.rep.InFlight, fmt.Sprintf("%s %s %q -> %q (owner %s)", rec.ID, rec.State, rec.Src, rec.Dst, rec.Owner))
			continue
		}
		p := Problem{Kind: "unfinished operation", Subject: rec.ID,
			Detail: fmt.Sprintf("%s rename %q -> %q of dead mount %s", rec.State, rec.Src, rec.Dst, rec.Owner)}
		if c.repair {
			if err := c.co.Journal.Recover(ctx, rec); err != nil {
				p.Detail += ": recovery failed: " + err.Error()
			} else {
				p.Repaired = true
			}
		}
		c.rep.Problems = append(c.rep.Problems, p)
	}
	return nil
}

// locks reports the lock entries and waiters of dead mounts and empty
// lock documents, and drops them when repairing.
func (c *checker) locks(ctx context.Context) error {
	locks, err := c.fb.SearchLocks(ctx)
	if err != nil {
		return err
	}
	c.rep.Locks = len(locks)
	for _, d := range locks {
		var keep []store.Holder
		changed := false
		for _, h := range d.Holders {
			if !c.dead(ctx, h.Session) {
				keep = append(keep, h)
				continue
			}
			_, err := c.fb.GetOp(ctx, h.Op)
			if errors.Is(err, store.ErrNotFound) {
				lease := fmt.Sprintf("%s: %s entry of dead mount %s, operation %s", lockName(d), h.Mode, h.Session, h.Op)
				if c.repair {
					if gone, err := c.co.Locks.HolderGone(ctx, h); err == nil && gone {
						lease += " (dropped)"
						changed = true
					} else {
						keep = append(keep, h)
					}
				} else {
					keep = append(keep, h)
				}
				c.rep.Leases = append(c.rep.Leases, lease)
				continue
			}
			if err != nil {
				return err
			}
			p := Problem{Kind: "leftover lock", Subject: lockName(d), Detail: fmt.Sprintf("%s entry of dead mount %s, operation %s", h.Mode, h.Session, h.Op)}
			if c.repair {
				if gone, err := c.co.Locks.HolderGone(ctx, h); err == nil && gone {
					p.Repaired, changed = true, true
				} else {
					keep = append(keep, h)
				}
			} else {
				keep = append(keep, h)
			}
			c.rep.Problems = append(c.rep.Problems, p)
		}
		var waiters []store.Waiter
		for _, w := range d.Waiters {
			if c.dead(ctx, w.Session) {
				c.rep.Problems = append(c.rep.Problems, Problem{Kind: "leftover waiter", Subject: lockName(d), Detail: "of dead mount " + w.Session, Repaired: c.repair})
				changed = changed || c.repair
				continue
			}
			waiters = append(waiters, w)
		}
		if len(d.Holders) == 0 && len(d.Waiters) == 0 {
			c.rep.Problems = append(c.rep.Problems, Problem{Kind: "empty lock document", Subject: lockName(d), Detail: "no holder", Repaired: c.repair})
			changed = changed || c.repair
		}
		if changed {
			nd := d
			nd.Holders, nd.Waiters = keep, waiters
			if _, err := c.fb.Bulk(ctx, store.WriteLocks([]store.LockWrite{{Doc: nd, Delete: len(keep) == 0 && len(waiters) == 0}})); err != nil {
				return err
			}
		}
	}
	return nil
}

// damagedLockDocs reports the documents of the locks index no reader can
// decode (lock documents, operation records), which every reader skips,
// and deletes them when repairing.
func (c *checker) damagedLockDocs(ctx context.Context) error {
	bad, err := c.fb.DamagedLockDocs(ctx)
	if err != nil {
		return err
	}
	for _, b := range bad {
		c.corrupt(ctx, "damaged lock or operation document", b)
	}
	return nil
}

func lockName(d store.LockDoc) string {
	if d.ID == store.GlobalLockID {
		return "(global lock)"
	}
	return d.Path
}
