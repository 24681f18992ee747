package fs

import (
	"fmt"
	"log"
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
	o := f.opts
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
	opts := &gofs.Options{
		MountOptions:    mo,
		EntryTimeout:    &entry,
		AttrTimeout:     &attr,
		NegativeTimeout: &neg,
		RootStableAttr:  &gofs.StableAttr{Ino: 1},
		Logger:          log.New(logWriter{f}, "", 0),
	}
	root := &node{f: f}
	srv, err := gofs.Mount(mountpoint, root, opts)
	if err != nil {
		return nil, fmt.Errorf("mounting %s: %w", mountpoint, err)
	}
	return &Server{srv: srv, fs: f}, nil
}

// Wait blocks until the filesystem is unmounted.
func (s *Server) Wait() { s.srv.Wait() }

// Unmount asks the kernel to unmount; open files are flushed by the
// releases the kernel sends first.
func (s *Server) Unmount() error {
	var err error
	for i := 0; i < 20; i++ {
		if err = s.srv.Unmount(); err == nil {
			return nil
		}
		time.Sleep(250 * time.Millisecond) // busy: a process is still using it
	}
	return err
}

// logWriter sends go-fuse's diagnostics to the structured log.
type logWriter struct{ f *FS }

func (w logWriter) Write(p []byte) (int, error) {
	w.f.log.Warn("fuse", "msg", string(p))
	return len(p), nil
}
