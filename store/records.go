package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// OpState is the state of a journaled operation. PREPARED -> COMMITTED ->
// DONE, or PREPARED -> ABORTED (-> DONE once cleaned, with Aborted set).
type OpState string

const (
	OpPrepared  OpState = "prepared"
	OpCommitted OpState = "committed"
	OpAborted   OpState = "aborted"
	OpDone      OpState = "done"
)

// LockRef names one lock an operation holds, so that whoever finishes the
// operation can release it.
type LockRef struct {
	ID   string   `json:"id"`
	Path string   `json:"p"`
	Mode LockMode `json:"m"`
}

// OpRecord is one journaled operation (a rename). Every change to it is a
// compare-and-set at Ver; Owner and Epoch fence a paused former owner.
type OpRecord struct {
	ID    string
	State OpState
	Owner string // session id
	Epoch int64
	// What the rename does.
	Src, Dst string
	SrcIno   uint64
	SrcType  FileType
	// Overwritten is the inode a rename over an existing target replaces
	// (0 when the target did not exist); it loses a link at the end.
	Overwritten     uint64
	OverwrittenType FileType
	Aborted         bool // a DONE record that was rolled back
	// LinkDropped: the overwritten inode's link was (being) dropped. Set by
	// compare-and-set before the drop, so that the drop happens at most
	// once; a crash in between leaves a count one too high, never too low.
	LinkDropped bool
	Locks       []LockRef // held under this operation
	Created     int64     // wall clock of the creator, for display only
	Ver         Version

	// SrcParent and DstParent are the inodes of the source's and the
	// destination's directories, whose link counts a directory rename
	// moves (0 in records of an esfs that did not count). DirLinksMoved,
	// set as LinkDropped is, makes that happen at most once.
	SrcParent, DstParent uint64
	DirLinksMoved        bool

	// NewInos are the inodes a batch (a write delegation's flush, see
	// locking.Journal.Flush) creates; a batch has no Src. Rolling a batch
	// back deletes them: nothing else can name an inode made in it.
	NewInos []uint64
	// DropInos are the inodes of the stored names a batch removes (an
	// unlink, an rmdir): each loses a link once the batch commits (at most
	// once, under LinkDropped), and goes with its data when none is left.
	// A rollback leaves them as they were: nothing was dropped before the
	// commit point.
	DropInos []uint64
	// DirLinks are the link counts a batch's stage set on directories
	// that existed, for its rollback to put back.
	DirLinks []DirLinkChange
	// Moves are the files a batch moves between directories (renames of
	// stored files in memory): whoever finishes the batch moves their
	// Parents (see ParentMoves).
	Moves []ParentMove
}

// DirLinkChange is a directory's link count before and after a batch.
type DirLinkChange struct {
	Ino    uint64 `json:"ino"`
	Before uint32 `json:"before"`
	After  uint32 `json:"after"`
}

// ParentMoves are the moves of files' Parents (see Inode.Parents) that
// finishing r makes once it has committed: a rename's of a file to
// another directory, a batch's Moves. A directory has no Parents: its own
// delegation holds its attributes.
func (r OpRecord) ParentMoves() []ParentMove {
	switch {
	case r.Src == "":
		return r.Moves // a batch
	case r.SrcType == TypeDir || r.SrcParent == 0 || r.DstParent == 0 || r.SrcParent == r.DstParent:
		return nil
	}
	return []ParentMove{{Ino: r.SrcIno, From: r.SrcParent, To: r.DstParent}}
}

// IsBatch reports whether r is a write delegation's batch, not a rename.
func (r OpRecord) IsBatch() bool { return r.Src == "" && (len(r.NewInos) > 0 || len(r.DropInos) > 0) }

type opBody struct {
	Src             string          `json:"src"`
	Dst             string          `json:"dst"`
	SrcIno          uint64          `json:"src_ino"`
	SrcType         string          `json:"src_type"`
	Overwritten     uint64          `json:"ovr_ino,omitempty"`
	OverwrittenType string          `json:"ovr_type,omitempty"`
	Aborted         bool            `json:"aborted,omitempty"`
	LinkDropped     bool            `json:"link_dropped,omitempty"`
	SrcParent       uint64          `json:"src_parent,omitempty"`
	DstParent       uint64          `json:"dst_parent,omitempty"`
	DirLinksMoved   bool            `json:"dir_links_moved,omitempty"`
	NewInos         []uint64        `json:"new_inos,omitempty"`
	DropInos        []uint64        `json:"drop_inos,omitempty"`
	DirLinks        []DirLinkChange `json:"dir_links,omitempty"`
	Moves           []ParentMove    `json:"moves,omitempty"`
	Locks           []LockRef       `json:"locks"`
	Created         int64           `json:"created"`
}

type opJSON struct {
	Kind  string `json:"kind"`
	Op    string `json:"op"`
	State string `json:"state"`
	Owner string `json:"owner"`
	Epoch int64  `json:"epoch"`
	Body  opBody `json:"body"`
}

func opID(id string) string { return "O" + id }

