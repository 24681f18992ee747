package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// A recall document is a mount's mailbox for recalls: one per session, in
// the lock index, listing the delegation locks other mounts wait for. A
// mount that holds delegations reads only this one document, often, instead
// of every delegation lock it holds; a mount that needs one of them adds
// its lock id here. The adding is a partial update (merged by
// Elasticsearch, created if absent), so recallers never conflict with each
// other or need a read; the holder deletes the document at the version it
// read once it has answered every recall listed, so that a recall added
// meanwhile survives.

// Recalls is a session's recall document: the delegation lock ids asked
// for, each with when it was first asked (the recaller's clock, for
// display and latency only).
type Recalls struct {
	Session string
	Wanted  map[string]int64
	// By names, for each lock id wanted, the session of the last mount
	// that asked (none from a reader, or an older esfs): the holder
	// nudges it once it has given the lock back (locking/nudge.go).
	By  map[string]string
	Ver Version
}

// recallJSON reuses the lock documents' fields: "waiters" is opaque in the
// mapping, here an object from lock id to time, and so is "body", here
// {"by": {lock id: session}}. An update merges both objects into what is
// there.
type recallJSON struct {
	Kind    string           `json:"kind"`
	Path    string           `json:"path"`
	Waiters map[string]int64 `json:"waiters"`
	Body    *recallBody      `json:"body,omitempty"`
}

type recallBody struct {
	By map[string]string `json:"by,omitempty"`
}

func recallID(session string) string { return "R" + session }

// RecallDeleg is the write that asks session to give back delegation lock
// lockID.
func RecallDeleg(session, lockID string, t int64) BulkOp {
	return RecallDelegBy(session, lockID, t, "")
}

// RecallDelegBy is RecallDeleg from session by, which the holder tells
// once it has given the lock back (see Recalls.By).
func RecallDelegBy(session, lockID string, t int64, by string) BulkOp {
	body := recallJSON{Kind: "recall", Path: encodeText(session), Waiters: map[string]int64{lockID: t}}
	if by != "" {
		body.Body = &recallBody{By: map[string]string{lockID: by}}
	}
	o := newOp("update", locksIndex, recallID(session), Version{},
		map[string]any{"doc": body, "doc_as_upsert": true},
		fmt.Sprintf("recalling %s from session %s", lockID, session))
	o.retryOnConflict = 5
	return o
}

// ClearRecalls deletes a session's recall document at the version read.
func ClearRecalls(r Recalls) BulkOp {
	if !r.Ver.Known() {
		return refused(fmt.Errorf("clearing the recalls of %s without a version: %w", r.Session, ErrInvalid))
	}
	return newOp("delete", locksIndex, recallID(r.Session), r.Ver, nil, "clearing the recalls of session "+r.Session)
}

var recallKind = docKind[Recalls]{index: locksIndex, decode: decodeRecalls}

func decodeRecalls(src []byte, v Version) (Recalls, error) {
	var j recallJSON
	if err := json.Unmarshal(src, &j); err != nil || j.Kind != "recall" {
		return Recalls{}, ErrCorrupt
	}
	s, err := decodeText(j.Path)
	if err != nil {
		return Recalls{}, err
	}
	r := Recalls{Session: s, Wanted: j.Waiters, Ver: v}
	if j.Body != nil {
		r.By = j.Body.By
	}
	return r, nil
}

// GetRecalls reads session's recall document in real time; none is an
// empty Recalls, not an error.
func (s *Store) GetRecalls(ctx context.Context, session string) (Recalls, error) {
	r, err := getDoc(ctx, s, recallKind, recallID(session), "reading the recalls of session "+session)
	if errors.Is(err, ErrNotFound) {
		return Recalls{Session: session}, nil
	}
	return r, err
}
