package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// Import and export move whole trees between a local directory and the
// filesystem without a mount: import writes documents with _bulk, many at a
// time, instead of paying a FUSE request and the locking protocol for each
// file; export reads them with scans and multi-gets.

func cmdImport() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "load the local directory LOCALDIR into the filesystem as DEST (a new directory), through _bulk",
		ArgsUsage: "LOCALDIR DEST",
		Description: `DEST is a path in the filesystem (/projects/x); it must not exist, its
parent must. Modes, owners, times, symlinks, hard links (within the tree)
and extended attributes are kept; sockets, FIFOs and devices are skipped
with a warning. DEST appears only when everything below it is written: an
import that fails leaves nothing visible, and running it again first
removes what the failed one wrote (fsck --repair removes its orphaned
inodes). Other mounts can work meanwhile; DEST is locked while it is made.`,
		Flags:  adminFlags(&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress, only errors and the summary"}),
		Action: runImport,
	}
}

func cmdExport() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "copy SRC from the filesystem to the local path LOCALDIR (which must not exist), like cp -a",
		ArgsUsage: "SRC LOCALDIR",
		Description: `SRC is a path in the filesystem (/ for everything). Modes, times,
symlinks, hard links and extended attributes are kept, and owners when run
as root. The listing is one point-in-time snapshot; files changed by other
mounts during the export are copied as they are when read, as cp -a would.`,
		Flags:  adminFlags(&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress, only errors and the summary"}),
		Action: runExport,
	}
}

// fsPath checks a path of the filesystem given on the command line.
func fsPath(what, p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", usagef("%s %q: give a path from the filesystem's root, like /%s", what, p, strings.TrimPrefix(p, "./"))
	}
	p = filepath.Clean(p)
	if err := store.CheckPath(p); err != nil {
		return "", usagef("%s: %v", what, err)
	}
	return p, nil
}

// devIno identifies a local file, for hard links.
type devIno struct{ dev, ino uint64 }

type importer struct {
	st        *store.Store
	src, dest string
	chunk     int64
	links     map[devIno]*linkState // local files with several links
	prog      *progress
	now       int64
	root      uint64 // DEST's inode, whose path document is written last
	// alive fails once our session is no longer ours (lease lapsed or
	// declared dead): then someone may own DEST, and we must not write.
	alive func() error
	// stamp is what every chunk carries: the first data generation of a
	// new inode (which its inode document records) and our session, by
	// which fsck tells our chunks from a dead writer's while we run.
	stamp store.Stamp

	mu    sync.Mutex // protects err
	err   error
	batch []store.BulkOp
	size  int
	files int64 // entries in batch, for progress
	bytes int64 // file bytes in batch
	work  chan bulkBatch
	wg    sync.WaitGroup

	dirs, regular, symlinks, skipped int64
}

type linkState struct {
	ino   uint64
	count uint32 // links inside the tree
	done  bool   // inode and data written
}

type bulkBatch struct {
	ops          []store.BulkOp
	files, bytes int64
}

const (
	importBatchBytes = 8 << 20
	importBatchItems = 2000
	importWorkers    = 4
)

