package fsck

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/esfs/esfs/store"
)

// data checks that every data chunk belongs to an existing file and
// lies within its size. Elsewhere are leftovers: of a writer that died
// between its chunks and its inode (a mount's flush, an import), of a
// request that landed after the file was removed or cut. A live writer
// also has chunks there for a while (a mount sends chunks before the
// flush that sets the size; an import writes inodes and chunks in
// parallel): each chunk names its writer's session, and only those of
// sessions judged dead (or ended, or unrecorded) are problems. The inodes
// are those of the inode scan.
func (c *checker) data(ctx context.Context) error {
	fb, inodes, rep := c.fb, c.inodes, &c.rep
	cs := fb.ChunkSize()
	deadSess := map[string]bool{}
	dead := func(sess string) (bool, error) {
		if sess == "" {
			return true, nil // written before esfs recorded writers
		}
		if d, ok := deadSess[sess]; ok {
			return d, nil
		}
		d, err := c.judge.Dead(ctx, sess)
		if err != nil {
			return false, err
		}
		deadSess[sess] = d
		return d, nil
	}
	// within reports whether chunk r lies inside file n.
	within := func(n store.Inode, r store.ChunkRef) bool {
		return r.Consistent() && n.Type == store.TypeFile && n.Size > 0 && r.Chunk <= (n.Size-1)/cs
	}
	// Findings are summed per inode and per kind, not listed per chunk.
	type finding struct {
		ino         uint64
		live        bool
		sessions    map[string]bool
		count       int
		first, last int64
		removed     int
		failed      string
		misplaced   bool // some not where readers look (see store.ChunkRef.Consistent)
	}
	found := map[[2]uint64]*finding{}
	var order [][2]uint64
	note := func(r store.ChunkRef, live bool) *finding {
		k := [2]uint64{r.Ino, 0}
		if live {
			k[1] = 1
		}
		f := found[k]
		if f == nil {
			f = &finding{ino: r.Ino, live: live, sessions: map[string]bool{}, first: r.Chunk}
			found[k] = f
			order = append(order, k)
		}
		f.count++
		f.last = r.Chunk
		f.misplaced = f.misplaced || !r.Consistent()
		if r.Sess != "" {
			f.sessions[r.Sess] = true
		}
		return f
	}
	sc := fb.ScanChunks()
	for {
		page, err := sc.Next(ctx)
		if err != nil {
			return err
		}
		if page == nil {
			break
		}
		var gone []store.ChunkRef
		for _, r := range page {
			rep.Chunks++
			if n, ok := inodes[r.Ino]; ok && within(n, r) {
				continue
			}
			d, err := dead(r.Sess)
			if err != nil {
				return err
			}
			note(r, !d)
			if d {
				gone = append(gone, r)
			}
		}
		if c.repair && len(gone) > 0 {
			if err := c.removeChunks(ctx, gone, within, func(r store.ChunkRef, err error) {
				f := found[[2]uint64{r.Ino, 0}]
				switch {
				case err == nil:
					f.removed++
				case f.failed == "":
					f.failed = err.Error()
				}
			}); err != nil {
				return err
			}
		}
	}
	for _, k := range order {
		f := found[k]
		var where string
		if n, ok := inodes[f.ino]; f.misplaced {
			where = "at ids their inode and number do not make, or numbered below 0"
		} else if !ok {
			where = "of an inode that does not exist"
		} else if n.Type != store.TypeFile {
			where = "of a " + n.Type.String()
		} else {
			where = fmt.Sprintf("past its size of %d bytes", n.Size)
		}
		what := fmt.Sprintf("%d data chunks (%d..%d) %s", f.count, f.first, f.last, where)
		if f.live {
			rep.InFlight = append(rep.InFlight, fmt.Sprintf("inode %d: %s, written by live mount %s (not yet flushed)", f.ino, what, sessionList(f.sessions)))
			continue
		}
		p := Problem{Kind: "leftover data", Subject: fmt.Sprintf("inode %d", f.ino), Detail: what}
		if len(f.sessions) > 0 {
			p.Detail += ", written by dead or ended mount " + sessionList(f.sessions)
		}
		if c.repair {
			p.Repaired = f.removed == f.count
			if !p.Repaired {
				p.Detail += fmt.Sprintf(": %d removed", f.removed)
				if f.failed != "" {
					p.Detail += " (" + f.failed + ")"
				}
			}
		}
		rep.Problems = append(rep.Problems, p)
	}
	return nil
}

// removeChunks deletes leftover chunks of dead writers, after reading
// their inodes again in real time (one that appeared or grew since the
// scan makes its chunks data again), each only if it is still as listed.
// done is told each chunk's outcome (nil: gone).
func (c *checker) removeChunks(ctx context.Context, refs []store.ChunkRef,
	within func(store.Inode, store.ChunkRef) bool, done func(store.ChunkRef, error)) error {
	var inos []uint64
	seen := map[uint64]bool{}
	for _, r := range refs {
		if !seen[r.Ino] {
			seen[r.Ino] = true
			inos = append(inos, r.Ino)
		}
	}
	now, err := c.fb.GetInodes(ctx, inos)
	if err != nil {
		return err
	}
	current := map[uint64]store.Inode{}
	for i, r := range now {
		switch {
		case r.Err == nil:
			current[inos[i]] = r.Inode
		case !errors.Is(r.Err, store.ErrNotFound):
			return r.Err
		}
	}
	var del []store.ChunkRef
	for _, r := range refs {
		if n, ok := current[r.Ino]; ok && within(n, r) {
			done(r, fmt.Errorf("inode %d now holds chunk %d", r.Ino, r.Chunk))
			continue
		}
		del = append(del, r)
	}
	if len(del) == 0 {
		return nil
	}
	ops := make([]store.BulkOp, len(del))
	for i, r := range del {
		ops[i] = store.DeleteChunkRef(r)
	}
	res, err := c.fb.Bulk(ctx, ops)
	if err != nil {
		return err
	}
	for i, r := range del {
		err := res[i].Err
		if errors.Is(err, store.ErrNotFound) {
			err = nil // gone already
		}
		done(r, err)
	}
	return nil
}

func sessionList(set map[string]bool) string {
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}
