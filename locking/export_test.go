package locking

import (
	"context"

	"github.com/esfs/esfs/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Freeze stops the heartbeat without ending the session, as a frozen
// (SIGSTOPped, suspended) mount would; Thaw resumes it.
func (s *Session) Freeze() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = true
}

func (s *Session) Thaw() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.frozen = false
}

// MoveParents is moveParents, for the tests of its fence.
func (j *Journal) MoveParents(ctx context.Context, sess *Session, op string, moves []store.ParentMove) []uint64 {
	return j.moveParents(ctx, sess, op, moves)
}

// NudgeCounter is the series of esfs_nudges_total for kind and result.
func NudgeCounter(m *Metrics, kind, result string) prometheus.Counter {
	return m.nudges.WithLabelValues(kind, result)
}
