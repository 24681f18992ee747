package locking

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
