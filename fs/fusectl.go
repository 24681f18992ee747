package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// Aborting a mount's FUSE connection (fusectl), for a daemon that dies
// without letting go of it.
//
// When a daemon dies, the kernel fails the mount's requests (ECONNABORTED
// for those in flight, ENOTCONN for later ones) once the process's last
// descriptor of /dev/fuse is closed. That needs every thread of the
// process to finish dying, and one may be held in the kernel without
// end: a notification written to /dev/fuse (an entry invalidation) waits
// for its directory's lock, which a process's lookup there holds while it
// waits for this daemon's answer, which will never come. The process,
// its mount and every process using the mount then hang until the
// connection is aborted through fusectl. The mount's watchdog (cmd's
// watchdog.go) does that for it.

// fusectlDir is where the kernel's fusectl filesystem is mounted: a
// directory per FUSE connection, named by the connection's number (the
// minor device number of its mount).
const fusectlDir = "/sys/fs/fuse/connections"

// OpenAbort opens the abort file of FUSE connection conn, mounting fusectl
// first if nothing is mounted on its directory (systemd mounts it at boot;
// other systems may not). The file stays bound to that connection: once
// the connection has ended (its mount unmounted), writing it does
// nothing, even if a later mount's connection gets the same number. Only
// the user who mounted (and root) may write it; only root may mount
// fusectl.
func OpenAbort(conn int) (*os.File, error) {
	path := filepath.Join(fusectlDir, strconv.Itoa(conn), "abort")
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if errors.Is(err, os.ErrNotExist) {
		if merr := syscall.Mount("fusectl", fusectlDir, "fusectl", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); merr != nil && !errors.Is(merr, syscall.EBUSY) {
			return nil, fmt.Errorf("fusectl is not mounted on %s, and mounting it: %w", fusectlDir, merr)
		}
		f, err = os.OpenFile(path, os.O_WRONLY, 0)
	}
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Abort aborts the FUSE connection whose abort file is f (OpenAbort):
// every request waiting for the daemon fails with ECONNABORTED, every
// later one with ENOTCONN, and the daemon can serve nothing more. The
// mount stays until it is unmounted.
func Abort(f *os.File) error {
	_, err := f.Write([]byte("1"))
	return err
}

// closeFUSEOnExec keeps srv's /dev/fuse descriptor out of the processes
// this one starts (the watchdog): go-fuse opens it without O_CLOEXEC when
// it mounts as root, and a child holding it would keep the connection up
// after this daemon died. It reports whether it could.
func closeFUSEOnExec(file *os.File) bool {
	if file == nil {
		return false
	}
	rc, err := file.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(fd uintptr) { syscall.CloseOnExec(int(fd)) }) == nil
}
