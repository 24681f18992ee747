package cmd

// esfs find: GNU find's expression answered from the index. The
// expression says which path and inode documents may produce output
// (pushed down as queries); the documents fetched are a superset of the
// answer, and each file is judged exactly on the client, in the order a
// walk through a mount visits them, so that the output is GNU find's.

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/esfs/esfs/fs"
	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// findPageSize is the hits per page of find's scans.
const findPageSize = 5000

func cmdFind() *cli.Command {
	return &cli.Command{
		Name:  "find",
		Usage: "find files by name and attributes as GNU find does, from the index: esfs find /mnt/esfs -size +100M -mtime -7",
		// UsageText, unlike Description, is in the man page too.
		UsageText: `esfs find [--index NAME] [--es-url URL] [PATH...] [EXPRESSION]
EXPRESSION (GNU find's): -name -iname -path -ipath -lname -ilname PATTERN,
-type [fdlpscb], -size [+-]N[bcwkMG], -mtime -atime -ctime [+-]DAYS,
-mmin -amin -cmin [+-]MINUTES, -newer -anewer -cnewer FILE, -user -group NAME,
-uid -gid -links -inum [+-]N, -nouser, -nogroup, -perm [-/]MODE, -empty,
-true, -false; -print, -print0, -printf FORMAT; -maxdepth N, -mindepth N,
-depth, -daystart; ( EXPR ), ! EXPR, -not, -a, -and, -o, -or, ","`,
		Description: `Prints the files under each PATH that EXPRESSION selects, as GNU find
does through a mount, from the index instead of walking the tree
(mounts that write in memory are asked to flush first).

PATH is a path under a mount point of the filesystem (/mnt/esfs/projects,
or . in a mount), printed as given so that the output can go to xargs;
or, when it is under no mount of the filesystem, a path from its root
(/projects). Without PATH: the current directory. Without --index (or
ESFS_INDEX), the filesystem is the one mounted where the paths are.

esfs's own flags come first, before the paths: every argument after them
is find's (or set ELASTICSEARCH_URL and ESFS_INDEX):
  esfs find --index fs /mnt/esfs -name '*.log' -size +100M

EXPRESSION is GNU find's (see USAGE), with its precedence and -print as
the default. -printf knows %p %P %f %h %H %d %s %b %k %n %i %l %m %M %u %g
%U %G %y %S %F %a %c %t %Ak %Ck %Tk %%, widths such as %-10s, and \n \t
\0 \\ \NNN \c.

The output is GNU find's through a mount of the filesystem, in the same
order. What differs: symbolic links are never followed (as find -P);
there is no -exec, -delete, -prune, -quit, -regex, -ls, %D or %Y (pipe the
paths to xargs instead: esfs find ... -print0 | xargs -0 ...); names are
printed as they are, also to a terminal; where GNU find's optimizer moves
a test before an action that precedes it in the expression (a bug of GNU
find 4.9), the written order holds. Exit status 0, or 1 when a PATH does
not exist or the expression is wrong.`,
		SkipFlagParsing: true, // find's expression is GNU's, with single dashes: read by runFind
		Flags:           adminFlags(),
		BashComplete:    completeFind,
		Action:          runFind,
	}
}

// findPrimaries are the words of find's expression, for completion.
var findPrimaries = []string{
	"-name", "-iname", "-path", "-ipath", "-wholename", "-iwholename", "-lname", "-ilname",
	"-type", "-size", "-mtime", "-atime", "-ctime", "-mmin", "-amin", "-cmin",
	"-newer", "-anewer", "-cnewer", "-user", "-group", "-uid", "-gid", "-links", "-inum",
	"-nouser", "-nogroup", "-perm", "-empty", "-true", "-false",
	"-print", "-print0", "-printf", "-maxdepth", "-mindepth", "-depth", "-daystart",
	"-not", "-a", "-and", "-o", "-or",
}

// completeFind offers esfs's flags after --, find's primaries after -.
func completeFind(c *cli.Context) {
	args := c.Args().Slice()
	cur := ""
	if len(args) > 0 {
		cur = args[len(args)-1]
	}
	switch {
	case strings.HasPrefix(cur, "--"):
		for _, f := range c.Command.Flags {
			fmt.Fprintln(c.App.Writer, dashed(f.Names()[0]))
		}
	case strings.HasPrefix(cur, "-"):
		for _, p := range findPrimaries {
			fmt.Fprintln(c.App.Writer, p)
		}
	}
}

// errHelpShown: the command's help was asked for, and printed.
var errHelpShown = errors.New("help shown")

// findFlags sets esfs's flags given before find's arguments (which
// urfave/cli does not parse for find), and returns the rest.
func findFlags(c *cli.Context) ([]string, error) {
	args := c.Args().Slice()
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			return args[1:], nil
		}
		if a == "-h" || a == "--help" {
			return nil, errHelpShown
		}
		if !strings.HasPrefix(a, "--") {
			return args, nil
		}
		name, value, hasValue := strings.Cut(a[2:], "=")
		f := findFlag(c.Command.Flags, name)
		if f == nil {
			return nil, usagef("find: unknown flag %s%s (esfs's flags come before the paths; find's own start with one dash; see esfs help find)",
				dashed(name), didYouMean(name, flagNames(c.Command.Flags), true))
		}
		args = args[1:]
		if _, isBool := f.(*cli.BoolFlag); isBool && !hasValue {
			value, hasValue = "true", true
		}
		if !hasValue {
			if len(args) == 0 {
				return nil, usagef("find: %s needs a value", dashed(name))
			}
			value, args = args[0], args[1:]
		}
		if err := c.Set(name, value); err != nil {
			return nil, usageError{fmt.Errorf("find: %w", badValue(f, dashed(name), value, err.Error()))}
		}
	}
	return args, nil
}

