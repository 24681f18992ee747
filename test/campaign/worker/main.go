// Command worker makes the system calls of the fault campaign
// (test/campaign) on one mount: it runs in a process of its own so that a
// mount frozen or killed under it never blocks the test process, and keeps
// descriptors open across operations (operations through a descriptor
// opened before a rename, locks held by it). It reads wire.Req lines on
// standard input and answers each with a wire.Resp line as soon as its
// calls return; requests run concurrently.
//
//	worker ROOT
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/esfs/esfs/test/campaign/wire"
)

type worker struct {
	root string
	mu   sync.Mutex // protects fds and next
	fds  map[int]int
	next int
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: worker ROOT")
		os.Exit(2)
	}
	unix.Umask(0) // modes exactly as asked, as the model has them
	w := &worker{root: os.Args[1], fds: map[int]int{}}
	out := json.NewEncoder(os.Stdout)
	var outMu sync.Mutex
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	var wg sync.WaitGroup
	for in.Scan() {
		var req wire.Req
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "worker: bad request:", err)
			os.Exit(2)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp := w.do(&req)
			resp.ID = req.ID
			outMu.Lock()
			defer outMu.Unlock()
			if err := out.Encode(resp); err != nil {
				os.Exit(1)
			}
		}()
	}
	wg.Wait()
}

func (w *worker) p(rel string) string { return filepath.Join(w.root, rel) }

// fail turns the error of call into the answer.
func fail(r *wire.Resp, call string, err error) *wire.Resp {
	var e unix.Errno
	if errors.As(err, &e) {
		r.Errno, r.Failed = int(e), call
	} else {
		r.Err = call + ": " + err.Error()
	}
	return r
}

func (w *worker) fd(id int) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fd, ok := w.fds[id]
	return fd, ok
}

func (w *worker) keep(fd int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next++
	w.fds[w.next] = fd
	return w.next
}

// openFlags are added to every open: never follow a symlink, never block
// on a FIFO.
const openFlags = unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

