package cmd

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/esfs/esfs/fs/transfer"
	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// The import and export commands: their arguments, progress and summary.
// What they do is in fs/transfer.

func cmdImport() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "load the local directory LOCALDIR into the filesystem as DEST (a new directory), through _bulk",
		ArgsUsage: "LOCALDIR DEST",
		Description: `DEST is a path in the filesystem (/projects/x); it must not exist, its
parent must. Modes, owners, times, symlinks, FIFOs, sockets, devices, hard
links (within the tree) and extended attributes are kept. DEST appears
only when everything below it is written: an import that fails leaves
nothing visible, and running it again first removes what the failed one
wrote (fsck --repair removes its orphaned inodes). Other mounts can work
meanwhile; DEST is locked while it is made.

LOCALDIR is resolved once; below it, nothing is read by name or followed
if it is a symlink: an entry replaced while import reads it (a file
swapped for a symlink, say) fails the import, naming it.

` + allXattrsHelp,
		Flags:  adminFlags(quietFlag(), allXattrsFlag()),
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
stderr and export exits 1 after copying everything else.

LOCALDIR's directory is resolved once; everything is made below it through
descriptors, never following a symlink, and each directory is 0700 until
its contents are finished: a name replaced meanwhile (LOCALDIR swapped for
a symlink, say) stops the export, naming it.

` + allXattrsHelp,
		Flags:  adminFlags(quietFlag(), allXattrsFlag()),
		Action: runExport,
	}
}

func quietFlag() cli.Flag {
	return &cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "no progress, only errors and the summary"}
}

// allXattrsHelp says which extended attributes are copied, in both
// commands' help.
const allXattrsHelp = `Extended attributes are copied in the user.* and trusted.* namespaces.
--all-xattrs copies the others too, as cp -a and rsync -X run as root do:
security.* (file capabilities, SELinux labels) and system.* (ACLs), which
grant or deny access and which a mount neither serves nor stores; without
it they are counted in one warning.`

func allXattrsFlag() cli.Flag {
	return &cli.BoolFlag{Name: "all-xattrs", Usage: "copy the extended attributes of every namespace, security.* (file capabilities, SELinux labels) and system.* (ACLs) too, not only user.* and trusted.*"}
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

// transferOptions reports a transfer's progress and warnings on stderr
// (the warnings through the progress, which clears its line for them),
// and explains its errors of Elasticsearch as the other commands do.
func transferOptions(c *cli.Context, prog *progress) transfer.Options {
	url := c.String("es-url")
	return transfer.Options{Progress: prog, Warn: prog, Explain: func(err error) error { return explain(err, url) }, AllXattrs: c.Bool("all-xattrs")}
}

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
	imp, err := transfer.NewImport(src, dest, transferOptions(c, prog))
	if err != nil {
		return err
	}
	defer imp.Close()

	st, co, done, err := adminSession(c)
	if err != nil {
		return err
	}
	defer done()
	n, err := imp.Run(c.Context, st, co)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "imported %s to %s: %d files, %d directories, %d symlinks, %d special files, %s in %s (%s/s)%s\n",
		src, dest, n.Regular, n.Dirs, n.Symlinks, n.Special, mib(prog.bytesDone()), prog.elapsed().Round(time.Millisecond),
		mib(int64(float64(prog.bytesDone())/max(prog.elapsed().Seconds(), 1e-3))), skippedNote(n.Skipped))
	return nil
}

func skippedNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d devices skipped", n)
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
	st, r, err := adminReader(c)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := flushWriters(c.Context, r); err != nil {
		return err
	}
	prog := newProgress("export", c.Bool("quiet"))
	n, err := transfer.Export(c.Context, st, r.View, src, local, transferOptions(c, prog))
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "exported %s to %s: %d entries, %s in %s%s\n", src, local, n.Entries, mib(prog.bytesDone()),
		prog.elapsed().Round(time.Millisecond), goneNote(n.Gone))
	if n.DevicesSkipped > 0 {
		return fmt.Errorf("export: %d devices not made (only root can make devices); everything else is in %s", n.DevicesSkipped, local)
	}
	return nil
}

func goneNote(n int64) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d removed by other mounts during the export were left out", n)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