func runImport(c *cli.Context) error {
	if c.NArg() != 2 {
		return usagef("import needs LOCALDIR and DEST")
	}
	src, err := filepath.Abs(c.Args().Get(0))
	if err != nil {
		return err
	}
	if fi, err := os.Stat(src); err != nil {
		return fmt.Errorf("import: %v", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("import: %s is not a directory", src)
	}
	dest, err := fsPath("DEST", c.Args().Get(1))
	if err != nil {
		return err
	}
	if dest == "/" {
		return usagef("DEST must be a new directory, not /")
	}
	prog := newProgress("import", c.Bool("quiet"))
	// Count first: the progress has a total, and hard links their count
	// inside the tree before the inode is written.
	imp := &importer{src: src, dest: dest, links: map[devIno]*linkState{}, prog: prog, now: time.Now().UnixNano()}
	if err := imp.count(); err != nil {
		return fmt.Errorf("import: %v", err)
	}

	st, co, done, err := adminSession(c)
	if err != nil {
		return err
	}
	defer done()
	imp.st, imp.chunk = st, st.ChunkSize()
	ctx := c.Context
	parent, _ := store.Split(dest)
	txn, err := co.Begin(ctx, co.Strategy.Entry(parent, dest))
	if err != nil {
		return explain(fmt.Errorf("import: locking %s: %w", dest, err), c.String("es-url"))
	}
	defer func() { _ = txn.End(context.WithoutCancel(ctx)) }()
	imp.alive = txn.Sess.Check
	imp.stamp = store.Stamp{Version: store.DataVersion(1, 1), Session: txn.Sess.ID()}
	parentIno, err := imp.check(ctx, co, parent)
	if err != nil {
		return explain(err, c.String("es-url"))
	}
	if err := imp.clearLeftovers(ctx); err != nil {
		return explain(fmt.Errorf("import: removing what an earlier import left below %s: %w", dest, err), c.String("es-url"))
	}

	prog.start()
	imp.work = make(chan bulkBatch, importWorkers)
	for i := 0; i < importWorkers; i++ {
		imp.wg.Add(1)
		go imp.worker(ctx)
	}
	walkErr := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e := imp.failed(); e != nil {
			return e
		}
		return imp.entry(p)
	})
	if walkErr == nil {
		imp.send()
	}
	close(imp.work)
	imp.wg.Wait()
	prog.stop()
	if walkErr == nil {
		walkErr = imp.failed()
	}
	if walkErr != nil {
		return fmt.Errorf("import failed, nothing is visible at %s (run esfs fsck --repair to remove what was written): %v", dest, walkErr)
	}
	// The tree exists from here on: DEST's own path document comes last.
	root, err := st.OpCreateDentry(store.Dentry{Path: dest, Ino: imp.root, Type: store.TypeDir})
	if err != nil {
		return err
	}
	if err := imp.alive(); err != nil {
		return fmt.Errorf("import: %s not made: %w", dest, err)
	}
	res, err := st.Bulk(ctx, []store.BulkOp{root, st.OpTouchInode(parentIno, imp.now, imp.now)})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return explain(fmt.Errorf("import: creating %s itself, after everything below it: %w", dest, err), c.String("es-url"))
	}
	if err := txn.End(ctx); err != nil {
		return explain(fmt.Errorf("import: %s was made, but releasing its lock failed: %w", dest, err), c.String("es-url"))
	}
	fmt.Fprintf(os.Stderr, "imported %s to %s: %d files, %d directories, %d symlinks, %s in %s (%s/s)%s\n",
		src, dest, imp.regular, imp.dirs, imp.symlinks, mib(prog.bytesDone()), prog.elapsed().Round(time.Millisecond),
		mib(int64(float64(prog.bytesDone())/max(prog.elapsed().Seconds(), 1e-3))), skippedNote(imp.skipped))
	return nil
}

func skippedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d special files skipped", n)
}

