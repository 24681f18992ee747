package cmd

// esfs find: GNU find's expression answered from the index. The
// expression says which path and inode documents may produce output
// (pushed down as queries); the documents fetched are a superset of the
// answer, and each file is judged exactly on the client, in the order a
// walk through a mount visits them, so that the output is GNU find's.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/esfs/esfs/fs"
	"github.com/esfs/esfs/locking"
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
	if !c.IsSet("index") || c.String("index") == "" {
		// Neither --index nor ESFS_INDEX: the filesystem mounted where
		// the paths are, if they are under mounts of one.
		if idx := mountedIndex(x.paths, mounts); idx != "" {
			if err := c.Set("index", idx); err != nil {
				return err
			}
		}
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

	st, r, err := adminReader(c)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := c.Context
	if err := flushWriters(ctx, r); err != nil {
		return err
	}
	if err := st.Refresh(ctx, store.SearchedPaths|store.SearchedInodes); err != nil {
		return explain(err, c.String("es-url"))
	}
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
	in, ok := mountOf(local, mounts)
	if ok && in.fstype == esfsType && strings.HasSuffix(given, "/") {
		// A trailing slash makes the kernel follow a symbolic link, and
		// insist on a directory.
		full, err := filepath.EvalSymlinks(abs)
		if err != nil {
			s.missing = statError(given, err)
			return s, nil
		}
		local = full
		in, ok = mountOf(local, mounts)
	}
	if ok && in.fstype == esfsType {
		subdir, ok := subdirOfSource(in.source, index)
		if !ok {
			other, _, _ := strings.Cut(strings.TrimPrefix(in.source, "esfs:"), ":")
			return s, usagef("find: %s is in a mount of filesystem %s, not %s (--index %s)", given, other, index, other)
		}
		rel := strings.TrimPrefix(local, in.dir)
		if in.dir == "/" {
			rel = local
		}
		s.fsPath = filepath.Join(subdir, rel)
		return s, nil
	}
	if !filepath.IsAbs(given) {
		return s, usagef("find: %s is not in a mount of filesystem %s: give a path under where it is mounted, or one from its root (/dir)", given, index)
	}
	s.fsPath = filepath.Clean(given)
	return s, nil
}

// mountedIndex is the filesystem of the esfs mounts that paths are in,
// "" if they are in none or in mounts of several.
func mountedIndex(paths []string, mounts []mountLine) string {
	index := ""
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return ""
		}
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			abs = filepath.Join(dir, filepath.Base(abs))
		}
		m, ok := mountOf(abs, mounts)
		if !ok || m.fstype != esfsType {
			continue
		}
		idx, _, _ := strings.Cut(strings.TrimPrefix(m.source, "esfs:"), ":")
		if index != "" && idx != index {
			return ""
		}
		index = idx
	}
	return index
}

// findRun is one run of esfs find.
type findRun struct {
	x         *findExpr
	st        *store.Store
	view      *locking.View
	out       *bufio.Writer
	ids       *idNames
	chunkSize int64
	act       sides // holds for every file an action runs for
	failed    bool  // an error was reported: exit status 1
}

// fentry is one file as find judges it.
type fentry struct {
	path  string // as printed
	start *findStart
	depth int
	d     store.Dentry // its path document as readers see it
	attr  store.Inode  // its attributes, when the expression needs them
	empty bool         // a directory without entries
}

// fail reports an error about one file on stderr, as GNU find does, and
// goes on.
func (fr *findRun) fail(format string, a ...any) {
	fr.out.Flush()
	fmt.Fprintf(os.Stderr, "esfs find: "+format+"\n", a...)
	fr.failed = true
}

