//go:build !lockorder

// Package lockorder names the mutex type of the packages whose locks nest
// (fs/vfs and locking): sync.Mutex, or, built with -tags lockorder, a
// mutex that records the order in which each goroutine takes locks and
// stops the process at the first pair taken in both orders, a deadlock
// waiting for the wrong moment (github.com/sasha-s/go-deadlock). The test
// suite builds its mounts that way when ESFS_TEST_LOCKORDER is set.
package lockorder

import "sync"

// Mutex is sync.Mutex.
type Mutex = sync.Mutex

// Checked reports whether lock order is checked (built with -tags lockorder).
const Checked = false