// check verifies, under DEST's lock, that the parent is a directory and
// DEST is free. It returns the parent's inode number.
func (imp *importer) check(ctx context.Context, co interface {
	Visible(context.Context, store.Dentry) (store.Dentry, bool, error)
}, parent string) (uint64, error) {
	pd, err := imp.st.GetDentry(ctx, parent)
	if err == nil {
		var ok bool
		pd, ok, err = co.Visible(ctx, pd)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
	}
	if errors.Is(err, store.ErrNotFound) {
		return 0, fmt.Errorf("import: the parent directory %s does not exist", parent)
	}
	if err != nil {
		return 0, err
	}
	if pd.Type != store.TypeDir {
		return 0, fmt.Errorf("import: %s is not a directory", parent)
	}
	dd, err := imp.st.GetDentry(ctx, imp.dest)
	if err == nil {
		if _, ok, verr := co.Visible(ctx, dd); verr != nil {
			return 0, verr
		} else if ok {
			return 0, fmt.Errorf("import: %s exists (import makes a new directory)", imp.dest)
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return 0, err
	}
	return pd.Ino, nil
}

// clearLeftovers removes the path documents an earlier, failed import
// left below DEST (which does not exist, and whose lock we hold): nobody
// can see them, and they would refuse our creates. Their inodes are
// orphans that fsck --repair removes.
func (imp *importer) clearLeftovers(ctx context.Context) error {
	if err := imp.st.Refresh(ctx); err != nil {
		return err
	}
	sc := imp.st.ScanTree(imp.dest, store.DefaultPageSize)
	defer sc.Close()
	for {
		page, _, err := sc.Next(ctx)
		if err != nil {
			return err
		}
		if page == nil {
			return nil
		}
		var ops []store.BulkOp
		for _, d := range page {
			if d.Path == imp.dest || d.Intent.Op != "" {
				continue // an intent belongs to a rename: the sweepers' business
			}
			o, err := imp.st.OpDeleteDentry(d.Path, d.Ver)
			if err != nil {
				return err
			}
			ops = append(ops, o)
		}
		if len(ops) == 0 {
			continue
		}
		res, err := imp.st.Bulk(ctx, ops)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil && !errors.Is(r.Err, store.ErrNotFound) {
				return r.Err
			}
		}
	}
}

// count walks the tree once for totals and hard link counts.
func (imp *importer) count() error {
	var entries, bytes int64
	err := filepath.WalkDir(imp.src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		entries++
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			bytes += st.Size
			if st.Nlink > 1 {
				k := devIno{uint64(st.Dev), st.Ino}
				if l := imp.links[k]; l != nil {
					l.count++
				} else {
					imp.links[k] = &linkState{ino: store.NewIno(), count: 1}
				}
			}
		}
		return nil
	})
	imp.prog.total(entries, bytes)
	return err
}

func (imp *importer) failed() error {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.err
}

func (imp *importer) fail(err error) {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.err == nil {
		imp.err = err
	}
}

func (imp *importer) worker(ctx context.Context) {
	defer imp.wg.Done()
	for b := range imp.work {
		if imp.failed() != nil {
			continue // drain
		}
		if len(b.ops) == 0 {
			imp.prog.add(b.files, b.bytes)
			continue
		}
		if err := imp.alive(); err != nil {
			imp.fail(err)
			continue
		}
		res, err := imp.st.Bulk(ctx, b.ops)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = r.Err
					break
				}
			}
		}
		if err != nil {
			imp.fail(err)
			continue
		}
		imp.prog.add(b.files, b.bytes)
	}
}

// add queues one write; a full batch goes to the workers.
func (imp *importer) add(o store.BulkOp, size int) {
	imp.batch = append(imp.batch, o)
	imp.size += size
	if imp.size >= importBatchBytes || len(imp.batch) >= importBatchItems {
		imp.send()
	}
}

func (imp *importer) send() {
	if len(imp.batch) == 0 && imp.files == 0 {
		return
	}
	imp.work <- bulkBatch{ops: imp.batch, files: imp.files, bytes: imp.bytes}
	imp.batch, imp.size, imp.files, imp.bytes = nil, 0, 0, 0
}

