package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// The lock index holds two kinds of documents, told apart by "kind": lock
// documents (one per locked path, plus the global lock) and operation
// records (the rename journal). Their meaning belongs to locking/; this file
// only stores and reads them, always with sequence numbers.

// LockMode is how a lock is held. Path locks are shared or exclusive.
// A directory's delegation lock (DelegLockID) is held exclusive by a write
// delegation, ReadDeleg by read delegations and Change by every change of
// the directory's entries or of their attributes: changes and read
// delegations exclude each other, and each is compatible with its own kind.
type LockMode string

const (
	Shared    LockMode = "S"
	Exclusive LockMode = "X"
	ReadDeleg LockMode = "R"
	Change    LockMode = "C"
	// Flushed is asked by a mount that is about to read a directory
	// another mount writes in memory (holds it Exclusive): it conflicts
	// with a write delegation only, so that its holder is recalled (and
	// flushes), and with nothing else.
	Flushed LockMode = "F"
	// FileRead and FileWrite are the advisory locks programs take on a
	// file's bytes (fcntl record locks, OFD locks, flock): documents
	// FileLockID, whose holders have ranges and owners (see Holder).
	FileRead  LockMode = "r"
	FileWrite LockMode = "w"
)

// Holder is one entry of a lock document: who holds it, for which
// operation, in which mode. Entries are per holder, never a counter, so a
// dead holder's share can be removed without guessing.
type Holder struct {
	Session string   `json:"s"`
	Op      string   `json:"o"`
	Mode    LockMode `json:"m"`
	Since   int64    `json:"t"` // wall clock of the holder, for display only
	// Batch is the operation of the last batch a write delegation's
	// holder flushed under this entry (see locking.Journal.Flush): the
	// recovery of a dead holder settles it before the entry goes.
	Batch string `json:"b,omitempty"`
	// File locks (documents FileLockID): the lock owner the kernel named
	// (a process's file table for POSIX locks, the open file for flock and
	// OFD locks), the byte range, both ends included (End math.MaxInt64:
	// to the end of the file, however long), the pid F_GETLK reports, and
	// whether it is a flock, which never conflicts with a record lock.
	Owner uint64 `json:"w,omitempty"`
	Start int64  `json:"a,omitempty"`
	End   int64  `json:"z,omitempty"`
	Pid   uint32 `json:"p,omitempty"`
	Flock bool   `json:"f,omitempty"`
}

// Waiter marks an exclusive request that was refused, so that shared
// requests younger than it yield (no starvation of renames).
type Waiter struct {
	Session string `json:"s"`
	Op      string `json:"o"`
	Ticket  string `json:"k"` // totally ordered: older tickets sort first
	Since   int64  `json:"t"`
	// Mode is the mode waited for; empty (documents written before there
	// were other modes) means Exclusive.
	Mode LockMode `json:"m,omitempty"`
	// File locks: what is waited for, as in Holder.
	Owner uint64 `json:"w,omitempty"`
	Start int64  `json:"a,omitempty"`
	End   int64  `json:"z,omitempty"`
	Flock bool   `json:"f,omitempty"`
}

// WaitMode is the mode w waits for.
func (w Waiter) WaitMode() LockMode {
	if w.Mode == "" {
		return Exclusive
	}
	return w.Mode
}

// LockDoc is one lock document. Found is false for a lock nobody holds
// (no document); Ver is then zero.
type LockDoc struct {
	ID      string
	Path    string
	Holders []Holder
	Waiters []Waiter
	Found   bool
	Ver     Version
}

// GlobalLockID is the id of the single lock of the global strategy.
const GlobalLockID = "G"

// LockID is the id of the lock document of path.
func LockID(path string) string { return "L" + DocID(path) }

// DelegLockID is the id of the delegation lock of directory ino. It is
// keyed by inode, not path: a delegation covers the directory's entries,
// which a rename of the directory or of an ancestor does not change.
func DelegLockID(ino uint64) string { return "D" + strconv.FormatUint(ino, 10) }

// IsDelegLock reports whether id is a delegation lock's.
func IsDelegLock(id string) bool { return strings.HasPrefix(id, "D") }

// FileLockID is the id of the document of the advisory locks on file
// ino: by inode, so that a rename keeps them.
func FileLockID(ino uint64) string { return "K" + strconv.FormatUint(ino, 10) }

// IsFileLock reports whether id is a file's advisory lock document.
func IsFileLock(id string) bool { return strings.HasPrefix(id, "K") }

type lockJSON struct {
	Kind    string   `json:"kind"`
	Path    string   `json:"path"`
	Holders []Holder `json:"holders"`
	Waiters []Waiter `json:"waiters,omitempty"`
}

func decodeLock(src []byte, v Version) (LockDoc, error) {
	var j lockJSON
	if err := json.Unmarshal(src, &j); err != nil || j.Kind != "lock" {
		return LockDoc{}, ErrCorrupt
	}
	p, err := decodeText(j.Path)
	if err != nil {
		return LockDoc{}, err
	}
	return LockDoc{Path: p, Holders: j.Holders, Waiters: j.Waiters, Found: true, Ver: v}, nil
}

