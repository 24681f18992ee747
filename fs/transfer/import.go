package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"golang.org/x/sys/unix"
)

// devIno identifies a local file, for hard links.
type devIno struct{ dev, ino uint64 }

// Import loads a local directory into the filesystem as a new directory.
type Import struct {
	st        *store.Store
	src, dest string
	// srcDir is src, opened once: both walks start from it, and reach
	// everything below it through descriptors (walkLocal).
	srcDir *os.File
	chunk  int64
	links  map[devIno]*linkState // local files with several links
	// By path below src ("." for src), as counted: a directory's
	// subdirectories, for its link count, and its inode, its entries'
	// Parents.
	subdirs map[string]uint32
	dirInos map[string]uint64
	// walked counts the subdirectories the import's walk met, which must
	// be those counted: the link counts were written from those.
	walked    map[string]uint32
	xattrsOut xattrsLeft
	prog      Progress
	o         Options
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

	stats ImportStats
}

type linkState struct {
	ino   uint64
	count uint32   // links inside the tree
	dirs  []uint64 // their directories' inodes, its Parents
	done  bool     // inode and data written
}

type bulkBatch struct {
	ops          []store.BulkOp
	files, bytes int64
}

// Import's documents go in _bulk batches of up to 8 MiB or 2000
// documents, four in flight at once, so that reading the local tree
// overlaps the cluster's indexing.
const (
	importBatchBytes = 8 << 20
	importBatchItems = 2000
	importWorkers    = 4
)

// ImportStats counts what an import made, and the devices it skipped.
type ImportStats struct {
	Dirs, Regular, Symlinks, Special, Skipped int64
}

// NewImport prepares the import of local directory src (absolute) as dest
// (a clean path of the filesystem, not /): it opens src, which is resolved
// once, here, as the user named it, and walks it once, for the progress's
// totals and the count of each hard link inside the tree, which its inode
// needs before it is written. Close releases src.
func NewImport(src, dest string, o Options) (*Import, error) {
	imp := &Import{src: src, dest: dest, links: map[devIno]*linkState{}, subdirs: map[string]uint32{}, dirInos: map[string]uint64{},
		walked: map[string]uint32{}, xattrsOut: xattrsLeft{}, prog: o.Progress, o: o, now: time.Now().UnixNano()}
	f, err := os.OpenFile(src, os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("import: %v", err)
	}
	imp.srcDir = f
	if err := imp.count(); err != nil {
		f.Close()
		return nil, fmt.Errorf("import: %v", err)
	}
	return imp, nil
}

// Close releases the local directory.
func (imp *Import) Close() error { return imp.srcDir.Close() }

// Run writes the tree, in session co of store st: it takes DEST's lock,
// checks that DEST is free and its parent a directory, removes what an
// earlier failed import left below DEST, writes every document below DEST
// in batches, and DEST's own path document last, so that DEST appears
// only once everything below it is written. A warning that leaves the
// tree made goes to Options.Warn.
func (imp *Import) Run(ctx context.Context, st *store.Store, co *locking.Coordinator) (ImportStats, error) {
	dest, explain := imp.dest, imp.o.explain
	imp.st, imp.chunk = st, st.ChunkSize()
	parent, _ := store.Split(dest)
	// The parent's change lock too: mounts holding a delegation on it
	// know its names, and must be recalled before DEST appears there.
	// Its inode is read before the lock and checked again under it.
	pd, err := co.View.Get(ctx, parent)
	if err != nil {
		return imp.stats, explain(err)
	}
	reqs := co.Strategy.Entry(parent, dest)
	if pd.Found {
		reqs = append(reqs, locking.Change(pd.Ino, parent))
	}
	txn, err := co.Begin(ctx, reqs)
	if err != nil {
		return imp.stats, explain(fmt.Errorf("import: locking %s: %w", dest, err))
	}
	defer func() { _ = txn.End(context.WithoutCancel(ctx)) }()
	imp.alive = txn.Sess.Check
	imp.stamp = store.Stamp{Version: store.DataVersion(1, 1), Session: txn.Sess.ID()}
	parentIno, err := imp.check(ctx, co.View, parent)
	if err != nil {
		return imp.stats, explain(err)
	}
	if parentIno != pd.Ino {
		return imp.stats, explain(fmt.Errorf("import: %s was replaced while the import started; run it again", parent))
	}
	if err := imp.clearLeftovers(ctx); err != nil {
		return imp.stats, explain(fmt.Errorf("import: removing what an earlier import left below %s: %w", dest, err))
	}

	imp.prog.Start()
	imp.work = make(chan bulkBatch, importWorkers)
	for i := 0; i < importWorkers; i++ {
		imp.wg.Add(1)
		go imp.worker(ctx)
	}
	walkErr := walkLocal(imp.srcDir, imp.src, func(e *localEntry) error {
		if err := imp.failed(); err != nil {
			return err
		}
		return imp.entry(e)
	})
	if walkErr == nil {
		walkErr = imp.sameSubdirs()
	}
	if walkErr == nil {
		imp.send()
	}
	close(imp.work)
	imp.wg.Wait()
	imp.prog.Stop()
	if walkErr == nil {
		walkErr = imp.failed()
	}
	if walkErr != nil {
		return imp.stats, fmt.Errorf("import failed, nothing is visible at %s (run esfs fsck --repair to remove what was written): %v", dest, walkErr)
	}
	// The tree exists from here on: DEST's own path document comes last.
	root := store.CreateDentry(store.Dentry{Path: dest, Ino: imp.root, Type: store.TypeDir})
	if err := root.Err(); err != nil {
		return imp.stats, err
	}
	if err := imp.alive(); err != nil {
		return imp.stats, fmt.Errorf("import: %s not made: %w", dest, err)
	}
	res, err := st.Bulk(ctx, []store.BulkOp{root})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return imp.stats, explain(fmt.Errorf("import: creating %s itself, after everything below it: %w", dest, err))
	}
	// DEST is a new subdirectory of its parent (whose lock we share with
	// mounts that may be making others).
	if _, err := st.AddDirLinks(ctx, parentIno, 1, imp.now); err != nil {
		fmt.Fprintf(imp.o.warn(), "esfs import: %s was made, but the link count of its directory may be one off (esfs fsck --repair counts it): %v\n", dest, err)
	}
	if err := txn.End(ctx); err != nil {
		return imp.stats, explain(fmt.Errorf("import: %s was made, but releasing its lock failed: %w", dest, err))
	}
	if l := imp.xattrsOut.line("import"); l != "" {
		fmt.Fprintln(imp.o.warn(), l)
	}
	return imp.stats, nil
}