// walk prints what the expression selects at and below start.
func (fr *findRun) walk(ctx context.Context, s *findStart) error {
	if s.missing != "" {
		fr.fail("%s", s.missing)
		return nil
	}
	ent, err := fr.view.Get(ctx, s.fsPath)
	if err != nil {
		return err
	}
	if !ent.Found {
		fr.fail("‘%s’: %s", s.given, fr.missingWhy(ctx, s.fsPath))
		return nil
	}
	if strings.HasSuffix(s.given, "/") && ent.Type != store.TypeDir {
		fr.fail("‘%s’: Not a directory", s.given)
		return nil
	}
	root := &fentry{path: s.given, start: s, d: ent.Dentry}
	entries := []*fentry{root}
	x := fr.x
	if root.d.Type == store.TypeDir && x.maxDepth != 0 {
		below, err := fr.below(ctx, s)
		if err != nil {
			return err
		}
		entries = append(entries, below...)
	}
	if x.needs.attr {
		// Below the root, attributes came with the documents.
		a, err := fr.st.GetInode(ctx, root.d.Ino)
		if errors.Is(err, store.ErrNotFound) {
			fr.fail("‘%s’: No such file or directory", s.given)
			return nil
		}
		if err != nil {
			return err
		}
		root.attr = a
	}
	if x.needs.empty {
		if err := fr.markEmpty(ctx, entries); err != nil {
			return err
		}
	}
	rest := entries[1:]
	sort.Slice(rest, func(i, j int) bool { return pathLess(rest[i].d.Path, rest[j].d.Path, x.depth) })
	if x.depth {
		entries = append(rest, root)
	}
	for _, e := range entries {
		if e.depth < x.minDepth || x.maxDepth >= 0 && e.depth > x.maxDepth {
			continue
		}
		x.root.eval(fr, e)
	}
	return nil
}

// missingWhy is why a path names nothing: a directory above it is not
// one, or it is not there.
func (fr *findRun) missingWhy(ctx context.Context, path string) string {
	for dir, _ := store.Split(path); dir != "" && dir != "/"; dir, _ = store.Split(dir) {
		if e, err := fr.view.Get(ctx, dir); err == nil && e.Found {
			if e.Type != store.TypeDir {
				return "Not a directory"
			}
			break
		}
	}
	return "No such file or directory"
}

// below fetches the files below start that may produce output: those
// whose path and inode documents meet the pushed-down conditions, with
// their attributes if the expression needs them. With a condition on
// inodes that few meet, those inodes are found first and their paths
// looked up; else the paths are scanned and their inodes read. Pages are
// read one after the other, and what each needs next (its inodes, or its
// inodes' paths) is asked for beside the next page (findInFlight at
// once): the work is waiting on Elasticsearch more than computing.
func (fr *findRun) below(ctx context.Context, s *findStart) ([]*fentry, error) {
	x := fr.x
	root := s.fsPath
	pathCond := fr.act.path
	if x.maxDepth >= 0 || x.minDepth > 1 {
		pathCond = store.AllOf(pathCond, store.PathDepth(root, max(1, x.minDepth), x.maxDepth))
	}
	inodeCond := fr.act.inode
	if !x.needs.attr {
		inodeCond = store.TrueCond // only -type: the path documents know it
	}
	if pathCond.IsFalse() || inodeCond.IsFalse() {
		return nil, nil
	}
	inodeFirst := false
	if !inodeCond.IsTrue() {
		ni, err := fr.st.CountInodes(ctx, inodeCond)
		if err != nil || ni == 0 {
			return nil, err
		}
		// A page of inodes and their paths cost no more than a scan of
		// paths would: more than that, whichever is fewer.
		inodeFirst = ni <= findPageSize
		if !inodeFirst {
			np, err := fr.st.CountPaths(ctx, root, pathCond)
			if err != nil {
				return nil, err
			}
			inodeFirst = ni < np
		}
	}
	p := &findPipe{fr: fr, ctx: ctx, s: s, slots: make(chan struct{}, findInFlight)}
	if inodeFirst {
		// The paths of a page of inodes, wherever they are: the inode
		// numbers are the narrowest condition (the root, and what else
		// the paths must meet, is judged here).
		sc := fr.st.FindInodes(inodeCond, findPageSize)
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil {
				p.wait()
				return nil, err
			}
			for _, b := range bad {
				fr.fail("skipping a damaged inode document: %v", b)
			}
			if page == nil {
				break
			}
			p.run(func() (findBatch, error) { return p.pathsOf(page) })
		}
	} else {
		pages, err := fr.view.Search("", nil, store.SearchFilter{Under: root, Where: pathCond}, findPageSize)
		if err != nil {
			return nil, err
		}
		for {
			page, bad, err := pages.Next(ctx)
			if err != nil {
				pages.Close()
				p.wait()
				return nil, err
			}
			for _, b := range bad {
				fr.fail("skipping a damaged path document: %v", b)
			}
			if page == nil {
				break
			}
			p.run(func() (findBatch, error) { return p.withInodes(page, nil) })
		}
		pages.Close()
	}
	return p.collect()
}