// entry writes the documents of one local entry: its inode (once per
// hard-linked file), its data chunks and its path document.
func (imp *importer) entry(p string) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return err
	}
	rel, err := filepath.Rel(imp.src, p)
	if err != nil {
		return err
	}
	path := imp.dest
	if rel != "." {
		path = imp.dest + "/" + filepath.ToSlash(rel)
	}
	if err := store.CheckPath(path); err != nil {
		return fmt.Errorf("%s: %v", p, err)
	}
	a := store.Inode{Ino: store.NewIno(), Mode: st.Mode & 0o7777, Uid: st.Uid, Gid: st.Gid, Nlink: 1,
		Atime: unix.TimespecToNsec(st.Atim), Mtime: unix.TimespecToNsec(st.Mtim), Ctime: unix.TimespecToNsec(st.Ctim)}
	a.Btime = a.Ctime
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		a.Type = store.TypeDir
		imp.dirs++
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if len(target) > store.MaxPath {
			return fmt.Errorf("%s: symlink target of %d bytes is longer than %d", p, len(target), store.MaxPath)
		}
		a.Type, a.Target, a.Size, a.Mode = store.TypeSymlink, target, int64(len(target)), 0o777
		imp.symlinks++
	case unix.S_IFREG:
		if st.Size > store.MaxFileSize {
			return fmt.Errorf("%s: %d bytes, more than the largest file esfs stores (%d bytes)", p, st.Size, store.MaxFileSize)
		}
		a.Type, a.Size, a.Dgen = store.TypeFile, st.Size, 1
		imp.regular++
	default:
		fmt.Fprintf(os.Stderr, "esfs import: skipping %s: sockets, FIFOs and devices cannot be stored\n", p)
		imp.skipped++
		imp.files++
		return nil
	}
	xattrs, err := readXattrs(p)
	if err != nil {
		return fmt.Errorf("%s: extended attributes: %v", p, err)
	}
	a.Xattrs = xattrs
	writeInode := true
	if a.Type == store.TypeFile && st.Nlink > 1 {
		l := imp.links[devIno{uint64(st.Dev), st.Ino}]
		if l == nil {
			return fmt.Errorf("%s: a hard link that appeared during the import", p)
		}
		a.Ino, a.Nlink = l.ino, l.count
		writeInode, l.done = !l.done, true
	}
	if writeInode {
		if a.Type == store.TypeFile {
			if a.Chunks, err = imp.data(p, a.Ino, st.Size); err != nil {
				return err
			}
		}
		o, err := imp.st.OpCreateInode(a)
		if err != nil {
			return err
		}
		imp.add(o, 512+len(a.Target))
	}
	imp.files++
	if path == imp.dest {
		imp.root = a.Ino // its path document is written last
		return nil
	}
	o, err := imp.st.OpCreateDentry(store.Dentry{Path: path, Ino: a.Ino, Type: a.Type})
	if err != nil {
		return err
	}
	imp.add(o, 256+2*len(path))
	return nil
}

// data queues the chunks of a file, reading it a chunk at a time. Holes
// the local filesystem knows of (SEEK_DATA) are skipped without reading
// them, so a sparse file costs what it holds, not its size.
// It returns how many chunks it queued.
func (imp *importer) data(p string, ino uint64, size int64) (chunks int64, err error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for n := int64(0); n*imp.chunk < size; n++ {
		if next, ok := nextData(f, n*imp.chunk); ok {
			if next >= size {
				break
			}
			n = max(n, next/imp.chunk)
		}
		buf := make([]byte, min(imp.chunk, size-n*imp.chunk)) // the op keeps it until the batch is sent
		k, err := f.ReadAt(buf, n*imp.chunk)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("%s: %v", p, err)
		}
		if k == 0 {
			break // the file shrank while we read it
		}
		if isZero(buf[:k]) {
			continue // a hole: absent chunks read as zeros
		}
		o, err := imp.st.OpWriteChunk(ino, n, buf[:k], imp.stamp)
		if err != nil {
			return 0, err
		}
		chunks++
		imp.bytes += int64(k)
		imp.add(o, k*4/3+128)
	}
	return chunks, nil
}

// nextData returns the offset of the first data at or after off in f
// (past its end when there is none), and false when the filesystem cannot
// tell (then every chunk is read).
func nextData(f *os.File, off int64) (int64, bool) {
	next, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	switch {
	case err == nil:
		return next, true
	case errors.Is(err, unix.ENXIO):
		return math.MaxInt64, true
	}
	return 0, false
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// readXattrs returns the extended attributes of p (not following a
// symlink); none where the local filesystem has no xattr support.
func readXattrs(p string) (map[string][]byte, error) {
	sz, err := unix.Llistxattr(p, nil)
	if errors.Is(err, unix.ENOTSUP) || sz == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if name == "" {
			continue
		}
		n, err := unix.Lgetxattr(p, name, nil)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, err
		}
		v := make([]byte, n)
		if n, err = unix.Lgetxattr(p, name, v); err != nil {
			return nil, err
		}
		out[name] = v[:n]
	}
	return out, nil
}