// sameSubdirs checks that the walk met the subdirectories count did: the
// link counts of the directories were written from the count.
func (imp *Import) sameSubdirs() error {
	for rel, n := range imp.walked {
		if was := imp.subdirs[rel]; n != was {
			return fmt.Errorf("%s: changed during the import (%d subdirectories when counted, %d when read)", filepath.Join(imp.src, rel), was, n)
		}
	}
	for rel, was := range imp.subdirs {
		if _, ok := imp.walked[rel]; !ok {
			return fmt.Errorf("%s: changed during the import (%d subdirectories when counted, none when read)", filepath.Join(imp.src, rel), was)
		}
	}
	return nil
}

// check verifies, under DEST's lock, that the parent is a directory and
// DEST is free. It returns the parent's inode number.
func (imp *Import) check(ctx context.Context, view *locking.View, parent string) (uint64, error) {
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
func (imp *Import) clearLeftovers(ctx context.Context) error {
	if err := imp.st.Refresh(ctx, store.SearchedPaths); err != nil {
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

// count walks the tree once for totals and hard link counts. The bytes
// are what data will read: the data of each file once, whatever its
// links, and not its holes (so a sparse file counts what it holds).
func (imp *Import) count() error {
	var entries, bytes int64
	err := walkLocal(imp.srcDir, imp.src, func(e *localEntry) error {
		st := &e.st
		entries++
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// Numbered now: a hard link's inode, written at its first
			// link, names the directories of all of them.
			imp.dirInos[e.rel] = store.NewIno()
			if e.rel != "." {
				imp.subdirs[relDir(e.rel)]++
			}
		}
		first := true // the first link of a file, whose data is copied
		if st.Mode&unix.S_IFMT != unix.S_IFDIR && st.Nlink > 1 {
			k := devIno{uint64(st.Dev), st.Ino}
			l := imp.links[k]
			if l != nil {
				l.count++
				first = false
			} else {
				l = &linkState{ino: store.NewIno(), count: 1}
				imp.links[k] = l
			}
			l.dirs = append(l.dirs, imp.dirInos[relDir(e.rel)])
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && first && st.Size > 0 {
			bytes += dataIn(e.file, 0, st.Size)
		}
		return nil
	})
	imp.prog.Total(entries, bytes)
	return err
}

func (imp *Import) failed() error {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	return imp.err
}

func (imp *Import) fail(err error) {
	imp.mu.Lock()
	defer imp.mu.Unlock()
	if imp.err == nil {
		imp.err = err
	}
}

func (imp *Import) worker(ctx context.Context) {
	defer imp.wg.Done()
	for b := range imp.work {
		if imp.failed() != nil {
			continue // drain
		}
		if len(b.ops) == 0 {
			imp.prog.Add(b.files, b.bytes)
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
		imp.prog.Add(b.files, b.bytes)
	}
}

// add queues one write; a full batch goes to the workers.
func (imp *Import) add(o store.BulkOp, size int) {
	imp.batch = append(imp.batch, o)
	imp.size += size
	if imp.size >= importBatchBytes || len(imp.batch) >= importBatchItems {
		imp.send()
	}
}

func (imp *Import) send() {
	if len(imp.batch) == 0 && imp.files == 0 {
		return
	}
	imp.work <- bulkBatch{ops: imp.batch, files: imp.files, bytes: imp.bytes}
	imp.batch, imp.size, imp.files, imp.bytes = nil, 0, 0, 0
}
