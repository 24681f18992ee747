package locking

import "time"

// RenewedAt is when the last renewal known to have landed was sent, on
// the boot clock.
func (s *Session) RenewedAt() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.renewedAt
}

// BootNow is the clock leases are counted on.
func BootNow() time.Duration { return bootNow() }
