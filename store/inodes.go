package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// inodeDoc is the JSON of an inode document.
type inodeDoc struct {
	Ino     uint64            `json:"ino"`
	Type    string            `json:"type"`
	Mode    uint32            `json:"mode"`
	Uid     uint32            `json:"uid"`
	Gid     uint32            `json:"gid"`
	Size    int64             `json:"size"`
	Nlink   uint32            `json:"nlink"`
	Rdev    uint32            `json:"rdev,omitempty"`
	Atime   int64             `json:"atime"`
	Mtime   int64             `json:"mtime"`
	Ctime   int64             `json:"ctime"`
	Btime   int64             `json:"btime"`
	Target  string            `json:"target,omitempty"`
	Xattrs  map[string][]byte `json:"xattrs,omitempty"`
	Dgen    uint64            `json:"dgen,omitempty"`
	Chunks  *int64            `json:"chunks,omitempty"`
	Parents []uint64          `json:"parents,omitempty"`
	Keeper  string            `json:"keeper,omitempty"`
	LinkSeq uint64            `json:"lseq,omitempty"`
	LinkOps []string          `json:"lops,omitempty"`
}

func encodeInode(n Inode) inodeDoc {
	d := inodeDoc{Ino: n.Ino, Type: n.Type.String(), Mode: n.Mode, Uid: n.Uid, Gid: n.Gid,
		Size: n.Size, Nlink: n.Nlink, Rdev: n.Rdev, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime, Btime: n.Btime,
		Target: encodeText(n.Target), Dgen: n.Dgen, Keeper: n.Keeper, LinkSeq: n.LinkSeq, LinkOps: n.LinkOps}
	if n.Type != TypeDir {
		d.Parents = n.Parents
	}
	if n.Chunks >= 0 && n.Type == TypeFile {
		d.Chunks = &n.Chunks
	}
	if len(n.Xattrs) > 0 {
		d.Xattrs = make(map[string][]byte, len(n.Xattrs))
		for k, v := range n.Xattrs {
			d.Xattrs[encodeText(k)] = v
		}
	}
	return d
}

func decodeInode(src []byte, v Version) (Inode, error) {
	var d inodeDoc
	if err := json.Unmarshal(src, &d); err != nil {
		return Inode{}, fmt.Errorf("inode document: %w: %v", ErrCorrupt, err)
	}
	n := Inode{Ino: d.Ino, Mode: d.Mode, Uid: d.Uid, Gid: d.Gid, Size: d.Size, Nlink: d.Nlink, Rdev: d.Rdev,
		Atime: d.Atime, Mtime: d.Mtime, Ctime: d.Ctime, Btime: d.Btime, Dgen: d.Dgen, Chunks: -1, Parents: d.Parents, Keeper: d.Keeper,
		LinkSeq: d.LinkSeq, LinkOps: d.LinkOps, Ver: v}
	if d.Chunks != nil && *d.Chunks >= 0 {
		n.Chunks = *d.Chunks
	}
	var err error
	if n.Type, err = parseFileType(d.Type); err != nil {
		return Inode{}, fmt.Errorf("inode %d: %w: %v", d.Ino, ErrCorrupt, err)
	}
	if n.Target, err = decodeText(d.Target); err != nil {
		return Inode{}, err
	}
	if d.Size < 0 || d.Size > MaxFileSize || !validIno(d.Ino) || d.Mode > 0o7777 || d.Dgen > MaxDataGen {
		return Inode{}, fmt.Errorf("inode %d has size %d, mode %o: %w", d.Ino, d.Size, d.Mode, ErrCorrupt)
	}
	// Every link of a file is a path document, and a directory's count
	// is its subdirectories': a list longer than any count can be is
	// damage, which would cost every write of the inode.
	if len(d.Parents) > MaxLinks || len(d.LinkOps) > MaxLinks || n.Chunks > MaxFileSize {
		return Inode{}, fmt.Errorf("inode %d has %d parents, %d link operations, %d chunks: %w", d.Ino, len(d.Parents), len(d.LinkOps), n.Chunks, ErrCorrupt)
	}
	if len(d.Xattrs) > 0 {
		n.Xattrs = make(map[string][]byte, len(d.Xattrs))
		for k, val := range d.Xattrs {
			dk, err := decodeText(k)
			if err != nil {
				return Inode{}, err
			}
			n.Xattrs[dk] = val
		}
	}
	return n, nil
}