// findInFlight bounds the requests a find has in flight at once.
const findInFlight = 3

// findPipe runs the second request of each page of find's scans beside
// the scan, and gathers their files.
type findPipe struct {
	fr    *findRun
	ctx   context.Context
	s     *findStart
	slots chan struct{}
	wg    sync.WaitGroup
	mu    sync.Mutex
	done  []findBatch // GUARDED_BY(mu)
	err   error       // GUARDED_BY(mu): the first
}

// findBatch is what one page gave: files, and the paths whose inode
// was gone.
type findBatch struct {
	entries []*fentry
	gone    []string
}

func (p *findPipe) run(fn func() (findBatch, error)) {
	p.slots <- struct{}{}
	p.wg.Add(1)
	go func() {
		defer func() { <-p.slots; p.wg.Done() }()
		b, err := fn()
		p.mu.Lock()
		defer p.mu.Unlock()
		if err != nil && p.err == nil {
			p.err = err
		}
		p.done = append(p.done, b)
	}()
}

func (p *findPipe) wait() { p.wg.Wait() }

// collect waits for every page and returns their files, each path once.
func (p *findPipe) collect() ([]*fentry, error) {
	p.wait()
	if p.err != nil {
		return nil, p.err
	}
	var out []*fentry
	seen := map[string]bool{}
	for _, b := range p.done {
		for _, g := range b.gone {
			p.fr.fail("‘%s’: No such file or directory", g)
		}
		for _, e := range b.entries {
			if !seen[e.d.Path] {
				seen[e.d.Path] = true
				out = append(out, e)
			}
		}
	}
	return out, nil
}

// pathsOf looks up the paths below the root of the inodes of page.
func (p *findPipe) pathsOf(page []store.Inode) (findBatch, error) {
	attrs := make(map[uint64]store.Inode, len(page))
	inos := make([]uint64, len(page))
	for i, a := range page {
		attrs[a.Ino] = a
		inos[i] = a.Ino
	}
	pages, err := p.fr.view.Search("", inos, store.SearchFilter{}, findPageSize)
	if err != nil {
		return findBatch{}, err
	}
	defer pages.Close()
	var all findBatch
	for {
		found, bad, err := pages.Next(p.ctx)
		if err != nil {
			return findBatch{}, err
		}
		if len(bad) > 0 {
			return findBatch{}, fmt.Errorf("a damaged path document: %w", bad[0])
		}
		if found == nil {
			return all, nil
		}
		b, err := p.withInodes(found, attrs)
		if err != nil {
			return findBatch{}, err
		}
		all.entries, all.gone = append(all.entries, b.entries...), append(all.gone, b.gone...)
	}
}

