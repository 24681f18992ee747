package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// SessionDoc is one mount's session: a heartbeat counter advanced by
// compare-and-set. Liveness is judged by watching Counter not move on the
// observer's own clock, never by comparing timestamps across machines;
// Started and Host are for people reading `esfs status`.
type SessionDoc struct {
	ID      string
	Counter int64
	Host    string
	Pid     int
	Mount   string
	Started int64 // wall clock of the mount, display only
	LeaseMs int64
	// Dead is set by the mount that declared this session dead (with a
	// compare-and-set, so the owner's next heartbeat fails: it is fenced).
	Dead   bool
	DeadBy string
	// DoneBelow: every operation of this session numbered below it is
	// finished, so strays of those operations can be collected.
	DoneBelow int64
	// Stats are the mount's own figures (operations, errors, cache hits...)
	// as of its last heartbeat, for `esfs status`.
	Stats map[string]float64
	// Build is the esfs that runs the mount (version, revision), and
	// Options the flags it was mounted with that matter to an operator
	// (read-only, delegations, lease...), for `esfs status`. Empty in the
	// documents of older mounts.
	Build   string
	Options map[string]string
	// Nudge is where the mount listens for nudges and the token they
	// must carry ("host:port token", see locking/nudge.go); empty: it
	// takes none (an older esfs, or turned off), and is polled only.
	Nudge string
	Ver   Version
}

type sessionJSON struct {
	Session string `json:"session"`
	Counter int64  `json:"counter"`
	Host    string `json:"host"`
	Pid     int    `json:"pid"`
	Started int64  `json:"started"`
	Lease   int64  `json:"lease"`
	Fenced  bool   `json:"fenced"`
	Body    struct {
		Mount     string             `json:"mount,omitempty"`
		DeadBy    string             `json:"dead_by,omitempty"`
		DoneBelow int64              `json:"done_below,omitempty"`
		Stats     map[string]float64 `json:"stats,omitempty"`
		Build     string             `json:"build,omitempty"`
		Options   map[string]string  `json:"options,omitempty"`
		Nudge     string             `json:"nudge,omitempty"`
	} `json:"body"`
}

func encodeSession(d SessionDoc) sessionJSON {
	j := sessionJSON{Session: d.ID, Counter: d.Counter, Host: d.Host, Pid: d.Pid, Started: d.Started, Lease: d.LeaseMs, Fenced: d.Dead}
	j.Body.Mount = encodeText(d.Mount)
	j.Body.DeadBy = d.DeadBy
	j.Body.DoneBelow = d.DoneBelow
	j.Body.Stats = d.Stats
	j.Body.Build = d.Build
	j.Body.Options = d.Options
	j.Body.Nudge = d.Nudge
	return j
}

func decodeSession(src []byte, v Version) (SessionDoc, error) {
	var j sessionJSON
	if err := json.Unmarshal(src, &j); err != nil || j.Session == "" {
		return SessionDoc{}, fmt.Errorf("session document: %w", ErrCorrupt)
	}
	m, _ := decodeText(j.Body.Mount)
	return SessionDoc{ID: j.Session, Counter: j.Counter, Host: j.Host, Pid: j.Pid, Mount: m, Started: j.Started,
		LeaseMs: j.Lease, Dead: j.Fenced, DeadBy: j.Body.DeadBy, DoneBelow: j.Body.DoneBelow, Stats: j.Body.Stats,
		Build: j.Body.Build, Options: j.Body.Options, Nudge: j.Body.Nudge, Ver: v}, nil
}

// GetSession reads a session in real time.
func (s *Store) GetSession(ctx context.Context, id string) (SessionDoc, error) {
	return getDoc(ctx, s, sessionKind, id, "reading session "+id)
}

// CreateSession registers a new session (op_type=create).
func CreateSession(d SessionDoc) BulkOp {
	return newOp("create", sessionsIndex, d.ID, Version{}, encodeSession(d), "registering session "+d.ID)
}

// PutSession overwrites a session if it is still at ifVer: the heartbeat,
// and the declaration of death.
func PutSession(d SessionDoc, ifVer Version) BulkOp {
	if !ifVer.Known() {
		return refused(fmt.Errorf("session %s without a version: %w", d.ID, ErrInvalid))
	}
	return newOp("index", sessionsIndex, d.ID, ifVer, encodeSession(d), "updating session "+d.ID)
}

// DeleteSession removes a session document, at ifVer when that is known (a
// clean unmount, or the collection of a dead session with nothing left).
func DeleteSession(id string, ifVer Version) BulkOp {
	return newOp("delete", sessionsIndex, id, ifVer, nil, "deleting session "+id)
}

// ListSessions returns every session, after a refresh.
func (s *Store) ListSessions(ctx context.Context) ([]SessionDoc, error) {
	hits, err := s.searchAll(ctx, s.idx.Sessions, map[string]any{"match_all": map[string]any{}}, "session")
	if err != nil {
		return nil, err
	}
	out := make([]SessionDoc, 0, len(hits))
	for _, h := range hits {
		d, err := decodeSession(h.Source, h.version())
		if err != nil {
			s.NoteDamaged("listing sessions", damaged(s.idx.name(sessionsIndex), h.ID, err))
			continue
		}
		out = append(out, d)
	}
	return out, nil
}