// inodeOf decodes inode ino from its document g, as a DocError if it is
// damaged or holds another inode.
func inodeOf(g getResult, ino uint64) (Inode, error) {
	n, err := decodeInode(g.Source, g.version())
	if err == nil && n.Ino != ino {
		err = fmt.Errorf("document holds inode %d: %w", n.Ino, ErrCorrupt)
	}
	if err != nil {
		return Inode{}, damaged(g.Index, g.ID, err)
	}
	return n, nil
}

// GetInode reads the attributes of ino, in real time.
func (s *Store) GetInode(ctx context.Context, ino uint64) (Inode, error) {
	what := fmt.Sprintf("reading inode %d", ino)
	n, err := getDoc(ctx, s, inodeKind, inodeID(ino), what)
	if err != nil {
		return Inode{}, err
	}
	if n.Ino != ino {
		return Inode{}, fmt.Errorf("%s: %w", what, damaged(s.idx.name(inodesIndex), inodeID(ino), fmt.Errorf("document holds inode %d: %w", n.Ino, ErrCorrupt)))
	}
	return n, nil
}

// InodeResult is one answer of GetInodes.
type InodeResult struct {
	Inode Inode
	Err   error
}

// GetInodes reads many inodes in one round trip, in order.
func (s *Store) GetInodes(ctx context.Context, inos []uint64) ([]InodeResult, error) {
	ids := make([]string, len(inos))
	for i, ino := range inos {
		ids[i] = inodeID(ino)
	}
	ns, errs, err := getDocs(ctx, s, inodeKind, ids, fmt.Sprintf("reading %d inodes", len(inos)))
	if err != nil {
		return nil, err
	}
	out := make([]InodeResult, len(inos))
	for i, n := range ns {
		err := errs[i]
		if err == nil && n.Ino != inos[i] {
			err = damaged(s.idx.name(inodesIndex), inodeID(inos[i]), fmt.Errorf("document holds inode %d: %w", n.Ino, ErrCorrupt))
		}
		if err != nil {
			out[i].Err = fmt.Errorf("reading inode %d: %w", inos[i], err)
			continue
		}
		out[i].Inode = n
	}
	return out, nil
}

// CreateInode creates the inode document of n.Ino if the number is free
// (ErrExists otherwise).
func CreateInode(n Inode) BulkOp {
	if n.Ino == 0 || n.Type == 0 {
		return refused(fmt.Errorf("inode without number or type: %w", ErrInvalid))
	}
	return withBlocks(newOp("create", inodesIndex, inodeID(n.Ino), Version{}, encodeInode(n), fmt.Sprintf("creating inode %d", n.Ino)), n)
}

// PutInode overwrites the inode document of n.Ino if it is still at ifVer.
func PutInode(n Inode, ifVer Version) BulkOp {
	if !ifVer.Known() {
		return refused(fmt.Errorf("overwriting inode %d without a version: %w", n.Ino, ErrInvalid))
	}
	return withBlocks(newOp("index", inodesIndex, inodeID(n.Ino), ifVer, encodeInode(n), fmt.Sprintf("updating inode %d", n.Ino)), n)
}

// withBlocks makes o, the write of inode n's whole document, carry n's
// st_blocks in the "blocks" field (see BulkOp.blocksOf), so that esfs du
// sums them with an aggregation: they cannot be derived from size and
// chunks in a query (the cluster may run no scripts), and a sparse file's
// are fewer than its size says. Every full write of an inode carries it;
// the partial updates (TouchInode, SetCtime) change only times and keep
// it. Inodes written by an esfs before it have none: du reads those.
func withBlocks(o BulkOp, n Inode) BulkOp {
	if o.err == nil {
		o.blocksOf = &Inode{Type: n.Type, Size: n.Size, Chunks: n.Chunks}
	}
	return o
}

// DeleteInode deletes the inode document of ino if it is still at ifVer.
func DeleteInode(ino uint64, ifVer Version) BulkOp {
	if !ifVer.Known() {
		return refused(fmt.Errorf("deleting inode %d without a version: %w", ino, ErrInvalid))
	}
	return newOp("delete", inodesIndex, inodeID(ino), ifVer, nil, fmt.Sprintf("deleting inode %d", ino))
}

// DeleteDamaged deletes the damaged document c (of a path, an inode or
// the locks index) if it is still at the version the scan read.
func (s *Store) DeleteDamaged(c *DocError) BulkOp {
	var index indexRole
	for _, r := range []indexRole{pathsIndex, inodesIndex, locksIndex} {
		if s.idx.name(r) == c.Index {
			index = r
		}
	}
	what := fmt.Sprintf("deleting damaged document %s of index %s", c.ID, c.Index)
	if index == 0 {
		return refused(fmt.Errorf("%s: not one fsck repairs: %w", what, ErrInvalid))
	}
	if !c.Ver.Known() {
		return refused(fmt.Errorf("%s without a version: %w", what, ErrInvalid))
	}
	return newOp("delete", index, c.ID, c.Ver, nil, what)
}

