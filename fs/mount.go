package fs

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/esfs/esfs/fs/vfs"
	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
)

// Server is a mounted filesystem.
type Server struct {
	srv        *fuse.Server
	fs         *FS
	mountpoint string
}

// Mount mounts core, the state of a mount, at mountpoint and serves it in the background.
//
// The daemon never opens, stats or walks anything below its own mount
// point, at any time: such a call waits in the kernel for an answer from
// this very process, and if the process is dying meanwhile (a signal, a
// fatal error) the thread can neither get the answer nor be killed, so
// the process and its mount hang for ever. That is why go-fuse's
// WaitMount is not called: once NewServer returns the kernel has the
// mount and its INIT was answered, and WaitMount would only add go-fuse's
// poll check, an open of a file below the mount point, which matters only
// to a program that also opens files in the mount it serves (every POLL
// request is answered ENOSYS regardless).
//
// reg registers the FUSE request metrics (nil: they count but nobody
// scrapes them). about is what the mount's root answers for AboutXattr.
func Mount(mountpoint string, core *vfs.Mount, reg prometheus.Registerer, about []byte) (*Server, error) {
	o := core.Options()
	f := &FS{core: core, opts: o, log: o.Logger, metrics: newRequestMetrics(reg), about: about}
	root := &node{f: f}
	opts := MountOptions(f.opts, log.New(logWriter{f}, "", 0))
	// flock and fcntl locks come to esfs (filelock.go), which holds them
	// across mounts; without this the kernel keeps them to this mount.
	opts.EnableLocks = true
	var raw fuse.RawFileSystem = orderedFS{RawFileSystem: gofs.NewNodeFS(root, opts), r: &f.releases}
	raw = timedFS{RawFileSystem: raw, m: f.metrics, owners: &f.flushOwners, keptAtMost: core.KeptAtMost}
	srv, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", mountpoint, err)
	}
	if !closeFUSEOnExec(fuseFile(srv)) {
		f.log.Warn("the FUSE descriptor could not be marked close-on-exec: the mount's watchdog holds it too, and a clean death of this daemon leaves its mount up until the watchdog aborts it")
	}
	x, why := newEntryExpirer(srv)
	if x == nil {
		f.log.Warn("names other mounts change are dropped from the kernel, not expired: a working directory in one fails getcwd (ENOENT) after a recall", "why", why)
	}
	f.expirer = x
	go srv.Serve()
	return &Server{srv: srv, fs: f, mountpoint: mountpoint}, nil
}

// MountOptions are the kernel and go-fuse options of an esfs mount (the
// benchmarks' floor mounts with them too).
func MountOptions(o vfs.Options, logger *log.Logger) *gofs.Options {
	// go-fuse uses zero timeouts whenever Options is non-nil, so every
	// kernel cache timeout is set explicitly here.
	entry, attr, neg := o.EntryTimeout, o.AttrTimeout, o.NegativeTimeout
	rootIno := o.RootIno
	if rootIno == 0 {
		rootIno = 1 // the filesystem's root (store.RootIno)
	}
	mo := fuse.MountOptions{
		AllowOther: o.AllowOther,
		FsName:     o.FsName,
		Name:       "esfs",
		// default_permissions: the kernel checks modes and owners, as on a
		// local filesystem; esfs stores them and does not check them twice.
		Options:      []string{"default_permissions"},
		MaxWrite:     1 << 20,
		MaxReadAhead: 1 << 20,
		DirectMount:  true, // as root, mount(2) directly; else fusermount3
		Debug:        o.Debug,
		// Symlink targets only change when the link is replaced, which
		// changes the inode too.
		EnableSymlinkCaching: true,
		MaxBackground:        64,
	}
	if o.ReadOnly {
		mo.Options = append(mo.Options, "ro")
	}
	return &gofs.Options{
		MountOptions:    mo,
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		RootStableAttr:  &gofs.StableAttr{Ino: rootIno},
		Logger:          logger,
		// Modes are what was asked: without this, go-fuse shows a stored
		// 0000 as 0644 (0755 for directories). The kernel applies the
		// umask before the request reaches us (FUSE_DONT_MASK is not
		// negotiated), so the mode of a create is stored as it comes.
		NullPermissions: true,
		// The kernel's id of a node is its inode number (store.NewIno:
		// random 63-bit numbers, unique, as good as never reused).
		// Otherwise each lookup makes a node with an id of its own, which
		// go-fuse drops when it already knows the inode, and a node that
		// the kernel forgot and looked up again gets a new id: the nodes
		// a delegation recorded as told would name ids the kernel does
		// not know, and its recall would invalidate nothing (campaign
		// seed 387179081, TestFindingRecallMissesKernelNode).
		ExternalNodeID: true,
	}
}

