package locking

import (
	"time"

	"golang.org/x/sys/unix"
)

// bootNow reads CLOCK_BOOTTIME: monotonic, and unlike CLOCK_MONOTONIC (which
// Go's time.Now uses) it keeps counting while the machine is suspended. A
// lease counted on a clock that stops during suspend would let a mount wake
// up believing it still holds locks that others have long taken over.
func bootNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic("CLOCK_BOOTTIME unavailable: " + err.Error()) // Linux >= 2.6.39
	}
	return time.Duration(ts.Nano())
}