// TouchInode sets the mtime and ctime of an inode with a partial update,
// which Elasticsearch applies atomically on the current document without a
// read on our side: directory timestamps change on every create and unlink
// in the directory, and a compare-and-set loop there would make siblings
// created in parallel conflict with each other.
func TouchInode(ino uint64, mtime, ctime int64) BulkOp {
	o := newOp("update", inodesIndex, inodeID(ino), Version{},
		map[string]any{"doc": map[string]int64{"mtime": mtime, "ctime": ctime}},
		fmt.Sprintf("touching inode %d", ino))
	o.retryOnConflict = 5
	return o
}

// SetCtime sets an inode's ctime with a partial update (a rename changes
// the ctime of what it moves).
func SetCtime(ino uint64, ctime int64) BulkOp {
	o := newOp("update", inodesIndex, inodeID(ino), Version{},
		map[string]any{"doc": map[string]int64{"ctime": ctime}},
		fmt.Sprintf("setting the ctime of inode %d", ino))
	o.retryOnConflict = 5
	return o
}

// InodeScanner pages through every inode document in inode number order
// (for fsck). Near-realtime: refresh the inode index first via Refresh(SearchedAll).
type InodeScanner struct {
	s     *Store
	query map[string]any
	size  int // hits per page; DefaultPageSize if 0
	after []any
	done  bool
}

// InodeSet selects the inodes a scan pages through.
type InodeSet int

const (
	// AllInodes: every inode (fsck).
	AllInodes InodeSet = iota
	// KeptInodes: the files kept without links by the mounts that have
	// them open (Inode.Keeper), for the sweeper.
	KeptInodes
)

// ScanInodes starts a scan of the inodes of set which.
func (s *Store) ScanInodes(which InodeSet) *InodeScanner {
	q := map[string]any{"match_all": map[string]any{}}
	if which == KeptInodes {
		q = map[string]any{"exists": map[string]any{"field": "keeper"}}
	}
	return &InodeScanner{s: s, query: q}
}

// Next returns the next page of inodes, or nil at the end; undecodable
// documents come back as errors in bad.
func (sc *InodeScanner) Next(ctx context.Context) (page []Inode, bad []error, err error) {
	if sc.done {
		return nil, nil, nil
	}
	if sc.size <= 0 {
		sc.size = DefaultPageSize
	}
	req := map[string]any{"size": sc.size, "query": sc.query,
		"sort": []any{map[string]any{"ino": "asc"}}, "seq_no_primary_term": true, "track_total_hits": false}
	if sc.after != nil {
		req["search_after"] = sc.after
	}
	var out struct {
		Hits struct {
			Hits []searchHit `json:"hits"`
		} `json:"hits"`
	}
	if err := sc.s.search(ctx, "scanning inodes", sc.s.idx.Inodes, req, &out); err != nil {
		return nil, nil, err
	}
	hits := out.Hits.Hits
	if len(hits) < sc.size {
		sc.done = true
	}
	if len(hits) > 0 {
		sc.after = hits[len(hits)-1].Sort
	}
	for _, h := range hits {
		n, err := decodeInode(h.Source, h.version())
		if err != nil {
			bad = append(bad, damagedAt(sc.s.idx.name(inodesIndex), h.ID, h.version(), err))
			continue
		}
		page = append(page, n)
	}
	return page, bad, nil
}