// withInodes makes the files of the path documents of page strictly
// below the root, with their attributes (from attrs, else read) if the
// expression needs them.
func (p *findPipe) withInodes(page []store.Dentry, attrs map[uint64]store.Inode) (findBatch, error) {
	root := p.s.fsPath
	var keep []store.Dentry
	for _, d := range page {
		if d.Path != root && store.IsWithin(d.Path, root) {
			keep = append(keep, d)
		}
	}
	var b findBatch
	if !p.fr.x.needs.attr {
		for _, d := range keep {
			b.entries = append(b.entries, p.fr.entry(p.s, d))
		}
		return b, nil
	}
	if attrs == nil {
		attrs = map[uint64]store.Inode{}
	}
	var want []uint64
	wanted := map[uint64]bool{}
	for _, d := range keep {
		if _, ok := attrs[d.Ino]; !ok && !wanted[d.Ino] {
			wanted[d.Ino] = true
			want = append(want, d.Ino)
		}
	}
	if len(want) > 0 {
		res, err := p.fr.st.GetInodes(p.ctx, want)
		if err != nil {
			return b, err
		}
		for _, r := range res {
			if r.Err == nil {
				attrs[r.Inode.Ino] = r.Inode
			} else if !errors.Is(r.Err, store.ErrNotFound) {
				return b, r.Err
			}
		}
	}
	for _, d := range keep {
		e := p.fr.entry(p.s, d)
		a, ok := attrs[d.Ino]
		if !ok {
			b.gone = append(b.gone, e.path)
			continue
		}
		e.attr = a
		b.entries = append(b.entries, e)
	}
	return b, nil
}

// entry is the file of path document d below start s, named as find
// names it: the starting point as given, then the path below it.
func (fr *findRun) entry(s *findStart, d store.Dentry) *fentry {
	rel := d.Path
	if s.fsPath != "/" {
		rel = d.Path[len(s.fsPath):]
	}
	p := s.given + rel
	if strings.HasSuffix(s.given, "/") {
		p = s.given + rel[1:]
	}
	return &fentry{path: p, start: s, depth: strings.Count(rel, "/"), d: d}
}

// markEmpty finds which directories of entries have no entries of their
// own, for -empty.
func (fr *findRun) markEmpty(ctx context.Context, entries []*fentry) error {
	var dirs []*fentry
	for _, e := range entries {
		if e.d.Type == store.TypeDir {
			dirs = append(dirs, e)
		}
	}
	for len(dirs) > 0 {
		batch := dirs[:min(len(dirs), inoBatch)]
		dirs = dirs[len(batch):]
		paths := make([]string, len(batch))
		for i, e := range batch {
			paths[i] = e.d.Path
		}
		plain, inFlight, err := fr.st.EntryCounts(ctx, paths)
		if err != nil {
			return err
		}
		for _, e := range batch {
			p := e.d.Path
			switch {
			case plain[p] > 0:
			case inFlight[p] == 0:
				e.empty = true
			default:
				// Entries that a rename in flight may hide: the view tells.
				empty, err := fr.listsNothing(ctx, p)
				if err != nil {
					return err
				}
				e.empty = empty
			}
		}
	}
	return nil
}

// listsNothing reports whether readers see no entries in dir.
func (fr *findRun) listsNothing(ctx context.Context, dir string) (bool, error) {
	pages := fr.view.List(dir, 100)
	defer pages.Close()
	for {
		page, _, err := pages.Next(ctx)
		if err != nil {
			return false, err
		}
		if page == nil {
			return true, nil
		}
		if len(page) > 0 {
			return false, nil
		}
	}
}

// pathLess orders paths as a walk visits them: directory by directory,
// each in its listing's order (store.CompareNames), a directory before what
// it holds, or after it with post (-depth).
func pathLess(a, b string, post bool) bool {
	i, j := 0, 0
	for {
		for i < len(a) && a[i] == '/' {
			i++
		}
		for j < len(b) && b[j] == '/' {
			j++
		}
		if i >= len(a) || j >= len(b) {
			if i >= len(a) && j >= len(b) {
				return false
			}
			return (i >= len(a)) != post
		}
		ei, ej := i, j
		for ei < len(a) && a[ei] != '/' {
			ei++
		}
		for ej < len(b) && b[ej] != '/' {
			ej++
		}
		if ca, cb := a[i:ei], b[j:ej]; ca != cb {
			return store.CompareNames(ca, cb) < 0
		}
		i, j = ei, ej
	}
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
