package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// WrittenElsewhere reports whether a session other than self holds d (a
// directory's delegation lock) for writing: its entries may then exist
// only in that mount's memory until it is recalled.
func (d LockDoc) WrittenElsewhere(self string) bool {
	for _, h := range d.Holders {
		if h.Mode == Exclusive && h.Session != self {
			return true
		}
	}
	return false
}

// GetDentryWithLock reads the path document of path and the lock document
// lockID in one round trip: a reader learns, with the name, whether the
// directory is written elsewhere. The dentry's error is ErrNotFound when
// the path does not exist; a missing lock document is an empty LockDoc.
func (s *Store) GetDentryWithLock(ctx context.Context, path, lockID string) (Dentry, error, LockDoc, error) {
	what := fmt.Sprintf("reading path %q and lock %s", path, lockID)
	docs, err := s.mgetMixed(ctx, []docRef{{index: s.idx.name(pathsIndex), id: DocID(path)}, {index: s.idx.name(locksIndex), id: lockID}}, what)
	if err != nil {
		return Dentry{}, nil, LockDoc{}, err
	}
	var d Dentry
	derr := ErrNotFound
	if docs[0].Found {
		if d, derr = decodeDentry(docs[0].Source, docs[0].version()); derr == nil && d.Path != path {
			derr = fmt.Errorf("document holds path %q: %w", d.Path, ErrCorrupt)
		}
		derr = damaged(docs[0].Index, docs[0].ID, derr)
	}
	if derr != nil && !errors.Is(derr, ErrNotFound) {
		derr = fmt.Errorf("%s: %w", what, derr)
	}
	l, err := lockOf(docs[1], lockID)
	if err != nil {
		return Dentry{}, nil, LockDoc{}, fmt.Errorf("%s: %w", what, err)
	}
	return d, derr, l, nil
}

// lockOf decodes lock document id from an mget's answer g; a missing one
// is an empty LockDoc.
func lockOf(g getResult, id string) (LockDoc, error) {
	if !g.Found {
		return LockDoc{ID: id}, nil
	}
	l, err := decodeLock(g.Source, g.version())
	if err != nil {
		return LockDoc{}, damaged(g.Index, id, fmt.Errorf("lock document: %w", err))
	}
	l.ID = id
	return l, nil
}

// docRef names a document of an mget across indices; noSource asks for
// its versions alone.
type docRef struct {
	index, id string
	noSource  bool
}

// mgetMixed is mget across indices.
func (s *Store) mgetMixed(ctx context.Context, refs []docRef, what string) ([]getResult, error) {
	docs := make([]map[string]any, len(refs))
	for i, r := range refs {
		docs[i] = map[string]any{"_index": r.index, "_id": r.id}
		if r.noSource {
			docs[i]["_source"] = false
		}
	}
	body, _ := json.Marshal(map[string]any{"docs": docs})
	return s.mgetBody(ctx, "/_mget", body, len(refs), what)
}

// GetInodesWithLocks reads inodes inos and lock documents lockIDs in one
// round trip: a reader learns, with a directory's attributes, whether the
// directory is written elsewhere. Inodes come as GetInodes gives them; a
// missing lock document is an empty LockDoc, a damaged one an error in
// lockErrs (a DocError), for what it guards alone.
func (s *Store) GetInodesWithLocks(ctx context.Context, inos []uint64, lockIDs []string) (_ []InodeResult, _ []LockDoc, lockErrs []error, _ error) {
	what := fmt.Sprintf("reading %d inodes and %d locks", len(inos), len(lockIDs))
	refs := make([]docRef, 0, len(inos)+len(lockIDs))
	for _, ino := range inos {
		refs = append(refs, docRef{index: s.idx.name(inodesIndex), id: inodeID(ino)})
	}
	for _, id := range lockIDs {
		refs = append(refs, docRef{index: s.idx.name(locksIndex), id: id})
	}
	docs, err := s.mgetMixed(ctx, refs, what)
	if err != nil {
		return nil, nil, nil, err
	}
	out := make([]InodeResult, len(inos))
	for i, g := range docs[:len(inos)] {
		err := ErrNotFound
		if g.Found {
			out[i].Inode, err = inodeOf(g, inos[i])
		}
		if err != nil {
			out[i] = InodeResult{Err: fmt.Errorf("reading inode %d: %w", inos[i], err)}
		}
	}
	locks, lockErrs := make([]LockDoc, len(lockIDs)), make([]error, len(lockIDs))
	for i, g := range docs[len(inos):] {
		if locks[i], err = lockOf(g, lockIDs[i]); err != nil {
			locks[i], lockErrs[i] = LockDoc{ID: lockIDs[i]}, fmt.Errorf("%s: %w", what, err)
		}
	}
	return out, locks, lockErrs, nil
}