func (w *worker) do(q *wire.Req) *wire.Resp {
	r := &wire.Resp{}
	p := w.p(q.Path)
	switch q.Op {
	case "create":
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|openFlags, q.Mode)
		if err != nil {
			return fail(r, "open", err)
		}
		return writeClose(r, fd, q, 0)
	case "write", "append":
		flags := unix.O_WRONLY | openFlags
		if q.Op == "append" {
			flags |= unix.O_APPEND
		}
		fd, err := unix.Open(p, flags, 0)
		if err != nil {
			return fail(r, "open", err)
		}
		return writeClose(r, fd, q, q.Off)
	case "mkdir":
		return errOf(r, "mkdir", unix.Mkdir(p, q.Mode))
	case "symlink":
		return errOf(r, "symlink", unix.Symlink(q.Path2, p))
	case "mkfifo":
		return errOf(r, "mknod", unix.Mknod(p, unix.S_IFIFO|q.Mode, 0))
	case "truncate":
		return errOf(r, "truncate", unix.Truncate(p, q.Len))
	case "rename":
		return errOf(r, "rename", unix.Rename(p, w.p(q.Path2)))
	case "link":
		return errOf(r, "link", unix.Link(p, w.p(q.Path2)))
	case "unlink":
		return errOf(r, "unlink", unix.Unlink(p))
	case "rmdir":
		return errOf(r, "rmdir", unix.Rmdir(p))
	case "chmod":
		return errOf(r, "chmod", unix.Chmod(p, q.Mode))
	case "utimes":
		ts := []unix.Timespec{unix.NsecToTimespec(q.Len), unix.NsecToTimespec(q.Len)}
		return errOf(r, "utimensat", unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0))
	case "setxattr":
		return errOf(r, "setxattr", unix.Setxattr(p, q.Name, []byte(q.Value), 0))
	case "removexattr":
		return errOf(r, "removexattr", unix.Removexattr(p, q.Name))
	case "fsync":
		fd, err := unix.Open(p, unix.O_RDONLY|openFlags, 0)
		if err != nil {
			return fail(r, "open", err)
		}
		err = unix.Fsync(fd)
		cerr := unix.Close(fd)
		if err != nil {
			return fail(r, "fsync", err)
		}
		return errOf(r, "close", cerr)
	case "open":
		// A FIFO is never kept open: a reader kept open would change what
		// every later open and write of it answers.
		var st unix.Stat_t
		if q.Mode == 0 && unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO {
			return fail(r, "open", unix.ENXIO)
		}
		flags := unix.O_RDWR | openFlags
		if q.ReadOnly {
			flags = unix.O_RDONLY | openFlags
		}
		if q.Mode != 0 { // a directory, for fsyncdir
			flags = unix.O_RDONLY | unix.O_DIRECTORY | openFlags
		}
		fd, err := unix.Open(p, flags, 0)
		if err != nil {
			return fail(r, "open", err)
		}
		r.FD = w.keep(fd)
		return r
	case "stat":
		st, call, err := lstat(p)
		if err != nil {
			return fail(r, call, err)
		}
		r.Stat = st
		return r
	case "read":
		fd, err := unix.Open(p, unix.O_RDONLY|openFlags, 0)
		if err != nil {
			return fail(r, "open", err)
		}
		b, err := readAll(fd, 0)
		cerr := unix.Close(fd)
		if err != nil {
			return fail(r, "read", err)
		}
		if cerr != nil {
			return fail(r, "close", cerr)
		}
		return digest(r, b, q.Full)
	case "tree":
		r.Tree = w.tree(q.Path, nil)
		return r
	case "readdir":
		names, err := readDir(p)
		if err != nil {
			return fail(r, "getdents", err)
		}
		r.Names = names
		return r
	}
	// Operations through a descriptor kept open.
	fd, ok := w.fd(q.FD)
	if !ok {
		r.Err = fmt.Sprintf("no descriptor %d", q.FD)
		return r
	}
	switch q.Op {
	case "pwrite":
		data := wire.Pattern(q.Seq, q.Off, q.Len)
		n, err := unix.Pwrite(fd, data, q.Off)
		if err != nil {
			return fail(r, "pwrite", err)
		}
		if int64(n) != q.Len {
			r.Err = fmt.Sprintf("short pwrite: %d of %d", n, q.Len)
		}
		return r
	case "ftruncate":
		return errOf(r, "ftruncate", unix.Ftruncate(fd, q.Len))
	case "fdfsync":
		return errOf(r, "fsync", unix.Fsync(fd))
	case "fchmod":
		return errOf(r, "fchmod", unix.Fchmod(fd, q.Mode))
	case "fsetxattr":
		return errOf(r, "fsetxattr", unix.Fsetxattr(fd, q.Name, []byte(q.Value), 0))
	case "fstat":
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fail(r, "fstat", err)
		}
		r.Stat = statOf(&st)
		if t := st.Mode & unix.S_IFMT; t == unix.S_IFREG || t == unix.S_IFDIR {
			x, err := fxattrs(fd)
			if err != nil {
				return fail(r, "flistxattr", err)
			}
			r.Stat.Xattrs = x
		}
		return r
	case "pread":
		b, err := readAll(fd, 0)
		if err != nil {
			return fail(r, "pread", err)
		}
		return digest(r, b, q.Full)
	case "dup":
		// Another descriptor of the same open file description: its close
		// is a close of the file (FLUSH, the process's record locks go),
		// not the description's last (no RELEASE, its flocks stay).
		nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return fail(r, "dup", err)
		}
		r.FD = w.keep(nfd)
		return r
	case "close":
		w.mu.Lock()
		delete(w.fds, q.FD)
		w.mu.Unlock()
		return errOf(r, "close", unix.Close(fd))
	case "flock":
		how := map[string]int{"sh": unix.LOCK_SH, "ex": unix.LOCK_EX, "un": unix.LOCK_UN}[q.Lock]
		return errOf(r, "flock", unix.Flock(fd, how|unix.LOCK_NB))
	case "getlk":
		typ := map[string]int16{"sh": unix.F_RDLCK, "ex": unix.F_WRLCK}[q.Lock]
		lk := unix.Flock_t{Type: typ, Whence: 0, Start: q.Off, Len: q.Len}
		if err := unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &lk); err != nil {
			return fail(r, "fcntl", err)
		}
		r.Value = map[int16]string{unix.F_RDLCK: "sh", unix.F_WRLCK: "ex", unix.F_UNLCK: "un"}[lk.Type]
		return r
	case "fcntl":
		typ := map[string]int16{"sh": unix.F_RDLCK, "ex": unix.F_WRLCK, "un": unix.F_UNLCK}[q.Lock]
		lk := unix.Flock_t{Type: typ, Whence: 0, Start: q.Off, Len: q.Len}
		return errOf(r, "fcntl", unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &lk))
	}
	r.Err = "unknown operation " + q.Op
	return r
}