func runFind(c *cli.Context) error {
	args, err := findFlags(c)
	if errors.Is(err, errHelpShown) {
		return cli.ShowCommandHelp(c, "find")
	}
	if err != nil {
		return err
	}
	ids := newIDNames()
	env := findEnv{now: time.Now(), chars: utf8Locale(os.Getenv), lookupU: ids.userID, lookupG: ids.groupID, lstat: os.Lstat}
	x, err := parseFind(args, env)
	var ferr findError
	if errors.As(err, &ferr) {
		fmt.Fprintf(os.Stderr, "esfs find: %s\n", ferr.msg)
		return exitCode{1}
	}
	if err != nil {
		return err
	}
	for _, w := range x.warnings {
		fmt.Fprintf(os.Stderr, "esfs find: %s\n", w)
	}
	if len(x.paths) == 0 {
		x.paths = []string{"."}
	}
	mounts, err := mountTable()
	if err != nil {
		return err
	}
	if err := indexOfMounts(c, x.paths, mounts); err != nil {
		return err
	}
	index := c.String("index")
	// Each PATH is resolved before anything is asked of Elasticsearch: a
	// path under no mount is a mistake that needs no cluster.
	starts := make([]findStart, len(x.paths))
	for i, p := range x.paths {
		if starts[i], err = resolveFindPath(p, index, mounts); err != nil {
			return err
		}
	}

	st, r, err := adminView(c, store.SearchedPaths|store.SearchedInodes)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := c.Context
	out := bufio.NewWriterSize(os.Stdout, 64<<10)
	fr := &findRun{x: x, st: st, view: r.View, out: out, ids: ids, chunkSize: st.ChunkSize(), act: x.root.acts()}
	for i := range starts {
		if err := fr.walk(ctx, &starts[i]); err != nil {
			out.Flush()
			return explain(err, c.String("es-url"))
		}
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if fr.failed {
		return exitCode{1}
	}
	return nil
}

// findStart is one starting point: as given, and as a path of the
// filesystem ("" when it names nothing: its error is in missing).
type findStart struct {
	given   string
	fsPath  string
	missing string
}

// resolveFindPath maps a PATH of find to the filesystem: a path inside a
// mount of filesystem index (its directories resolved by the kernel, as
// find would, its last component not: a symbolic link is not followed),
// else an absolute path of the filesystem.
func resolveFindPath(given, index string, mounts []mountLine) (findStart, error) {
	s := findStart{given: given}
	if given == "" {
		s.missing = "‘’: No such file or directory"
		return s, nil
	}
	abs, err := filepath.Abs(given)
	if err != nil {
		return s, err
	}
	local := abs
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		local = filepath.Join(dir, filepath.Base(abs))
	}
	if in, ok := mountOf(local, mounts); ok && in.fstype == esfsType && strings.HasSuffix(given, "/") {
		// A trailing slash makes the kernel follow a symbolic link, and
		// insist on a directory.
		full, err := filepath.EvalSymlinks(abs)
		if err != nil {
			s.missing = statError(given, err)
			return s, nil
		}
		local = full
	}
	path, ok, err := mountedPath(local, index, mounts)
	if err != nil {
		return s, fmt.Errorf("find: %w", err)
	}
	if ok {
		s.fsPath = path
		return s, nil
	}
	if !filepath.IsAbs(given) {
		return s, usagef("find: %s is not in a mount of filesystem %s: give a path under where it is mounted, or one from its root (/dir)", given, index)
	}
	s.fsPath = filepath.Clean(given)
	return s, nil
}

// statBlocks and statNlink are what the mount reports.
func statBlocks(a store.Inode, chunkSize int64) uint64 { return uint64(a.Blocks(chunkSize)) }
func statNlink(a store.Inode) uint32                   { return fs.StatNlink(a) }

// idNames resolves user and group names on this machine, as find's
// -user, -group, %u and %g do, each once.
type idNames struct {
	users, groups map[uint32]string
	knownU        map[uint32]bool
	knownG        map[uint32]bool
}

func newIDNames() *idNames {
	return &idNames{users: map[uint32]string{}, groups: map[uint32]string{}, knownU: map[uint32]bool{}, knownG: map[uint32]bool{}}
}

func (n *idNames) userName(uid uint32) string {
	if s, ok := n.users[uid]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(uid), 10)
	if u, err := user.LookupId(s); err == nil {
		s = u.Username
		n.knownU[uid] = true
	}
	n.users[uid] = s
	return s
}

func (n *idNames) groupName(gid uint32) string {
	if s, ok := n.groups[gid]; ok {
		return s
	}
	s := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(s); err == nil {
		s = g.Name
		n.knownG[gid] = true
	}
	n.groups[gid] = s
	return s
}

func (n *idNames) userKnown(uid uint32) bool {
	n.userName(uid)
	return n.knownU[uid]
}

func (n *idNames) groupKnown(gid uint32) bool {
	n.groupName(gid)
	return n.knownG[gid]
}

func (n *idNames) userID(name string) (uint32, bool) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseUint(u.Uid, 10, 32)
	return uint32(id), err == nil
}

func (n *idNames) groupID(name string) (uint32, bool) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseUint(g.Gid, 10, 32)
	return uint32(id), err == nil
}
