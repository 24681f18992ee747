package fs

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Server is a mounted filesystem.
type Server struct {
	srv *fuse.Server
	fs  *FS
}

// Mount mounts f at mountpoint and serves it in the background.
func Mount(mountpoint string, f *FS) (*Server, error) {
	root := &node{f: f}
	opts := mountOptions(f.opts, log.New(logWriter{f}, "", 0))
	var raw fuse.RawFileSystem = timedFS{RawFileSystem: gofs.NewNodeFS(root, opts), m: f.metrics}
	srv, err := fuse.NewServer(raw, mountpoint, &opts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", mountpoint, err)
	}
	go srv.Serve()
	if err := srv.WaitMount(); err != nil {
		return nil, fmt.Errorf("mounting %s: %w", mountpoint, err)
	}
	return &Server{srv: srv, fs: f}, nil
}

// mountOptions are the kernel and go-fuse options of an esfs mount.
func mountOptions(o Options, logger *log.Logger) *gofs.Options {
	// go-fuse uses zero timeouts whenever Options is non-nil, so every
	// kernel cache timeout is set explicitly here.
	entry, attr, neg := o.EntryTimeout, o.AttrTimeout, o.NegativeTimeout
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
		RootStableAttr:  &gofs.StableAttr{Ino: 1},
		Logger:          logger,
		// Modes are what was asked: without this, go-fuse shows a stored
		// 0000 as 0644 (0755 for directories). The kernel applies the
		// umask before the request reaches us (FUSE_DONT_MASK is not
		// negotiated), so the mode of a create is stored as it comes.
		NullPermissions: true,
	}
}

// Wait blocks until the filesystem is unmounted.
func (s *Server) Wait() { s.srv.Wait() }

// Shutdown makes every buffered write durable, then unmounts. If processes
// still have files open there, the mount is detached (lazy unmount): it
// disappears from the namespace at once, and their open files keep working
// until they close them, which is when Wait returns.
func (s *Server) Shutdown(mountpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	flushErr := s.fs.FlushAll(ctx)
	var err error
	for i := 0; i < 4; i++ {
		if err = s.srv.Unmount(); err == nil {
			return flushErr
		}
		time.Sleep(250 * time.Millisecond) // a process may be about to close
	}
	if lerr := lazyUnmount(mountpoint); lerr != nil {
		return fmt.Errorf("unmounting %s: %v; lazy unmount: %v", mountpoint, err, lerr)
	}
	s.fs.log.Warn("mount point busy: detached; serving open files until they are closed", "mountpoint", mountpoint)
	return flushErr
}

func lazyUnmount(mountpoint string) error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(mountpoint, syscall.MNT_DETACH)
	}
	for _, prog := range []string{"fusermount3", "fusermount"} {
		if p, err := exec.LookPath(prog); err == nil {
			if out, err := exec.Command(p, "-u", "-z", mountpoint).CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %s", prog, out)
			}
			return nil
		}
	}
	return fmt.Errorf("no fusermount3 to detach %s", mountpoint)
}

// logWriter sends go-fuse's diagnostics to the structured log.
type logWriter struct{ f *FS }

func (w logWriter) Write(p []byte) (int, error) {
	w.f.log.Warn("fuse", "msg", string(p))
	return len(p), nil
}