func runExport(c *cli.Context) error {
	if c.NArg() != 2 {
		return usagef("export needs SRC and LOCALDIR")
	}
	src, err := fsPath("SRC", c.Args().Get(0))
	if err != nil {
		return err
	}
	local, err := filepath.Abs(c.Args().Get(1))
	if err != nil {
		return err
	}
	if _, err := os.Lstat(local); err == nil {
		return fmt.Errorf("export: %s exists (export makes it, as cp -a would)", local)
	}
	if fi, err := os.Stat(filepath.Dir(local)); err != nil || !fi.IsDir() {
		return fmt.Errorf("export: %s is not a directory", filepath.Dir(local))
	}
	st, co, done, err := adminSession(c)
	if err != nil {
		return err
	}
	defer done()
	ctx := c.Context
	prog := newProgress("export", c.Bool("quiet"))
	prog.start()
	ex := &exporter{st: st, src: src, local: local, links: map[uint64]string{}, prog: prog, root: os.Geteuid() == 0}
	sc := st.ScanTree(src, store.DefaultPageSize)
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			prog.stop()
			return explain(fmt.Errorf("export: %w", err), c.String("es-url"))
		}
		for _, b := range bad {
			fmt.Fprintf(os.Stderr, "esfs export: skipping a damaged path document: %v\n", b)
		}
		if page == nil {
			break
		}
		var vis []store.Dentry
		for _, d := range page {
			v, ok, err := co.Visible(ctx, d)
			if err != nil {
				prog.stop()
				return explain(err, c.String("es-url"))
			}
			if ok {
				vis = append(vis, v)
			}
		}
		if err := ex.page(ctx, vis); err != nil {
			prog.stop()
			return fmt.Errorf("export failed (what was copied stays in %s): %v", local, err)
		}
	}
	if ex.entries == 0 {
		prog.stop()
		return fmt.Errorf("export: %s does not exist in the filesystem", src)
	}
	// Directories last, deepest first: writing into them changed their times.
	for i := len(ex.dirs) - 1; i >= 0; i-- {
		if err := ex.finish(ex.dirs[i].path, ex.dirs[i].attr); err != nil {
			prog.stop()
			return fmt.Errorf("export: %v", err)
		}
	}
	prog.stop()
	fmt.Fprintf(os.Stderr, "exported %s to %s: %d entries, %s in %s\n", src, local, ex.entries, mib(prog.bytesDone()), prog.elapsed().Round(time.Millisecond))
	return nil
}

type exporter struct {
	st      *store.Store
	src     string
	local   string
	links   map[uint64]string // inode -> first local path, for hard links
	prog    *progress
	root    bool
	entries int64
	dirs    []struct {
		path string
		attr store.Inode
	}

	// dataRefreshed: the data index was refreshed for listing chunks.
	dataRefreshed bool
}

// page copies one page of the scan (in path order: parents first).
func (ex *exporter) page(ctx context.Context, ds []store.Dentry) error {
	if len(ds) == 0 {
		return nil
	}
	inos := make([]uint64, len(ds))
	for i, d := range ds {
		inos[i] = d.Ino
	}
	attrs, err := ex.st.GetInodes(ctx, inos)
	if err != nil {
		return err
	}
	for i, d := range ds {
		if errors.Is(attrs[i].Err, store.ErrNotFound) {
			continue // removed since the snapshot
		}
		if attrs[i].Err != nil {
			return fmt.Errorf("%s: %w", d.Path, attrs[i].Err)
		}
		local := filepath.Join(ex.local, strings.TrimPrefix(d.Path, ex.src))
		if err := ex.entry(ctx, local, attrs[i].Inode); err != nil {
			return fmt.Errorf("%s: %v", d.Path, err)
		}
		ex.entries++
		ex.prog.add(1, 0)
	}
	return nil
}

