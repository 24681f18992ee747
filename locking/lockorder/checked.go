//go:build lockorder

package lockorder

import deadlock "github.com/sasha-s/go-deadlock"

// Mutex records the locks its goroutine holds when it is taken.
type Mutex = deadlock.Mutex

// Checked reports whether lock order is checked (built with -tags lockorder).
const Checked = true

func init() {
	// A lock waited for long is no finding here: a flush holds its
	// batch's gate for as long as the cluster takes to answer, and
	// fault tests hold answers back. An inconsistent order is: it is
	// reported (with both orders' stacks) and the process exits 2.
	deadlock.Opts.DeadlockTimeout = 0
}
