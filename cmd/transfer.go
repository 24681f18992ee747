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

	"github.com/esfs/esfs/locking"
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
parent must. Modes, owners, times, symlinks, FIFOs, sockets, devices, hard
links (within the tree) and extended attributes are kept. DEST appears only when everything below it is written: an
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
symlinks, FIFOs, sockets, hard links and extended attributes are kept, and
owners and devices when run as root (as cp -a, other users cannot make
devices: each is named and export exits 1 after copying the rest). The
listing is one point-in-time snapshot, taken after a refresh: it holds
every write that completed before export started, and a rename in flight
as a mount shows it: under its old names before its commit point, under
its new ones after it, never both. Files changed by other mounts during the export
are copied as they are when read, as cp -a would; files they removed are
left out with a warning. An entry the listing and the index disagree on
(its directory or its inode missing, an unreadable document) is named on
stderr and export exits 1 after copying everything else.`,
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
	subdirs   map[string]uint32     // local directory -> its subdirectories, for link counts
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

	dirs, regular, symlinks, special, skipped int64
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
	imp := &importer{src: src, dest: dest, links: map[devIno]*linkState{}, subdirs: map[string]uint32{}, prog: prog, now: time.Now().UnixNano()}
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
	parentIno, err := imp.check(ctx, co.View, parent)
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
	root := store.CreateDentry(store.Dentry{Path: dest, Ino: imp.root, Type: store.TypeDir})
	if err := root.Err(); err != nil {
		return err
	}
	if err := imp.alive(); err != nil {
		return fmt.Errorf("import: %s not made: %w", dest, err)
	}
	res, err := st.Bulk(ctx, []store.BulkOp{root})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return explain(fmt.Errorf("import: creating %s itself, after everything below it: %w", dest, err), c.String("es-url"))
	}
	// DEST is a new subdirectory of its parent (whose lock we share with
	// mounts that may be making others).
	if _, err := st.AddDirLinks(ctx, parentIno, 1, imp.now); err != nil {
		fmt.Fprintf(os.Stderr, "esfs import: %s was made, but the link count of its directory may be one off (esfs fsck --repair counts it): %v\n", dest, err)
	}
	if err := txn.End(ctx); err != nil {
		return explain(fmt.Errorf("import: %s was made, but releasing its lock failed: %w", dest, err), c.String("es-url"))
	}
	fmt.Fprintf(os.Stderr, "imported %s to %s: %d files, %d directories, %d symlinks, %d special files, %s in %s (%s/s)%s\n",
		src, dest, imp.regular, imp.dirs, imp.symlinks, imp.special, mib(prog.bytesDone()), prog.elapsed().Round(time.Millisecond),
		mib(int64(float64(prog.bytesDone())/max(prog.elapsed().Seconds(), 1e-3))), skippedNote(imp.skipped))
	return nil
}

func skippedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d devices skipped", n)
}

// check verifies, under DEST's lock, that the parent is a directory and
// DEST is free. It returns the parent's inode number.
func (imp *importer) check(ctx context.Context, view *locking.View, parent string) (uint64, error) {
	pd, err := view.Get(ctx, parent)
	if err != nil {
		return 0, err
	}
	if !pd.Found {
		return 0, fmt.Errorf("import: the parent directory %s does not exist", parent)
	}
	if pd.Type != store.TypeDir {
		return 0, fmt.Errorf("import: %s is not a directory", parent)
	}
	dd, err := view.Get(ctx, imp.dest)
	if err != nil {
		return 0, err
	}
	if dd.Found {
		return 0, fmt.Errorf("import: %s exists (import makes a new directory)", imp.dest)
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
			o := store.DeleteDentry(d.Path, d.Ver)
			if err := o.Err(); err != nil {
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
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && p != imp.src {
			imp.subdirs[filepath.Dir(p)]++
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
			k := devIno{uint64(st.Dev), st.Ino}
			if l := imp.links[k]; l != nil {
				l.count++
			} else {
				imp.links[k] = &linkState{ino: store.NewIno(), count: 1}
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
		a.Type, a.Nlink = store.TypeDir, 2+imp.subdirs[p]
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
	case unix.S_IFIFO:
		a.Type = store.TypeFifo
		imp.special++
	case unix.S_IFSOCK:
		a.Type = store.TypeSocket
		imp.special++
	case unix.S_IFCHR, unix.S_IFBLK:
		a.Type = store.TypeCharDev
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			a.Type = store.TypeBlockDev
		}
		// FUSE carries device numbers in 32 bits (majors below 4096).
		if st.Rdev > 0xffffffff {
			fmt.Fprintf(os.Stderr, "esfs import: skipping %s: device %d:%d has a number FUSE cannot carry\n", p, unix.Major(st.Rdev), unix.Minor(st.Rdev))
			imp.skipped++
			imp.files++
			return nil
		}
		a.Rdev = uint32(st.Rdev)
		imp.special++
	default:
		return fmt.Errorf("%s: a file of unknown type %o", p, st.Mode&unix.S_IFMT)
	}
	xattrs, err := readXattrs(p)
	if err != nil {
		return fmt.Errorf("%s: extended attributes: %v", p, err)
	}
	a.Xattrs = xattrs
	writeInode := true
	if a.Type != store.TypeDir && st.Nlink > 1 {
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
		o := store.CreateInode(a)
		if err := o.Err(); err != nil {
			return err
		}
		imp.add(o, 512+len(a.Target))
	}
	imp.files++
	if path == imp.dest {
		imp.root = a.Ino // its path document is written last
		return nil
	}
	o := store.CreateDentry(store.Dentry{Path: path, Ino: a.Ino, Type: a.Type})
	if err := o.Err(); err != nil {
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
		o := store.WriteChunk(ino, n, buf[:k], imp.stamp)
		if err := o.Err(); err != nil {
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
	url := c.String("es-url")
	prog := newProgress("export", c.Bool("quiet"))
	prog.start()
	ex := &exporter{st: st, view: co.View, src: src, local: local, links: map[uint64]string{}, prog: prog, root: os.Geteuid() == 0,
		dirs: map[string]*exportDir{}, notCopied: map[string]leftOut{}}
	// fail stops the progress and prints what was found so far first.
	fail := func(err error) error {
		prog.stop()
		ex.report()
		return err
	}
	// One consistent snapshot of SRC, as readers see it: a rename in flight
	// in it is copied under its old names or its new ones.
	sc, err := co.View.Scan(ctx, src)
	if err != nil {
		return fail(explain(fmt.Errorf("export: %w", err), url))
	}
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return fail(explain(fmt.Errorf("export: listing %s failed after %d entries (what was copied stays in %s): %w", src, ex.entries, local, err), url))
		}
		for _, b := range bad {
			ex.problems++
			ex.note(fmt.Sprintf("esfs export: an unreadable path document, not copied: %v", b))
		}
		if page == nil {
			break
		}
		if err := ex.page(ctx, page); err != nil {
			return fail(explain(fmt.Errorf("export failed (what was copied stays in %s): %w", local, err), url))
		}
	}
	if !ex.sawSrc {
		exists, err := ex.existsNow(ctx)
		switch {
		case err != nil:
			return fail(explain(fmt.Errorf("export: %s is not in the listing, and reading it failed: %w", src, err), url))
		case exists:
			return fail(fmt.Errorf("export: %s exists (read directly) but the listing of the index does not show it, so its contents cannot be listed; nothing below it was exported (esfs fsck checks the index)", src))
		case ex.problems == 0:
			return fail(fmt.Errorf("export: %s does not exist in the filesystem", src))
		}
	}
	for _, d := range ex.dirOrder {
		if dirLinksAgree(d.attr.Nlink, d.subdirs) {
			continue
		}
		// The count was read after the snapshot: another mount's mkdir or
		// rmdir since then moved it. Only a count that disagrees with a
		// listing taken now as well is a disagreement of the index.
		nlink, now, err := ex.countSubdirs(ctx, d.path, d.attr.Ino)
		if err != nil {
			return fail(explain(fmt.Errorf("export: counting the subdirectories of %s: %w", d.path, err), url))
		}
		if !dirLinksAgree(nlink, now) {
			ex.problems++
			ex.note(fmt.Sprintf("esfs export: %s: directory with %d links, but its listing shows %d subdirectories (want %d links): a subdirectory may be missing from the listing", d.path, nlink, now, 2+now))
		}
	}
	// Directories last, deepest first: writing into them changed their times.
	for i := len(ex.dirOrder) - 1; i >= 0; i-- {
		if err := ex.finish(ex.dirOrder[i].local, ex.dirOrder[i].attr); err != nil {
			return fail(fmt.Errorf("export: %v", err))
		}
	}
	prog.stop()
	ex.report()
	if ex.problems > 0 {
		return fmt.Errorf("export: %d entries of %s were not copied: the listing and the filesystem disagree (above; esfs fsck checks the index); the other %d entries are in %s",
			ex.problems+ex.uncopied, src, ex.entries, local)
	}
	fmt.Fprintf(os.Stderr, "exported %s to %s: %d entries, %s in %s%s\n", src, local, ex.entries, mib(prog.bytesDone()),
		prog.elapsed().Round(time.Millisecond), goneNote(ex.gone))
	if ex.devicesSkipped > 0 {
		return fmt.Errorf("export: %d devices not made (only root can make devices); everything else is in %s", ex.devicesSkipped, local)
	}
	return nil
}

func goneNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d removed by other mounts during the export were left out", n)
}

// countSubdirs reads a directory's link count now, and then counts the
// visible subdirectories of a listing taken after a refresh.
func (ex *exporter) countSubdirs(ctx context.Context, dir string, ino uint64) (uint32, int, error) {
	a, err := ex.st.GetInode(ctx, ino)
	if err != nil {
		return 0, 0, err
	}
	if err := ex.st.Refresh(ctx); err != nil {
		return 0, 0, err
	}
	sc := ex.view.List(dir, store.DefaultPageSize)
	defer sc.Close()
	count := 0
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return 0, 0, err
		}
		if len(bad) > 0 {
			return 0, 0, bad[0]
		}
		if page == nil {
			return a.Nlink, count, nil
		}
		for _, d := range page {
			if d.Type == store.TypeDir {
				count++
			}
		}
	}
}

// dirLinksAgree reports whether a directory's link count agrees with the
// number of subdirectories the listing showed in it: "." and its name in
// its parent, plus each subdirectory's "..". A count below 2 is not
// compared: filesystems made before directories counted their
// subdirectories store 1.
func dirLinksAgree(nlink uint32, listedSubdirs int) bool {
	return nlink < 2 || int64(nlink) == 2+int64(listedSubdirs)
}

// maxReported bounds the problem and warning lines export keeps to print.
const maxReported = 100

type exporter struct {
	st      *store.Store
	view    *locking.View
	src     string
	local   string
	links   map[uint64]string // inode -> first local path, for hard links
	prog    *progress
	root    bool
	entries int64 // copied

	sawSrc   bool
	dirs     map[string]*exportDir // copied directories, by path in the filesystem
	dirOrder []*exportDir          // the same, parents first
	// notCopied holds the directories left out (for a problem, or removed
	// meanwhile), so that their entries are left out with them, silently.
	notCopied map[string]leftOut

	problems int64 // entries not copied because the listing and the filesystem disagree
	uncopied int64 // entries below those, left out with them
	gone     int64 // entries removed by another mount since the snapshot
	lines    []string
	dropped  int64 // lines beyond maxReported

	// devicesSkipped counts devices a user other than root could not make.
	devicesSkipped int64
	// dataRefreshed: the data index was refreshed for listing chunks.
	dataRefreshed bool
}

type leftOut uint8

const (
	leftOutProblem leftOut = iota + 1
	leftOutGone
)

type exportDir struct {
	path, local string
	attr        store.Inode
	subdirs     int // listed and copied
}

// existsNow reads SRC in real time, for a listing that lacks it.
func (ex *exporter) existsNow(ctx context.Context) (bool, error) {
	e, err := ex.view.Get(ctx, ex.src)
	return e.Found, err
}

// problem records an entry not copied because the listing and the
// filesystem disagree: export then fails, after copying everything else.
func (ex *exporter) problem(d store.Dentry, format string, a ...any) {
	ex.problems++
	ex.note(fmt.Sprintf("esfs export: %s: not copied: %s", d.Path, fmt.Sprintf(format, a...)))
	ex.leaveOut(d, leftOutProblem)
}

// vanished records an entry that another mount removed after the snapshot.
func (ex *exporter) vanished(d store.Dentry) {
	ex.gone++
	ex.note(fmt.Sprintf("esfs export: %s: removed during the export, left out", d.Path))
	ex.leaveOut(d, leftOutGone)
}

// leaveOut makes the entries below a directory left out share its fate.
func (ex *exporter) leaveOut(d store.Dentry, why leftOut) {
	if d.Type == store.TypeDir {
		ex.notCopied[d.Path] = why
	}
}

// recheck reads again, in real time, a listed entry whose inode is gone.
// It returns ErrNotFound if another mount removed the entry since the
// snapshot (its path is gone too, or names another inode that is gone as
// well), the entry as it is now if it was replaced, and a disagreement if
// the path still names the missing inode.
func (ex *exporter) recheck(ctx context.Context, d store.Dentry) (store.Dentry, store.Inode, error) {
	e, err := ex.view.Get(ctx, d.Path)
	if err != nil {
		return d, store.Inode{}, err
	}
	if !e.Found {
		return d, store.Inode{}, fmt.Errorf("%s: %w", d.Path, store.ErrNotFound)
	}
	now := e.Dentry
	if now.Ino == d.Ino {
		return d, store.Inode{}, disagreement(fmt.Sprintf("its inode %d does not exist (a direct read of the path names it too)", d.Ino))
	}
	a, err := ex.st.GetInode(ctx, now.Ino)
	return now, a, err
}

// disagreement is an entry that the listing and the documents it names
// disagree on: it is left out and export fails at the end.
type disagreement string

func (d disagreement) Error() string { return string(d) }

func (ex *exporter) note(line string) {
	if len(ex.lines) >= maxReported {
		ex.dropped++
		return
	}
	ex.lines = append(ex.lines, line)
}

// report prints the problems and warnings, after the progress bar is gone.
func (ex *exporter) report() {
	for _, l := range ex.lines {
		fmt.Fprintln(os.Stderr, l)
	}
	if ex.dropped > 0 {
		fmt.Fprintf(os.Stderr, "esfs export: ... and %d more\n", ex.dropped)
	}
	ex.lines, ex.dropped = nil, 0
}

// page copies one page of the listing (in path order: parents first).
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
		a, err := attrs[i].Inode, attrs[i].Err
		var parent *exportDir
		if d.Path == ex.src {
			ex.sawSrc = true
		} else if why, ok := ex.notCopied[d.Parent]; ok {
			// Left out with its directory, which was reported.
			if why == leftOutGone {
				ex.gone++
			} else {
				ex.uncopied++
			}
			ex.leaveOut(d, why)
			continue
		} else if parent = ex.dirs[d.Parent]; parent == nil {
			ex.problem(d, "its directory %s is not in the listing", d.Parent)
			continue
		}
		if errors.Is(err, store.ErrNotFound) {
			d, a, err = ex.recheck(ctx, d)
			var dis disagreement
			switch {
			case errors.Is(err, store.ErrNotFound):
				ex.vanished(d)
				continue
			case errors.As(err, &dis):
				ex.problem(d, "%v", err)
				continue
			case err != nil:
				return fmt.Errorf("%s: %w", d.Path, err)
			}
		} else if err != nil {
			ex.problem(d, "%v", err) // a damaged inode document
			continue
		}
		if a.Type != d.Type {
			ex.problem(d, "the path is a %s, its inode %d a %s", d.Type, a.Ino, a.Type)
			continue
		}
		local := filepath.Join(ex.local, strings.TrimPrefix(d.Path, ex.src))
		if err := ex.entry(ctx, local, a); err != nil {
			return fmt.Errorf("%s: %v", d.Path, err)
		}
		if a.Type == store.TypeDir {
			dir := &exportDir{path: d.Path, local: local, attr: a}
			ex.dirs[d.Path] = dir
			ex.dirOrder = append(ex.dirOrder, dir)
			if parent != nil {
				parent.subdirs++
			}
		}
		ex.entries++
		ex.prog.add(1, 0)
	}
	return nil
}

func (ex *exporter) entry(ctx context.Context, local string, a store.Inode) error {
	switch a.Type {
	case store.TypeDir:
		return os.Mkdir(local, 0o700) // finished last, by runExport
	case store.TypeSymlink:
		if err := os.Symlink(a.Target, local); err != nil {
			return err
		}
		return ex.finish(local, a)

	case store.TypeFifo, store.TypeSocket, store.TypeCharDev, store.TypeBlockDev:
		return ex.special(local, a)
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

// special makes a FIFO, a socket or a device. Only root may make devices:
// for anyone else each is named and counted, as cp -a does, and export
// fails once the rest is copied.
func (ex *exporter) special(local string, a store.Inode) error {
	if first, ok := ex.links[a.Ino]; ok {
		return os.Link(first, local)
	}
	mode := map[store.FileType]uint32{store.TypeFifo: unix.S_IFIFO, store.TypeSocket: unix.S_IFSOCK,
		store.TypeCharDev: unix.S_IFCHR, store.TypeBlockDev: unix.S_IFBLK}[a.Type]
	err := unix.Mknod(local, mode|0o600, int(a.Rdev))
	if errors.Is(err, unix.EPERM) && a.Type.IsDevice() {
		fmt.Fprintf(os.Stderr, "esfs export: %s: device %d:%d not made: only root can make devices\n", local, unix.Major(uint64(a.Rdev)), unix.Minor(uint64(a.Rdev)))
		ex.devicesSkipped++
		return nil
	}
	if err != nil {
		return err
	}
	if a.Nlink > 1 {
		ex.links[a.Ino] = local
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
