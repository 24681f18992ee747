package transfer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"golang.org/x/sys/unix"
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
	// LOCAL's directory is resolved once, here, as the user named it;
	// everything below it is reached through descriptors (exportDir).
	top, err := unix.Open(filepath.Dir(local), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return ExportStats{}, fmt.Errorf("export: %s: %v", filepath.Dir(local), err)
	}
	prog.Start()
	ex := &exporter{st: st, view: view, src: src, local: local, links: map[uint64]exportAt{}, prog: prog, o: o, root: os.Geteuid() == 0,
		dirs: map[string]*exportDir{}, notCopied: map[string]leftOut{}, xattrsOut: xattrsLeft{},
		top: &exportDir{local: filepath.Dir(local), fd: top, pinned: true}}
	defer ex.closeDirs()
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
			if ex.entries == 0 {
				return ex.stats(), fail(explain(fmt.Errorf("export failed, nothing was copied: %w", err)))
			}
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
	// Directories last, deepest first: writing into them changed their
	// times, and each is finished only once nothing more is made in it
	// (until then it is 0700: nobody else can change what is in it).
	for i := len(ex.dirOrder) - 1; i >= 0; i-- {
		ex.trimDirs()
		d := ex.dirOrder[i]
		fd, err := ex.dirFD(d)
		if err != nil {
			return ex.stats(), fail(fmt.Errorf("export: %v", err))
		}
		if err := ex.finish(node{fd: fd}, d.local, d.attr); err != nil {
			return ex.stats(), fail(fmt.Errorf("export: %s: %v", d.local, err))
		}
	}
	if l := ex.xattrsOut.line("export"); l != "" {
		ex.note(l)
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
	st    *store.Store
	view  *locking.View
	src   string
	local string
	links map[uint64]exportAt // inode -> where its first link was made, for hard links
	// top is LOCAL's directory, where LOCAL is made.
	top *exportDir
	// open holds the directories with an open descriptor, but top and
	// LOCAL (pinned), at most maxOpenDirs between entries (trimDirs).
	open      []*exportDir
	xattrsOut xattrsLeft
	prog      Progress
	o         Options
	root      bool
	entries   int64 // copied

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

// exportDir is a directory export made, or top. Its descriptor (fd, -1
// when closed) is opened again when needed from its parent's, without
// following a symlink, and checked to be the directory made (dev, ino).
type exportDir struct {
	path    string // in the filesystem
	local   string // for messages only: nothing is opened by it
	attr    store.Inode
	subdirs uint32 // listed and copied

	parent   *exportDir
	name     string // in parent
	dev, ino uint64
	fd       int
	pinned   bool // never closed before the end
}

// maxOpenDirs bounds the directory descriptors export keeps between
// entries: a tree may have more directories than a process descriptors.
const maxOpenDirs = 128

// mkdir makes the directory at at (0700) and returns it, open. Where it
// is LOCAL itself, made in a directory that others may write in, the
// name may have been replaced between the two calls: the descriptor must
// hold a directory of ours that no one else may write in (the one made),
// or export stops.
func (ex *exporter) mkdir(at exportAt, dfd int) (*exportDir, error) {
	if err := unix.Mkdirat(dfd, at.name, 0o700); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(dfd, at.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		return nil, replaced(at.local, "during the export", unix.S_IFDIR, "made", nowAt(dfd, at.name))
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		unix.Close(fd)
		return nil, replaced(at.local, "during the export", unix.S_IFDIR, "made", fmt.Sprintf("a %s of uid %d, mode %o", typeName(st.Mode), st.Uid, st.Mode&0o7777))
	}
	d := &exportDir{local: at.local, parent: at.dir, name: at.name, dev: uint64(st.Dev), ino: st.Ino, fd: fd, pinned: at.dir == ex.top}
	if !d.pinned {
		ex.open = append(ex.open, d)
	}
	return d, nil
}

// dirFD returns d's descriptor, opening it again from its parent's if it
// was closed.
func (ex *exporter) dirFD(d *exportDir) (int, error) {
	if d.fd >= 0 {
		return d.fd, nil
	}
	pfd, err := ex.dirFD(d.parent)
	if err != nil {
		return -1, err
	}
	fd, err := unix.Openat(pfd, d.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%s: opening again a directory export made: %v", d.local, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: %v", d.local, err)
	}
	if uint64(st.Dev) != d.dev || st.Ino != d.ino {
		unix.Close(fd)
		return -1, fmt.Errorf("%s: replaced during the export (not the directory export made); not followed", d.local)
	}
	d.fd = fd
	ex.open = append(ex.open, d)
	return fd, nil
}

// trimDirs closes the open directories when there are more than
// maxOpenDirs; it is called between entries, never while a descriptor
// dirFD returned is in use.
func (ex *exporter) trimDirs() {
	if len(ex.open) <= maxOpenDirs {
		return
	}
	for _, d := range ex.open {
		unix.Close(d.fd)
		d.fd = -1
	}
	ex.open = ex.open[:0]
}

func (ex *exporter) closeDirs() {
	for _, d := range ex.open {
		unix.Close(d.fd)
		d.fd = -1
	}
	ex.open = nil
	for _, d := range ex.dirs {
		if d.pinned && d.fd >= 0 {
			unix.Close(d.fd)
			d.fd = -1
		}
	}
	unix.Close(ex.top.fd)
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