func (ex *exporter) entry(ctx context.Context, local string, a store.Inode) error {
	switch a.Type {
	case store.TypeDir:
		if err := os.Mkdir(local, 0o700); err != nil {
			return err
		}
		ex.dirs = append(ex.dirs, struct {
			path string
			attr store.Inode
		}{local, a})
		return nil
	case store.TypeSymlink:
		if err := os.Symlink(a.Target, local); err != nil {
			return err
		}
		return ex.finish(local, a)
	}
	if first, ok := ex.links[a.Ino]; ok {
		return os.Link(first, local)
	}
	if a.Nlink > 1 {
		ex.links[a.Ino] = local
	}
	f, err := os.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := ex.data(ctx, f, a); err != nil {
		f.Close()
		return err
	}
	if err := f.Truncate(a.Size); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return ex.finish(local, a)
}

// exportListed: a file of more chunks than this has its stored chunks
// listed by search instead of each read by number, so that a sparse file
// costs what it holds, not its size.
const exportListed = 64

// data copies the stored chunks of file a into f; holes stay holes.
func (ex *exporter) data(ctx context.Context, f *os.File, a store.Inode) error {
	if a.Size <= 0 {
		return nil
	}
	chunk := ex.st.ChunkSize()
	last := (a.Size - 1) / chunk
	copyChunks := func(nums []int64) error {
		for i := 0; i < len(nums); i += 8 {
			part := nums[i:min(i+8, len(nums))]
			chunks, err := ex.st.ReadChunks(ctx, a.Ino, part[0], part[len(part)-1])
			if err != nil {
				return err
			}
			for _, n := range part {
				data, ok := chunks[n]
				if !ok {
					continue // a hole
				}
				if rest := a.Size - n*chunk; int64(len(data)) > rest {
					data = data[:rest]
				}
				if _, err := f.WriteAt(data, n*chunk); err != nil {
					return err
				}
				ex.prog.add(0, int64(len(data)))
			}
		}
		return nil
	}
	if last < exportListed {
		nums := make([]int64, 0, last+1)
		for n := int64(0); n <= last; n++ {
			nums = append(nums, n)
		}
		return copyChunks(nums)
	}
	if !ex.dataRefreshed {
		// Search is near-realtime: chunks written before the export began
		// must all be listed.
		if err := ex.st.RefreshData(ctx); err != nil {
			return err
		}
		ex.dataRefreshed = true
	}
	for from := int64(0); from <= last; {
		nums, err := ex.st.StoredChunks(ctx, a.Ino, from, store.DefaultPageSize)
		if err != nil {
			return err
		}
		for len(nums) > 0 && nums[len(nums)-1] > last {
			nums = nums[:len(nums)-1] // leftovers past the end
		}
		if len(nums) == 0 {
			return nil
		}
		// Consecutive chunks are read eight per request; scattered ones
		// one per request.
		for i := 0; i < len(nums); {
			j := i + 1
			for j < len(nums) && j-i < 8 && nums[j] == nums[j-1]+1 {
				j++
			}
			if err := copyChunks(nums[i:j]); err != nil {
				return err
			}
			i = j
		}
		from = nums[len(nums)-1] + 1
	}
	return nil
}

// finish sets what creating the entry could not: owner, mode, extended
// attributes and times (in that order: chown clears setuid bits, and
// every change but the times moves ctime, which nobody can set).
func (ex *exporter) finish(local string, a store.Inode) error {
	if ex.root {
		if err := os.Lchown(local, int(a.Uid), int(a.Gid)); err != nil {
			return err
		}
	}
	if a.Type != store.TypeSymlink {
		if err := syscall.Chmod(local, a.Mode&0o7777); err != nil {
			return err
		}
	}
	for name, v := range a.Xattrs {
		if err := unix.Lsetxattr(local, name, v, 0); err != nil {
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
				fmt.Fprintf(os.Stderr, "esfs export: %s: extended attribute %s not kept: %v\n", local, name, err)
				continue
			}
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(a.Atime), unix.NsecToTimespec(a.Mtime)}
	return unix.UtimesNanoAt(unix.AT_FDCWD, local, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
