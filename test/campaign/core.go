package campaign

// Mounts as cores: a mount of the campaign's filesystem made in this test
// process (fs/vfs, with its own store client, session and cache, through
// its own fault proxy), driven by coreWorker instead of a worker process
// making system calls on a kernel mount. No kernel and no process is in
// the way: a run makes more operations a minute (1.3 times under -race,
// 1.6 without: most of an operation's time is Elasticsearch's), and a
// mount costs a few goroutines; what the kernel does before it asks
// FUSE (walking a path, the checks of the VFS, the lock owners it names)
// coreWorker does as Linux does, and the model decides the answers as for
// a kernel mount. It runs alongside the runs through kernel mounts, not
// instead of them: what the kernel keeps and is told to forget, and
// freezes and kills of a mount process, are theirs to test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/fs"
	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/campaign/wire"
	"github.com/esfs/esfs/test/mounttest"
)

// executor runs the campaign's operations on one mount: a worker process
// on a kernel mount, or a coreWorker on a core.
type executor interface {
	// do runs q and waits up to limit for its answer (errTimeout: none
	// came; errWorkerGone: the executor ended first).
	do(q *wire.Req, limit time.Duration) (*wire.Resp, error)
	kill()
}

// coreMount is one mount as a core in this process.
type coreMount struct {
	st  *store.Store
	co  *locking.Coordinator
	ch  *cache.Cache
	m   *vfs.Mount
	log *syncBuffer
}

// syncBuffer is a log kept in memory: the mount's, as a kernel mount's
// log file would hold it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// coreDirtyLimit is a core's vfs.Options.DirtyLimit: an open file's
// buffered writes past it are sent before its close. Lower than a
// mount's 32 MiB, so that the campaign's writes past it (bigWrite) cost
// a few chunks, not 33.
const coreDirtyLimit = 2 << 20

