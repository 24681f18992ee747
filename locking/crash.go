package locking

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// crashPoint kills the process on the spot (SIGKILL, no cleanup) when the
// environment variable ESFS_CRASH_POINT names this point. Crash tests use it
// to stop a mount at a chosen step of the protocol and check that another
// mount recovers. It costs one getenv otherwise.
//
// The points: rename-after-record, rename-mid-stage, rename-before-commit,
// rename-after-commit, rename-mid-finish, rename-before-release (the steps
// of a rename), rename-after-links-marked (a finish that marked the link
// counts it moves, before it moves them), batch-after-record,
// batch-before-commit and batch-after-commit (the steps of a write
// delegation's batch; removing-batch-after-record and so on stop only a
// batch that changes stored names), and resolve-after-first-page (a search-driven finish or
// rollback, as recovery runs it, after its first page of documents).
//
// ESFS_CRASH_POINT=NAME:fatal dies of a fatal error of the Go runtime
// instead ("fatal error: sync: unlock of unlocked mutex", exit status 2):
// the runtime's own way out, exit_group, as when it runs out of memory.
func crashPoint(name string) error {
	point, how, _ := strings.Cut(os.Getenv("ESFS_CRASH_POINT"), ":")
	if point != name {
		return nil
	}
	if how == "fatal" {
		fmt.Fprintf(os.Stderr, "esfs: crash point %s reached: a fatal error\n", name)
		var mu sync.Mutex
		mu.Unlock() // not recoverable: the runtime's fatal error
	}
	fmt.Fprintf(os.Stderr, "esfs: crash point %s reached: killing myself\n", name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // never returns
}

// CrashPoint is crashPoint for the other layers of the daemon. Its points:
// flush-after-chunks (a file's flush, once its chunks are written and
// before its inode's size is).
func CrashPoint(name string) { _ = crashPoint(name) }

// CrashPointAfter reaches crash point name after d unless the returned
// stop is called first (it reports whether it stopped it). Its points:
// recall-invalidations-held (a recall whose invalidations the kernel has
// not taken for a second: a thread of the daemon held in the kernel, as
// a death may find one). When ESFS_CRASH_POINT names another point it
// arms nothing.
func CrashPointAfter(name string, d time.Duration) (stop func() bool) {
	if point, _, _ := strings.Cut(os.Getenv("ESFS_CRASH_POINT"), ":"); point != name {
		return func() bool { return false }
	}
	return time.AfterFunc(d, func() { _ = crashPoint(name) }).Stop
}
