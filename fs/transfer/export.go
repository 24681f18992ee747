package transfer

import (
	"context"
	"fmt"
	"os"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
)

// ExportStats counts what an export copied, and what it left out without
// failing.
type ExportStats struct {
	Entries int64 // copied
	Gone    int64 // removed by other mounts during the export, left out
	// DevicesSkipped counts the devices not made: only root can make them.
	DevicesSkipped int64
}

// Export copies src, a path of the filesystem, to local, a local path that
// must not exist, like cp -a, from store st read through view (a
// locking.Reader's: export writes nothing to the store). The listing is
// one point-in-time snapshot, as readers see it; entries on which the
// listing and the documents disagree are named on Options.Warn and left
// out, and Export fails once it has copied everything else.
func Export(ctx context.Context, st *store.Store, view *locking.View, src, local string, o Options) (ExportStats, error) {
	explain, prog := o.explain, o.Progress
	prog.Start()
	ex := &exporter{st: st, view: view, src: src, local: local, links: map[uint64]string{}, prog: prog, o: o, root: os.Geteuid() == 0,
		dirs: map[string]*exportDir{}, notCopied: map[string]leftOut{}}
	// fail stops the progress and prints what was found so far first.
	fail := func(err error) error {
		prog.Stop()
		ex.report()
		return err
	}
	// One consistent snapshot of SRC, as readers see it: a rename in flight
	// in it is copied under its old names or its new ones.
	sc, err := view.Scan(ctx, src)
	if err != nil {
		return ex.stats(), fail(explain(fmt.Errorf("export: %w", err)))
	}
	defer sc.Close()
	for {
		page, bad, err := sc.Next(ctx)
		if err != nil {
			return ex.stats(), fail(explain(fmt.Errorf("export: listing %s failed after %d entries (what was copied stays in %s): %w", src, ex.entries, local, err)))
		}
		for _, b := range bad {
			ex.problems++
			ex.note(fmt.Sprintf("esfs export: an unreadable path document, not copied: %v", b))
		}
		if page == nil {
			break
		}
		if err := ex.page(ctx, page); err != nil {
			return ex.stats(), fail(explain(fmt.Errorf("export failed (what was copied stays in %s): %w", local, err)))
		}
	}
	if !ex.sawSrc {
		exists, err := ex.existsNow(ctx)
		switch {
		case err != nil:
			return ex.stats(), fail(explain(fmt.Errorf("export: %s is not in the listing, and reading it failed: %w", src, err)))
		case exists:
			return ex.stats(), fail(fmt.Errorf("export: %s exists (read directly) but the listing of the index does not show it, so its contents cannot be listed; nothing below it was exported (esfs fsck checks the index)", src))
		case ex.problems == 0:
			return ex.stats(), fail(fmt.Errorf("export: %s does not exist in the filesystem", src))
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
			return ex.stats(), fail(explain(fmt.Errorf("export: counting the subdirectories of %s: %w", d.path, err)))
		}
		if !dirLinksAgree(nlink, now) {
			ex.problems++
			ex.note(fmt.Sprintf("esfs export: %s: directory with %d links, but its listing shows %d subdirectories (want %d links): a subdirectory may be missing from the listing", d.path, nlink, now, vfs.DirLinks(now)))
		}
	}
	// Directories last, deepest first: writing into them changed their times.
	for i := len(ex.dirOrder) - 1; i >= 0; i-- {
		if err := ex.finish(ex.dirOrder[i].local, ex.dirOrder[i].attr); err != nil {
			return ex.stats(), fail(fmt.Errorf("export: %v", err))
		}
	}
	prog.Stop()
	ex.report()
	if ex.problems > 0 {
		return ex.stats(), fmt.Errorf("export: %d entries of %s were not copied: the listing and the filesystem disagree (above; esfs fsck checks the index); the other %d entries are in %s",
			ex.problems+ex.uncopied, src, ex.entries, local)
	}
	return ex.stats(), nil
}

func (ex *exporter) stats() ExportStats {
	return ExportStats{Entries: ex.entries, Gone: ex.gone, DevicesSkipped: ex.devicesSkipped}
}

// countSubdirs reads a directory's link count now, and then counts the
// visible subdirectories of a listing taken after a refresh.
func (ex *exporter) countSubdirs(ctx context.Context, dir string, ino uint64) (uint32, uint32, error) {
	a, err := ex.st.GetInode(ctx, ino)
	if err != nil {
		return 0, 0, err
	}
	if err := ex.st.Refresh(ctx, store.SearchedPaths); err != nil {
		return 0, 0, err
	}
	sc := ex.view.List(dir, store.DefaultPageSize)
	defer sc.Close()
	var count uint32
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
func dirLinksAgree(nlink uint32, listedSubdirs uint32) bool {
	return nlink < 2 || nlink == vfs.DirLinks(listedSubdirs)
}

// maxReported bounds the problem and warning lines export keeps to print.
const maxReported = 100

type exporter struct {
	st      *store.Store
	view    *locking.View
	src     string
	local   string
	links   map[uint64]string // inode -> first local path, for hard links
	prog    Progress
	o       Options
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
	subdirs     uint32 // listed and copied
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
		fmt.Fprintln(ex.o.warn(), l)
	}
	if ex.dropped > 0 {
		fmt.Fprintf(ex.o.warn(), "esfs export: ... and %d more\n", ex.dropped)
	}
	ex.lines, ex.dropped = nil, 0
}