// startCore mounts filesystem f as a core reaching the cluster at url (a
// fault proxy), with the options of an esfs mount's defaults but lease
// and timeout.
func startCore(t testing.TB, f *mounttest.FS, url string, lease, timeout time.Duration, name string) *coreMount {
	t.Helper()
	c := &coreMount{log: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	st, err := store.New(store.Config{URLs: []string{url}, Prefix: f.Index, RequestTimeout: timeout, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := st.Open(ctx); err != nil {
		t.Fatal(err)
	}
	c.st = st
	if c.ch, err = cache.New(64<<20, time.Second, time.Second); err != nil {
		t.Fatal(err)
	}
	c.co, err = locking.Start(ctx, st, locking.Config{Lease: lease, LockTimeout: 30 * time.Second, Mount: name, Log: log,
		NudgeListen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	c.m = vfs.New(st, c.co, c.ch, vfs.Options{LockTimeout: 30 * time.Second, Logger: log,
		Delegations: true, WriteDelegations: true, CacheTTL: time.Second, DirtyLimit: coreDirtyLimit})
	t.Cleanup(c.close)
	return c
}

// close unmounts: what is buffered is flushed, the session ends.
func (c *coreMount) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = c.m.FlushAll(ctx)
	_ = c.m.Close(ctx)
	_ = c.co.Close(ctx)
	c.st.Close()
	c.ch.Close()
}

// Log is what the mount logged.
func (c *coreMount) Log() string { return c.log.String() }

// coreWorker makes the campaign's calls on a core, as the kernel would
// make them of a mount for a worker process.
type coreWorker struct {
	m   *vfs.Mount
	pid uint32 // stands for the worker process: its record locks' owner
	mu  sync.Mutex
	fds map[int]*coreFD
	// next numbers descriptors; owners numbers open file descriptions
	// (a flock's owner).
	next   int
	gone   chan struct{}
	closed sync.Once
}

// coreFD is an open file description kept open, a file's or a
// directory's, and refs the descriptors that name it (a dup adds one).
type coreFD struct {
	n     pathNode
	h     *vfs.Handle
	l     *vfs.Listing
	owner uint64 // the open file description, as the kernel names it to locks
	refs  int    // guarded by coreWorker.mu
}

// owners are the lock owners of the descriptor's open file description.
func (fd *coreFD) owners() *vfs.LockOwners {
	if fd.h != nil {
		return fd.h.Locks()
	}
	return fd.l.Locks()
}

func newCoreWorker(m *vfs.Mount, pid uint32) *coreWorker {
	return &coreWorker{m: m, pid: pid, fds: map[int]*coreFD{}, gone: make(chan struct{})}
}

func (w *coreWorker) kill() { w.closed.Do(func() { close(w.gone) }) }

func (w *coreWorker) do(q *wire.Req, limit time.Duration) (*wire.Resp, error) {
	done := make(chan *wire.Resp, 1)
	go func() {
		r := w.run(q)
		r.ID = q.ID
		done <- r
	}()
	select {
	case r := <-done:
		return r, nil
	case <-w.gone:
		return nil, errWorkerGone
	case <-time.After(limit):
		return nil, errTimeout
	}
}

// posixOwner is the worker's record locks' owner (the kernel names a
// process's files table).
func (w *coreWorker) posixOwner() uint64 { return 1<<32 | uint64(w.pid) }

// dirRef is a directory the walk found: its stored path and inode.
type dirRef struct {
	path string
	ino  uint64
}

func (d dirRef) StorePath() (string, bool) { return d.path, true }
func (d dirRef) Ino() uint64               { return d.ino }

// pathNode is an inode the walk found, as the kernel's dentry holds it.
type pathNode struct {
	dirRef
	typ  store.FileType
	name string
	dir  uint64 // the directory it was found in (0 for the root)
}

func (n pathNode) IsDir() bool { return n.typ == store.TypeDir }
func (n pathNode) InDir() (string, uint64, bool) {
	return n.name, n.dir, n.dir != 0
}

// errno is a call's error as the process sees it.
func errno(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return fs.Errno(err)
}

func failCall(r *wire.Resp, call string, err error) *wire.Resp {
	r.Errno, r.Failed = int(errno(err)), call
	return r
}

func errCall(r *wire.Resp, call string, err error) *wire.Resp {
	if err != nil {
		return failCall(r, call, err)
	}
	return r
}

var root = pathNode{dirRef: dirRef{path: "/", ino: store.RootIno}, typ: store.TypeDir}

// lookup asks the core for name in directory d, as the kernel's LOOKUP.
func (w *coreWorker) lookup(ctx context.Context, d pathNode, name string) (pathNode, error) {
	ans, err := w.m.LookupAt(ctx, d, nil, name)
	ans.Done()
	if err != nil {
		return pathNode{}, err
	}
	return pathNode{dirRef: dirRef{path: store.Join(d.path, name), ino: ans.Node.Ino}, typ: ans.Node.Type, name: name, dir: d.ino}, nil
}

// walk resolves rel as the kernel does, without following a final
// symlink. Every symlink target in the campaign names nothing, so one met
// on the way is ENOENT.
func (w *coreWorker) walk(ctx context.Context, rel string) (pathNode, error) {
	n := root
	for _, name := range split(rel) {
		switch n.typ {
		case store.TypeDir:
		case store.TypeSymlink:
			return pathNode{}, unix.ENOENT
		default:
			return pathNode{}, unix.ENOTDIR
		}
		var err error
		if n, err = w.lookup(ctx, n, name); err != nil {
			return pathNode{}, err
		}
	}
	return n, nil
}

// parent walks to the directory that holds (or would hold) rel.
func (w *coreWorker) parent(ctx context.Context, rel string) (pathNode, string, error) {
	dir, name := path.Split(rel)
	d, err := w.walk(ctx, strings.TrimSuffix(dir, "/"))
	if err != nil {
		return pathNode{}, "", err
	}
	switch d.typ {
	case store.TypeDir:
		return d, name, nil
	case store.TypeSymlink:
		return pathNode{}, "", unix.ENOENT
	}
	return pathNode{}, "", unix.ENOTDIR
}

// fresh: the name is free in d (the kernel's lookup before a create).
func (w *coreWorker) fresh(ctx context.Context, d pathNode, name string) error {
	_, err := w.lookup(ctx, d, name)
	switch {
	case err == nil:
		return unix.EEXIST
	case errors.Is(err, store.ErrNotFound), errno(err) == unix.ENOENT:
		return nil
	}
	return err
}

func (w *coreWorker) run(q *wire.Req) *wire.Resp {
	ctx, cancel := w.m.CallContext(context.Background())
	defer cancel()
	r := &wire.Resp{}
	switch q.Op {
	case "create", "mkdir", "symlink", "mkfifo":
		call := map[string]string{"create": "open", "mkdir": "mkdir", "symlink": "symlink", "mkfifo": "mknod"}[q.Op]
		d, name, err := w.parent(ctx, q.Path)
		if err == nil {
			err = w.fresh(ctx, d, name)
		}
		if err != nil {
			return failCall(r, call, err)
		}
		e := vfs.Entry{Type: store.TypeFile, Mode: q.Mode}
		switch q.Op {
		case "mkdir":
			e.Type = store.TypeDir
		case "symlink":
			e.Type, e.Mode, e.Target = store.TypeSymlink, 0o777, q.Path2
		case "mkfifo":
			e.Type = store.TypeFifo
		}
		if q.Op != "create" {
			_, err := w.m.MakeAt(ctx, d, name, e)
			return errCall(r, call, err)
		}
		_, h, err := w.m.CreateAt(ctx, d, name, e, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY)
		if err != nil {
			return failCall(r, call, err)
		}
		return w.writeClose(ctx, r, h, q, 0)
	case "write", "append":
		n, err := w.walk(ctx, q.Path)
		if err == nil {
			err = openable(n, false)
		}
		if err != nil {
			return failCall(r, "open", err)
		}
		flags := uint32(unix.O_WRONLY)
		if q.Op == "append" {
			flags |= unix.O_APPEND
		}
		h, err := w.m.Open(ctx, n.ino, flags)
		if err != nil {
			return failCall(r, "open", err)
		}
		return w.writeClose(ctx, r, h, q, q.Off)
	case "truncate":
		n, err := w.walk(ctx, q.Path)
		switch {
		case err != nil:
		case n.typ == store.TypeSymlink:
			err = unix.ENOENT
		case n.typ == store.TypeDir:
			err = unix.EISDIR
		case n.typ != store.TypeFile:
			err = unix.EINVAL
		default:
			err = w.m.Truncate(ctx, n, q.Len)
		}
		return errCall(r, "truncate", err)
	case "rename":
		return errCall(r, "rename", w.rename(ctx, q.Path, q.Path2))
	case "link":
		return errCall(r, "link", w.link(ctx, q.Path, q.Path2))
	case "unlink", "rmdir":
		return errCall(r, q.Op, w.remove(ctx, q.Path, q.Op == "rmdir"))
	case "chmod", "utimes", "setxattr", "removexattr":
		call := map[string]string{"chmod": "chmod", "utimes": "utimensat", "setxattr": "setxattr", "removexattr": "removexattr"}[q.Op]
		n, err := w.walk(ctx, q.Path)
		if err == nil && n.typ == store.TypeSymlink {
			err = unix.ENOENT // followed: the target names nothing
		}
		if err == nil {
			err = w.setattr(ctx, n, q)
		}
		return errCall(r, call, err)
	case "fsync":
		n, err := w.walk(ctx, q.Path)
		if err == nil && n.typ == store.TypeSymlink {
			err = unix.ELOOP
		}
		if err != nil {
			return failCall(r, "open", err)
		}
		switch n.typ {
		case store.TypeDir:
			l, err := w.m.OpenDir(ctx, n, nil)
			if err != nil {
				return failCall(r, "open", err)
			}
			err = w.m.SyncInode(ctx, n.ino, l.Reported())
			l.Close()
			return errCall(r, "fsync", err)
		case store.TypeFile:
			h, err := w.m.Open(ctx, n.ino, unix.O_RDONLY)
			if err != nil {
				return failCall(r, "open", err)
			}
			if err := h.Fsync(ctx); err != nil {
				w.closeFile(ctx, h)
				return failCall(r, "fsync", err)
			}
			return errCall(r, "close", w.closeFile(ctx, h))
		}
		return failCall(r, "fsync", unix.EINVAL) // a FIFO: the kernel's
	case "open":
		return w.open(ctx, r, q)
	case "stat":
		n, err := w.walk(ctx, q.Path)
		if err != nil {
			return failCall(r, "lstat", err)
		}
		st, call, err := w.stat(ctx, n, true)
		if err != nil {
			return failCall(r, call, err)
		}
		r.Stat = st
		return r
	case "read":
		b, call, err := w.readFile(ctx, q.Path)
		if err != nil {
			return failCall(r, call, err)
		}
		return digest(r, b, q.Full)
	case "tree":
		r.Tree = w.tree(ctx, q.Path, nil)
		return r
	case "readdir":
		n, err := w.walk(ctx, q.Path)
		if err == nil && n.typ != store.TypeDir {
			err = unix.ENOTDIR
		}
		if err != nil {
			return failCall(r, "open", err)
		}
		names, err := w.readDir(ctx, n)
		if err != nil {
			return failCall(r, "getdents", err)
		}
		r.Names = names
		return r
	}
	return w.throughFD(ctx, r, q)
}

// openable is what the kernel answers an open of n for writing (or, for
// read, reading) with O_NOFOLLOW|O_NONBLOCK before it asks the mount.
func openable(n pathNode, read bool) error {
	switch n.typ {
	case store.TypeSymlink:
		return unix.ELOOP
	case store.TypeDir:
		if read {
			return nil // the open succeeds, the read fails
		}
		return unix.EISDIR
	case store.TypeFifo:
		if read {
			return nil // the kernel's pipe: a read fails
		}
		return unix.ENXIO // no reader
	}
	return nil
}

// writeClose writes q's bytes at off through h and closes it; the close's
// error is the answer if the write had none.
func (w *coreWorker) writeClose(ctx context.Context, r *wire.Resp, h *vfs.Handle, q *wire.Req, off int64) *wire.Resp {
	var err error
	call := "pwrite"
	if q.Len > 0 {
		if q.Op == "append" {
			call = "write"
		}
		_, err = h.Write(ctx, wire.Pattern(q.Seq, off, q.Len), off)
	}
	cerr := w.closeFile(ctx, h)
	if err != nil {
		return failCall(r, call, err)
	}
	return errCall(r, "close", cerr)
}

// closeFile is close(2) of the last descriptor of h: FLUSH (with the
// process's record locks going) and RELEASE, whose error the process
// never sees.
func (w *coreWorker) closeFile(ctx context.Context, h *vfs.Handle) error {
	err := h.Flush(ctx, w.posixOwner(), true)
	_ = h.Release()
	return err
}

func (w *coreWorker) rename(ctx context.Context, src, dst string) error {
	od, oname, err := w.parent(ctx, src)
	if err != nil {
		return err
	}
	nd, nname, err := w.parent(ctx, dst)
	if err != nil {
		return err
	}
	old, err := w.lookup(ctx, od, oname)
	if err != nil {
		return err
	}
	if old.typ == store.TypeDir && isAncestor(src, path.Dir(dst)) && src != dst {
		return unix.EINVAL
	}
	victim, err := w.lookup(ctx, nd, nname)
	exists := err == nil
	if err != nil && errno(err) != unix.ENOENT {
		return err
	}
	if exists && isAncestor(dst, path.Dir(src)) && src != dst && path.Dir(src) != "." {
		return unix.ENOTEMPTY
	}
	if exists && victim.ino == old.ino {
		return nil // the same file: nothing happens
	}
	var guess vfs.RenameDirs
	if exists {
		switch {
		case old.IsDir() && !victim.IsDir():
			return unix.ENOTDIR
		case !old.IsDir() && victim.IsDir():
			return unix.EISDIR
		case victim.IsDir():
			guess.Replaced = victim.ino
		}
	}
	if old.IsDir() {
		guess.Moved = old.ino
	}
	return w.m.RenameAt(ctx, od, oname, nd, nname, &guess, false)
}

func (w *coreWorker) link(ctx context.Context, oldPath, newPath string) error {
	old, err := w.walk(ctx, oldPath)
	if err != nil {
		return err
	}
	d, name, err := w.parent(ctx, newPath)
	if err != nil {
		return err
	}
	if err := w.fresh(ctx, d, name); err != nil {
		return err
	}
	if old.IsDir() {
		return unix.EPERM
	}
	_, err = w.m.LinkAt(ctx, d, name, old.ino)
	return err
}

func (w *coreWorker) remove(ctx context.Context, p string, dir bool) error {
	d, name, err := w.parent(ctx, p)
	if err != nil {
		return err
	}
	n, err := w.lookup(ctx, d, name)
	if err != nil {
		return err
	}
	var sub uint64
	switch {
	case !dir && n.IsDir():
		return unix.EISDIR
	case dir && !n.IsDir():
		return unix.ENOTDIR
	case dir:
		sub = n.ino
	}
	return w.m.RemoveAt(ctx, d, name, dir, sub)
}

// setattr is chmod, utimes and the xattr calls of q on n.
func (w *coreWorker) setattr(ctx context.Context, n pathNode, q *wire.Req) error {
	op := strings.TrimPrefix(strings.TrimPrefix(q.Op, "f"), "l")
	switch op {
	case "chmod":
		_, _, err := w.m.Setattr(ctx, n, vfs.AttrChange{Mode: q.Mode, HasMode: true})
		return err
	case "utimes":
		_, _, err := w.m.Setattr(ctx, n, vfs.AttrChange{Atime: q.Len, Mtime: q.Len, HasAtime: true, HasMtime: true})
		return err
	}
	if n.typ != store.TypeFile && n.typ != store.TypeDir {
		return unix.EPERM // user.* only on files and directories: the kernel's check
	}
	if op == "setxattr" {
		return w.m.Setxattr(ctx, n, q.Name, []byte(q.Value), 0)
	}
	return w.m.Removexattr(ctx, n, q.Name)
}

// open keeps a descriptor: a file's, read and write, or (q.Mode set) a
// directory's, for fsyncdir and locks.
func (w *coreWorker) open(ctx context.Context, r *wire.Resp, q *wire.Req) *wire.Resp {
	n, err := w.walk(ctx, q.Path)
	if err != nil {
		return failCall(r, "open", err)
	}
	fd := &coreFD{n: n}
	switch {
	case q.Mode == 0 && n.typ == store.TypeFifo:
		return failCall(r, "open", unix.ENXIO) // as the worker: never kept open
	case n.typ == store.TypeSymlink:
		return failCall(r, "open", unix.ELOOP)
	case q.Mode == 0 && n.IsDir():
		return failCall(r, "open", unix.EISDIR)
	case q.Mode != 0 && !n.IsDir():
		return failCall(r, "open", unix.ENOTDIR)
	case q.Mode != 0:
		fd.l, err = w.m.OpenDir(ctx, n, nil)
	case q.ReadOnly:
		fd.h, err = w.m.Open(ctx, n.ino, unix.O_RDONLY)
	default:
		fd.h, err = w.m.Open(ctx, n.ino, unix.O_RDWR)
	}
	if err != nil {
		return failCall(r, "open", err)
	}
	w.mu.Lock()
	w.next++
	fd.owner, fd.refs = 2<<32|uint64(w.next), 1
	w.fds[w.next] = fd
	r.FD = w.next
	w.mu.Unlock()
	return r
}

// stat is lstat and what the checker compares besides: a symlink's
// target and the user xattrs of files and directories.
func (w *coreWorker) stat(ctx context.Context, n pathNode, xattrs bool) (*wire.Stat, string, error) {
	a, _, err := w.m.Getattr(ctx, n, nil)
	if errors.Is(err, store.ErrNotFound) {
		var ok bool
		if a, ok = w.m.OpenAttr(n.ino); !ok {
			return nil, "lstat", unix.ESTALE
		}
		err = nil
	}
	if err != nil {
		return nil, "lstat", err
	}
	a = w.m.Current(a)
	nlink := uint64(a.Nlink)
	if a.Type == store.TypeDir && a.Nlink != 0 && !a.DirLinksCounted() {
		nlink = 1
	}
	st := &wire.Stat{Mode: fs.TypeBits(a.Type) | a.Mode, Size: a.Size, Nlink: nlink, Ino: a.Ino, Mtime: a.Mtime}
	switch {
	case a.Type == store.TypeSymlink:
		t, err := w.m.Readlink(ctx, n)
		if err != nil {
			return nil, "readlink", err
		}
		st.Target = t
	case xattrs && (a.Type == store.TypeFile || a.Type == store.TypeDir):
		x, err := w.xattrs(ctx, n)
		if err != nil {
			return nil, "listxattr", err
		}
		st.Xattrs = x
	}
	return st, "", nil
}

func (w *coreWorker) xattrs(ctx context.Context, n pathNode) (map[string]string, error) {
	buf := make([]byte, 64<<10)
	size, err := w.m.Listxattr(ctx, n, buf)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := w.m.Getxattr(ctx, n, name, v)
		if err != nil {
			return nil, err
		}
		out[name] = string(v[:m])
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// readFile is open, read to the end and close of the file at rel; call
// names the call that failed.
func (w *coreWorker) readFile(ctx context.Context, rel string) ([]byte, string, error) {
	n, err := w.walk(ctx, rel)
	if err == nil {
		err = openable(n, true)
	}
	if err != nil {
		return nil, "open", err
	}
	switch n.typ {
	case store.TypeDir:
		return nil, "read", unix.EISDIR
	case store.TypeFifo:
		return nil, "read", unix.ESPIPE
	}
	h, err := w.m.Open(ctx, n.ino, unix.O_RDONLY)
	if err != nil {
		return nil, "open", err
	}
	b, err := readAll(ctx, h)
	cerr := w.closeFile(ctx, h)
	if err != nil {
		return nil, "read", err
	}
	if cerr != nil {
		return nil, "close", cerr
	}
	return b, "", nil
}

func readAll(ctx context.Context, h *vfs.Handle) ([]byte, error) {
	var out []byte
	buf := make([]byte, 256<<10)
	for off := int64(0); ; {
		b, err := h.Read(ctx, buf, off)
		if err != nil {
			return nil, err
		}
		if len(b) == 0 {
			return out, nil
		}
		out = append(out, b...)
		off += int64(len(b))
	}
}

func digest(r *wire.Resp, b []byte, full bool) *wire.Resp {
	r.Size, r.Sum = int64(len(b)), wire.Sum(b)
	if full {
		r.Data = b
	}
	return r
}

// readDir lists directory n, names sorted.
func (w *coreWorker) readDir(ctx context.Context, n pathNode) ([]string, error) {
	l, err := w.m.OpenDir(ctx, n, nil)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	var names []string
	for {
		page, err := l.Next(ctx)
		if err != nil {
			return nil, err
		}
		if page == nil {
			break
		}
		for _, e := range page {
			names = append(names, e.Name)
		}
	}
	sort.Strings(names)
	return names, nil
}

// tree lists rel and everything below it, parents first, names in order.
func (w *coreWorker) tree(ctx context.Context, rel string, out []wire.Entry) []wire.Entry {
	n, err := w.walk(ctx, rel)
	var st *wire.Stat
	if err == nil {
		st, _, err = w.stat(ctx, n, true)
	}
	if err != nil {
		return append(out, wire.Entry{Path: rel, Errno: int(errno(err))})
	}
	e := wire.Entry{Path: rel, Stat: st}
	switch n.typ {
	case store.TypeFile:
		b, _, err := w.readFile(ctx, rel)
		if err != nil {
			e.Errno = int(errno(err))
		}
		e.Size, e.Sum = int64(len(b)), wire.Sum(b)
	case store.TypeDir:
		out = append(out, e)
		names, err := w.readDir(ctx, n)
		if err != nil {
			return append(out, wire.Entry{Path: rel + "/", Errno: int(errno(err))})
		}
		for _, name := range names {
			out = w.tree(ctx, path.Join(rel, name), out)
		}
		return out
	}
	return append(out, e)
}

// lockOf is the lock q asks for, owned by owner.
func lockOf(q *wire.Req, owner uint64, flock bool, pid uint32) locking.FileLock {
	lk := locking.FileLock{Owner: owner, Flock: flock, Pid: pid, Start: 0, End: math.MaxInt64}
	if !flock {
		lk.Start = q.Off
		if q.Len > 0 {
			lk.End = q.Off + q.Len - 1
		}
	}
	switch q.Lock {
	case "ex":
		lk.Write = true
	case "un":
		lk.Unlock = true
	}
	return lk
}

// throughFD runs the operations through a descriptor kept open.
func (w *coreWorker) throughFD(ctx context.Context, r *wire.Resp, q *wire.Req) *wire.Resp {
	w.mu.Lock()
	fd, ok := w.fds[q.FD]
	w.mu.Unlock()
	if !ok {
		r.Err = fmt.Sprintf("no descriptor %d", q.FD)
		return r
	}
	n := fd.n
	switch q.Op {
	case "pwrite", "ftruncate", "pread":
		if fd.h == nil {
			e := map[string]error{"pwrite": unix.EBADF, "ftruncate": unix.EINVAL, "pread": unix.EISDIR}[q.Op]
			return failCall(r, q.Op, e)
		}
	}
	switch q.Op {
	case "pwrite":
		_, err := fd.h.Write(ctx, wire.Pattern(q.Seq, q.Off, q.Len), q.Off)
		return errCall(r, "pwrite", err)
	case "ftruncate":
		return errCall(r, "ftruncate", w.m.Truncate(ctx, n, q.Len))
	case "fdfsync":
		if fd.h != nil {
			return errCall(r, "fsync", fd.h.Fsync(ctx))
		}
		return errCall(r, "fsync", w.m.SyncInode(ctx, n.ino, fd.l.Reported()))
	case "fchmod", "fsetxattr":
		return errCall(r, q.Op, w.setattr(ctx, n, q))
	case "fstat":
		st, _, err := w.stat(ctx, n, true)
		if err != nil {
			return failCall(r, "fstat", err)
		}
		r.Stat = st
		return r
	case "pread":
		b, err := readAll(ctx, fd.h)
		if err != nil {
			return failCall(r, "pread", err)
		}
		return digest(r, b, q.Full)
	case "dup":
		w.mu.Lock()
		w.next++
		fd.refs++
		w.fds[w.next] = fd
		r.FD = w.next
		w.mu.Unlock()
		return r
	case "close":
		w.mu.Lock()
		delete(w.fds, q.FD)
		fd.refs--
		last := fd.refs == 0
		w.mu.Unlock()
		switch {
		case fd.l != nil && last:
			fd.l.Close()
			return r
		case fd.l != nil:
			return r
		case !last:
			// Not the description's last descriptor: FLUSH alone, with
			// the process's record locks going.
			return errCall(r, "close", fd.h.Flush(ctx, w.posixOwner(), true))
		}
		return errCall(r, "close", w.closeFile(ctx, fd.h))
	case "flock":
		return errCall(r, "flock", w.m.SetLock(ctx, n, nil, fd.h, fd.owners(), lockOf(q, fd.owner, true, w.pid), false))
	case "getlk":
		held, found, err := w.m.Lock(ctx, n.ino, lockOf(q, w.posixOwner(), false, w.pid))
		if err != nil {
			return failCall(r, "fcntl", err)
		}
		r.Value = "un"
		if found {
			r.Value = map[bool]string{false: "sh", true: "ex"}[held.Write]
		}
		return r
	case "fcntl":
		return errCall(r, "fcntl", w.m.SetLock(ctx, n, nil, fd.h, fd.owners(), lockOf(q, w.posixOwner(), false, w.pid), false))
	}
	r.Err = "unknown operation " + q.Op
	return r
}