// Wait blocks until the kernel has ended the mount: unmounted, or
// detached and released by the last process that used it.
func (s *Server) Wait() { s.srv.Wait() }

// Unmount makes every buffered write durable, then unmounts. If processes
// still use the mount (a working directory, an open file) after a few
// tries, it is detached instead: it leaves the namespace at once, and what
// those processes hold keeps working until they let go (then Wait returns)
// or until Close. It reports whether it detached. go-fuse's Unmount is not
// used: as root it falls back to running fusermount3 without -z on a busy
// mount, several times, for nothing.
func (s *Server) Unmount(ctx context.Context) (detached bool, err error) {
	flushErr := s.fs.core.FlushAll(ctx)
	for delay := 50 * time.Millisecond; ; delay *= 2 {
		err = Unmount(s.mountpoint, false)
		if err == nil || errors.Is(err, syscall.EINVAL) {
			return false, flushErr // EINVAL: someone unmounted it already
		}
		if !errors.Is(err, syscall.EBUSY) || delay > time.Second {
			break
		}
		time.Sleep(delay) // a process may be about to close
	}
	if lerr := Unmount(s.mountpoint, true); lerr != nil {
		return false, errors.Join(fmt.Errorf("unmounting %s: %w; lazy unmount: %w", s.mountpoint, err, lerr), flushErr)
	}
	return true, flushErr
}

// Close ends the service of a detached mount that is still in use: from
// now on writes fail with EIO, and what was written before is made
// durable. Once the process exits, the kernel fails every later request
// of the mount with ENOTCONN.
func (s *Server) Close(ctx context.Context) error {
	return s.fs.core.Close(ctx)
}

// Unmount unmounts the mount at mountpoint, or detaches it if lazy (it
// leaves the namespace now and ends when no process uses it any more),
// without touching anything below it. As root this is umount2; otherwise
// fusermount3, which only the user who mounted may use. A busy mount's
// error wraps EBUSY.
func Unmount(mountpoint string, lazy bool) error {
	if os.Geteuid() == 0 {
		flags := unix.UMOUNT_NOFOLLOW
		if lazy {
			flags |= syscall.MNT_DETACH
		}
		if err := syscall.Unmount(mountpoint, flags); err != nil {
			return &os.PathError{Op: "umount", Path: mountpoint, Err: err}
		}
		return nil
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	for _, prog := range []string{"fusermount3", "fusermount"} {
		p, err := exec.LookPath(prog)
		if err != nil {
			continue
		}
		out, err := exec.Command(p, append(args, "--", mountpoint)...).CombinedOutput()
		if err == nil {
			return nil
		}
		msg := strings.TrimSpace(string(out))
		if strings.Contains(msg, "busy") {
			return fmt.Errorf("%s: %s: %w", prog, msg, syscall.EBUSY)
		}
		if strings.Contains(msg, "not mounted") || strings.Contains(msg, "not found in") {
			return fmt.Errorf("%s: %s: %w", prog, msg, syscall.EINVAL)
		}
		return fmt.Errorf("%s: %s", prog, msg)
	}
	return fmt.Errorf("cannot unmount %s: not root and no fusermount3 found", mountpoint)
}

// logWriter sends go-fuse's diagnostics to the structured log.
type logWriter struct{ f *FS }

func (w logWriter) Write(p []byte) (int, error) {
	w.f.log.Warn("fuse", "msg", string(p))
	return len(p), nil
}
