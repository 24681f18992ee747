package fs

import "syscall"

// kernelNode is what the kernel holds of one inode, as the mount's state
// sees it: what it must make the kernel forget when another mount's
// change makes it wrong, a name under a directory (NotifyEntry) or the
// attributes and pages of a file (NotifyContent with offset -1). The
// adapter's nodes (go-fuse's *Inode) are kernelNodes; the state keeps
// them as this, never as go-fuse's type.
type kernelNode interface {
	NotifyEntry(name string) syscall.Errno
	NotifyContent(off, size int64) syscall.Errno
}