// AddDirLinks adds delta to the link count of directory ino, for a
// subdirectory made, removed, or moved in or out, with compare-and-set,
// reading again on conflict (there are no scripts to add atomically). When
// t is not 0 it also sets the directory's mtime and ctime, as the change of
// its entries. A count not kept (see DirLinksCounted) stays as it is, and
// a count never goes below 2: a drift is fsck's to repair, not a reason to
// make a directory look uncounted.
//
// A write whose outcome is unknown (its answer lost, refused, held past
// the timeout) is settled by reading again, as callers cannot (a rename
// moves a count once, marked done before: campaign seed 610759803): the
// document names the last count changes made (DirLinksLanded), so that
// one that landed is known as such, and one that did not is made again
// at the version read, which a late copy of the first then cannot
// follow. Only when more count changes than the document names came
// after it can it not be told, and an error of ErrUnavailable is
// returned (fsck --repair counts the directory). unknown are writes of
// this same change the caller already made (WithDirLinks(delta, t), at
// their Ver), whose outcome it does not know: they are settled so too.
// At most one of all these writes can land (each was made at the
// version of a read that showed the ones before had not, and could not
// any more), and they all make the same change.
func (s *Store) AddDirLinks(ctx context.Context, ino uint64, delta int, t int64, unknown ...Inode) (Inode, error) {
	sent := slices.Clone(unknown)
	var sentErr error
	if len(sent) > 0 {
		sentErr = fmt.Errorf("a write of directory %d's link count had an unknown outcome: %w", ino, ErrUnavailable)
	}
	for attempt, unread, unsure := 0, 0, 0; ; attempt++ {
		n, err := s.GetInode(ctx, ino)
		if errors.Is(err, ErrUnavailable) && unread < 3 && ctx.Err() == nil {
			// Nothing written yet: a read is safe to try again, and the
			// callers cannot (a rename's count moves once, marked done
			// before: campaign seed 418038309, where one refused read
			// left a directory one link short).
			unread++
			Backoff(ctx, unread+4, time.Second)
			continue
		}
		if err != nil {
			return Inode{}, err
		}
		for _, w := range sent {
			if landed, known := DirLinksLanded(n, w); landed {
				return n, nil
			} else if !known {
				return Inode{}, sentErr
			}
		}
		changed, ok := WithDirLinks(n, delta, t)
		if !ok {
			return n, nil
		}
		v, err := s.Write(ctx, PutInode(changed, n.Ver))
		if errors.Is(err, ErrUnavailable) && unsure < 3 && ctx.Err() == nil {
			unsure++
			if sentErr == nil {
				sentErr = err
			}
			changed.Ver = n.Ver
			sent = append(sent, changed)
			Backoff(ctx, attempt+6, time.Second)
			continue
		}
		if errors.Is(err, ErrConflict) && attempt < 100 {
			Backoff(ctx, attempt, InodeBackoff)
			continue
		}
		if err != nil {
			return Inode{}, err
		}
		changed.Ver = v
		return changed, nil
	}
}

// WithDirLinks returns directory n with delta more links (none below 2,
// and a count not kept left alone) and, when t is not 0, its mtime and
// ctime set to t. ok is false when nothing changes. A change of the count
// is named: LinkSeq counts it, and LinkOps gets an id of its own (see
// DirLinksLanded).
func WithDirLinks(n Inode, delta int, t int64) (Inode, bool) {
	if n.Type != TypeDir {
		return n, false
	}
	ok := false
	if n.DirLinksCounted() && delta != 0 {
		n.Nlink = uint32(max(2, int64(n.Nlink)+int64(delta)))
		n.LinkSeq++
		ops := n.LinkOps
		if len(ops) >= linkOpsKept {
			ops = ops[len(ops)-linkOpsKept+1:]
		}
		n.LinkOps = append(slices.Clip(ops), newLinkOp())
		ok = true
	}
	if t != 0 {
		n.Mtime, n.Ctime = t, t
		ok = true
	}
	return n, ok
}

// linkOpsKept is how many of its last count changes a directory's
// document names: a count write whose outcome is unknown is settled by a
// read right after it, and can be told as long as fewer changes of that
// directory's count came between.
const linkOpsKept = 8

// newLinkOp is the id of one change of a directory's count.
func newLinkOp() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// DirLinksLanded tells whether sent, a write of directory cur's count
// made by WithDirLinks (at version sent.Ver) whose outcome is unknown,
// landed, from cur, the directory as read after it: it did if cur names
// its change. It did not if cur is still at the version it was made at
// (it may land later: a write made now at that version keeps it from
// it), or if cur names every count change since, and not that one (a
// write conditioned on a version that has gone can never land). known is
// false when more changes came since than cur names.
func DirLinksLanded(cur, sent Inode) (landed, known bool) {
	if len(sent.LinkOps) == 0 {
		return false, cur.Ver == sent.Ver // not a change of the count
	}
	if slices.Contains(cur.LinkOps, sent.LinkOps[len(sent.LinkOps)-1]) {
		return true, true
	}
	// sent.LinkSeq-1 changes were made before it; cur.LinkSeq-(that)
	// since, all named if there are no more than cur names.
	return false, cur.Ver == sent.Ver || cur.LinkSeq < sent.LinkSeq+uint64(len(cur.LinkOps))
}