// GetLocks reads lock documents in one round trip, in order.
func (s *Store) GetLocks(ctx context.Context, ids []string) ([]LockDoc, error) {
	docs, errs, err := getDocs(ctx, s, lockKind, ids, fmt.Sprintf("reading %d lock documents", len(ids)))
	if err != nil {
		return nil, err
	}
	out := make([]LockDoc, len(ids))
	for i, d := range docs {
		switch err := errs[i]; {
		case errors.Is(err, ErrNotFound):
			d = LockDoc{}
		case err != nil:
			return nil, fmt.Errorf("lock document %s: %w", ids[i], err)
		}
		d.ID = ids[i]
		out[i] = d
	}
	return out, nil
}

// LockWrite is one conditional change of a lock document: create it (when
// it did not exist), overwrite it at IfVer, or delete it at IfVer (when it
// has no holders and no waiters left).
type LockWrite struct {
	Doc    LockDoc
	Delete bool
}

// WriteLock is the write of w: a document that is not Found is created
// (op_type=create); others are overwritten, or deleted, at Doc.Ver.
func WriteLock(w LockWrite) BulkOp {
	d := w.Doc
	what := fmt.Sprintf("lock %q", d.Path)
	switch {
	case w.Delete:
		if !d.Ver.Known() {
			return refused(fmt.Errorf("deleting %s without a version: %w", what, ErrInvalid))
		}
		return newOp("delete", locksIndex, d.ID, d.Ver, nil, "releasing "+what)
	case !d.Found:
		return newOp("create", locksIndex, d.ID, Version{}, lockJSON{Kind: "lock", Path: encodeText(d.Path), Holders: nonNil(d.Holders), Waiters: d.Waiters}, "taking "+what)
	}
	return newOp("index", locksIndex, d.ID, d.Ver, lockJSON{Kind: "lock", Path: encodeText(d.Path), Holders: nonNil(d.Holders), Waiters: d.Waiters}, "updating "+what)
}

// WriteLocks are the writes of ws, in order, for one Bulk.
func WriteLocks(ws []LockWrite) []BulkOp {
	ops := make([]BulkOp, len(ws))
	for i, w := range ws {
		ops[i] = WriteLock(w)
	}
	return ops
}

func nonNil(h []Holder) []Holder {
	if h == nil {
		return []Holder{}
	}
	return h
}

// SearchLocks lists every lock document (for esfs locks, fsck, the sweeper).
func (s *Store) SearchLocks(ctx context.Context) ([]LockDoc, error) {
	hits, err := s.searchAll(ctx, s.idx.Locks, map[string]any{"term": map[string]any{"kind": "lock"}}, "path")
	if err != nil {
		return nil, err
	}
	out := make([]LockDoc, 0, len(hits))
	for _, h := range hits {
		var j lockJSON
		if err := json.Unmarshal(h.Source, &j); err != nil {
			s.NoteDamaged("listing locks", damaged(s.idx.name(locksIndex), h.ID, fmt.Errorf("lock document: %w: %v", ErrCorrupt, err)))
			continue
		}
		p, _ := decodeText(j.Path)
		out = append(out, LockDoc{ID: h.ID, Path: p, Holders: j.Holders, Waiters: j.Waiters, Found: true, Ver: h.version()})
	}
	return out, nil
}

// DamagedLockDocs lists the documents of the locks index that are no
// lock document, operation record or recall esfs can read (for fsck):
// every reader skips them, and one at a lock's id stops that lock from
// being taken. The index is small: one page of a search after a refresh.
func (s *Store) DamagedLockDocs(ctx context.Context) ([]*DocError, error) {
	if err := s.refresh(ctx, "refreshing "+s.idx.Locks, s.idx.Locks); err != nil {
		return nil, err
	}
	req := map[string]any{"size": 10000, "query": map[string]any{"match_all": map[string]any{}},
		"seq_no_primary_term": true, "track_total_hits": false}
	var out struct {
		Hits struct {
			Hits []searchHit `json:"hits"`
		} `json:"hits"`
	}
	if err := s.search(ctx, "searching "+s.idx.Locks, s.idx.Locks, req, &out); err != nil {
		return nil, err
	}
	var bad []*DocError
	for _, h := range out.Hits.Hits {
		var k struct {
			Kind string `json:"kind"`
		}
		err := json.Unmarshal(h.Source, &k)
		if err == nil {
			switch k.Kind {
			case "lock":
				var j lockJSON
				if err = json.Unmarshal(h.Source, &j); err == nil {
					_, err = decodeText(j.Path)
				}
			case "op":
				_, err = decodeOp(h.Source, h.version())
			case "recall":
				var j recallJSON
				err = json.Unmarshal(h.Source, &j)
			default:
				err = fmt.Errorf("unknown kind %q", k.Kind)
			}
		}
		if err != nil {
			bad = append(bad, &DocError{Index: s.idx.Locks, ID: h.ID, Err: err, Ver: h.version()})
		}
	}
	return bad, nil
}
