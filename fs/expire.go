package fs

import (
	"encoding/binary"
	"os"
	"reflect"
	"syscall"
	"unsafe"

	"github.com/esfs/esfs/fs/vfs"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Expiring a name instead of dropping it.
//
// FUSE_NOTIFY_INVAL_ENTRY makes the kernel drop a name (d_invalidate): a
// directory dropped that way is unhashed even if it is some process's
// working directory, whose getcwd then fails with ENOENT (a shell's pwd,
// esfs find's "getwd: no such file or directory": TestFindDiff on a
// loaded machine, when a recall came between the chdir and the getcwd),
// and a mount on it is detached. With FUSE_EXPIRE_ONLY (Linux 6.2) the
// kernel keeps the name and only expires it: its next use asks this mount
// again (a LOOKUP, as for a name never seen), and the kernel keeps the
// same dentry if the answer is the same inode, drops it if not. That is
// all a recall needs: the kernel must not answer from what it was told,
// not forget it.
//
// go-fuse v2.12 sends FUSE_NOTIFY_INVAL_ENTRY without flags and keeps the
// /dev/fuse descriptor to itself, so the notification is written here on
// go-fuse's descriptor, reached by reflection: if a go-fuse version moves
// it, or the kernel lacks the flag, names are dropped as before
// (NotifyEntry), the mount logs a warning saying so, and
// TestWorkingDirectoryOutlivesRecalls fails.

// entryExpirer writes FUSE_NOTIFY_INVAL_ENTRY with FUSE_EXPIRE_ONLY on the
// mount's FUSE connection.
type entryExpirer struct {
	conn syscall.RawConn
}

// newEntryExpirer is srv's expirer: nil, and why, if the kernel cannot
// expire names only or go-fuse's descriptor cannot be reached.
func newEntryExpirer(srv *fuse.Server) (*entryExpirer, string) {
	if srv.KernelSettings().Flags64()&fuse.CAP_HAS_EXPIRE_ONLY == 0 {
		return nil, "the kernel cannot expire a name without dropping it (FUSE_EXPIRE_ONLY, Linux 6.2)"
	}
	file := fuseFile(srv)
	if file == nil {
		return nil, "go-fuse's FUSE descriptor is not where this esfs looks for it"
	}
	conn, err := file.SyscallConn()
	if err != nil {
		return nil, err.Error()
	}
	return &entryExpirer{conn: conn}, ""
}

// fuseFile is the *os.File go-fuse reads srv's requests from and writes
// its replies to (Server.fuseFD.file in go-fuse v2.12), or nil.
func fuseFile(srv *fuse.Server) *os.File {
	v := reflect.ValueOf(srv).Elem().FieldByName("fuseFD")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	v = v.Elem()
	if v.Kind() != reflect.Struct {
		return nil
	}
	f := v.FieldByName("file")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*os.File]() || f.IsNil() {
		return nil
	}
	// Reading an unexported field's pointer is allowed; it is never written.
	return (*os.File)(f.UnsafePointer())
}

// expire makes the kernel expire name under the node whose id is parent.
// The message is fuse_out_header (unique 0: a notification, its code in
// the error field) then fuse_notify_inval_entry_out and the name with its
// NUL, in one write, as the kernel reads a notification.
func (x *entryExpirer) expire(parent uint64, name string) syscall.Errno {
	const header, body = int(unsafe.Sizeof(fuse.OutHeader{})), int(unsafe.Sizeof(fuse.NotifyInvalEntryOut{}))
	msg := make([]byte, header+body+len(name)+1)
	binary.NativeEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.NativeEndian.PutUint32(msg[4:], uint32(-fuse.NOTIFY_INVAL_ENTRY))
	binary.NativeEndian.PutUint64(msg[8:], 0)
	binary.NativeEndian.PutUint64(msg[header:], parent)
	binary.NativeEndian.PutUint32(msg[header+8:], uint32(len(name)))
	binary.NativeEndian.PutUint32(msg[header+12:], fuse.EXPIRE_ONLY)
	copy(msg[header+body:], name)
	var errno syscall.Errno
	err := x.conn.Write(func(fd uintptr) bool {
		if _, err := unix.Write(int(fd), msg); err != nil {
			errno, _ = err.(syscall.Errno)
			if errno == 0 {
				errno = syscall.EIO
			}
		}
		return true
	})
	if err != nil && errno == 0 {
		return syscall.EBADF // go-fuse closed the connection: unmounted
	}
	return errno
}

// kernelNode is the kernel's node of an inode as the core holds it
// (vfs.KernelNode): go-fuse's node, which notifies what go-fuse can, and
// this mount's expirer for what it cannot.
type kernelNode struct {
	*gofs.Inode
	expirer *entryExpirer // nil: names are dropped
}

// ExpireEntry makes the kernel ask again about name before it next uses
// it, keeping the name meanwhile; where it cannot, the name is dropped.
// ExternalNodeID: a node's id is its inode number.
func (kn kernelNode) ExpireEntry(name string) syscall.Errno {
	if kn.expirer != nil {
		return kn.expirer.expire(kn.StableAttr().Ino, name)
	}
	return kn.NotifyEntry(name)
}

// kernelNode is in as a KernelNode: none when in is nil (an interface
// holding a nil pointer is not nil, and the state tests for none).
func (f *FS) kernelNode(in *gofs.Inode) vfs.KernelNode {
	if in == nil {
		return nil
	}
	return kernelNode{Inode: in, expirer: f.expirer}
}