func encodeOp(r OpRecord) opJSON {
	b := opBody{Src: encodeText(r.Src), Dst: encodeText(r.Dst), SrcIno: r.SrcIno, SrcType: r.SrcType.String(),
		Overwritten: r.Overwritten, Aborted: r.Aborted, LinkDropped: r.LinkDropped, Locks: r.Locks, Created: r.Created,
		SrcParent: r.SrcParent, DstParent: r.DstParent, DirLinksMoved: r.DirLinksMoved, NewInos: r.NewInos, DropInos: r.DropInos, DirLinks: r.DirLinks, Moves: r.Moves}
	if r.Overwritten != 0 {
		b.OverwrittenType = r.OverwrittenType.String()
	}
	return opJSON{Kind: "op", Op: r.ID, State: string(r.State), Owner: r.Owner, Epoch: r.Epoch, Body: b}
}

func decodeOp(src []byte, v Version) (OpRecord, error) {
	var j opJSON
	if err := json.Unmarshal(src, &j); err != nil || j.Kind != "op" {
		return OpRecord{}, fmt.Errorf("operation record: %w", ErrCorrupt)
	}
	r := OpRecord{ID: j.Op, State: OpState(j.State), Owner: j.Owner, Epoch: j.Epoch, SrcIno: j.Body.SrcIno,
		Overwritten: j.Body.Overwritten, Aborted: j.Body.Aborted, LinkDropped: j.Body.LinkDropped, Locks: j.Body.Locks, Created: j.Body.Created, Ver: v,
		SrcParent: j.Body.SrcParent, DstParent: j.Body.DstParent, DirLinksMoved: j.Body.DirLinksMoved, NewInos: j.Body.NewInos, DropInos: j.Body.DropInos, DirLinks: j.Body.DirLinks, Moves: j.Body.Moves}
	var err error
	if r.Src, err = decodeText(j.Body.Src); err != nil {
		return OpRecord{}, err
	}
	if r.Dst, err = decodeText(j.Body.Dst); err != nil {
		return OpRecord{}, err
	}
	if r.SrcType, err = parseFileType(j.Body.SrcType); err != nil {
		return OpRecord{}, fmt.Errorf("operation %s: %w", r.ID, ErrCorrupt)
	}
	if r.Overwritten != 0 {
		if r.OverwrittenType, err = parseFileType(j.Body.OverwrittenType); err != nil {
			return OpRecord{}, fmt.Errorf("operation %s: %w", r.ID, ErrCorrupt)
		}
	}
	switch r.State {
	case OpPrepared, OpCommitted, OpAborted, OpDone:
	default:
		return OpRecord{}, fmt.Errorf("operation %s has state %q: %w", r.ID, r.State, ErrCorrupt)
	}
	for _, p := range []string{r.Src, r.Dst} {
		if p != "" && CheckPath(p) != nil {
			return OpRecord{}, fmt.Errorf("operation %s names path %q: %w", r.ID, p, ErrCorrupt)
		}
	}
	return r, nil
}

// GetOp reads an operation record in real time.
func (s *Store) GetOp(ctx context.Context, id string) (OpRecord, error) {
	r, err := getDoc(ctx, s, opKind, opID(id), "reading operation "+id)
	if err == nil && r.ID != id {
		err = &DocError{Index: s.idx.name(locksIndex), ID: opID(id), Err: fmt.Errorf("record of operation %q: %w", r.ID, ErrCorrupt)}
	}
	return r, err
}

// CreateOp creates the record of a new operation (op_type=create).
func CreateOp(r OpRecord) BulkOp {
	return newOp("create", locksIndex, opID(r.ID), Version{}, encodeOp(r), "creating operation "+r.ID)
}

// PutOp overwrites an operation record if it is still at ifVer.
func PutOp(r OpRecord, ifVer Version) BulkOp {
	if !ifVer.Known() {
		return refused(fmt.Errorf("operation %s without a version: %w", r.ID, ErrInvalid))
	}
	return newOp("index", locksIndex, opID(r.ID), ifVer, encodeOp(r), "updating operation "+r.ID)
}

// DeleteOp deletes a finished operation record, if it is still at ifVer
// when that is known.
func DeleteOp(id string, ifVer Version) BulkOp {
	return newOp("delete", locksIndex, opID(id), ifVer, nil, "deleting operation "+id)
}

// SearchOps lists operation records (all of them, or those in states),
// after a refresh: the sweeper and fsck must not miss a recent one.
func (s *Store) SearchOps(ctx context.Context, states ...OpState) ([]OpRecord, error) {
	q := []any{map[string]any{"term": map[string]any{"kind": "op"}}}
	if len(states) > 0 {
		ss := make([]string, len(states))
		for i, st := range states {
			ss[i] = string(st)
		}
		q = append(q, map[string]any{"terms": map[string]any{"state": ss}})
	}
	hits, err := s.searchAll(ctx, s.idx.Locks, map[string]any{"bool": map[string]any{"filter": q}}, "op")
	if err != nil {
		return nil, err
	}
	out := make([]OpRecord, 0, len(hits))
	for _, h := range hits {
		r, err := decodeOp(h.Source, h.version())
		if err == nil && opID(r.ID) != h.ID {
			err = fmt.Errorf("record of operation %q: %w", r.ID, ErrCorrupt)
		}
		if err != nil {
			s.NoteDamaged("listing operations", damaged(s.idx.name(locksIndex), h.ID, err))
			continue
		}
		out = append(out, r)
	}
	return out, nil
}