func errOf(r *wire.Resp, call string, err error) *wire.Resp {
	if err != nil {
		return fail(r, call, err)
	}
	return r
}

// writeClose writes the request's bytes at off through fd and closes it;
// the close's error is the answer if the write had none.
func writeClose(r *wire.Resp, fd int, q *wire.Req, off int64) *wire.Resp {
	var err error
	call := "pwrite"
	if q.Len > 0 {
		data := wire.Pattern(q.Seq, off, q.Len)
		if q.Op == "append" {
			_, err = unix.Write(fd, data)
			call = "write"
		} else {
			_, err = unix.Pwrite(fd, data, off)
		}
	}
	cerr := unix.Close(fd)
	if err != nil {
		return fail(r, call, err)
	}
	return errOf(r, "close", cerr)
}

func readAll(fd int, off int64) ([]byte, error) {
	var out []byte
	buf := make([]byte, 256<<10)
	for {
		n, err := unix.Pread(fd, buf, off)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
		off += int64(n)
	}
}

func digest(r *wire.Resp, b []byte, full bool) *wire.Resp {
	r.Size, r.Sum = int64(len(b)), wire.Sum(b)
	if full {
		r.Data = b
	}
	return r
}

func statOf(st *unix.Stat_t) *wire.Stat {
	return &wire.Stat{Mode: st.Mode, Size: st.Size, Nlink: uint64(st.Nlink), Ino: st.Ino,
		Mtime: st.Mtim.Sec*1e9 + st.Mtim.Nsec}
}

// lstat is lstat(2) plus what the checker compares besides: a symlink's
// target, and the user xattrs of files and directories.
func lstat(p string) (*wire.Stat, string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, "lstat", err
	}
	s := statOf(&st)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		t, err := os.Readlink(p)
		if err != nil {
			return nil, "readlink", errnoOf(err)
		}
		s.Target = t
	case unix.S_IFREG, unix.S_IFDIR:
		x, err := xattrs(p)
		if err != nil {
			return nil, "listxattr", err
		}
		s.Xattrs = x
	}
	return s, "", nil
}

func errnoOf(err error) error {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return err
}

func xattrs(p string) (map[string]string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(p, name, v)
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

func fxattrs(fd int) (map[string]string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Fgetxattr(fd, name, v)
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

func readDir(p string) ([]string, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	sort.Strings(names)
	return names, nil
}

// tree lists rel and everything below it, parents first, names in order.
func (w *worker) tree(rel string, out []wire.Entry) []wire.Entry {
	p := w.p(rel)
	st, _, err := lstat(p)
	if err != nil {
		return append(out, wire.Entry{Path: rel, Errno: errnum(err)})
	}
	e := wire.Entry{Path: rel, Stat: st}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		fd, err := unix.Open(p, unix.O_RDONLY|openFlags, 0)
		if err != nil {
			e.Errno = errnum(err)
			return append(out, e)
		}
		b, err := readAll(fd, 0)
		unix.Close(fd)
		if err != nil {
			e.Errno = errnum(err)
		}
		e.Size, e.Sum = int64(len(b)), wire.Sum(b)
	case unix.S_IFDIR:
		out = append(out, e)
		names, err := readDir(p)
		if err != nil {
			return append(out, wire.Entry{Path: rel + "/", Errno: errnum(err)})
		}
		for _, n := range names {
			out = w.tree(filepath.Join(rel, n), out)
		}
		return out
	}
	return append(out, e)
}

// errnum is err's errno (EIO for an error that carries none).
func errnum(err error) int {
	var e unix.Errno
	if errors.As(err, &e) {
		return int(e)
	}
	return int(unix.EIO)
}
