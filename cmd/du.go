package cmd

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

func cmdDu() *cli.Command {
	return &cli.Command{
		Name:      "du",
		Usage:     "disk usage of PATHs, as GNU du prints it through a mount, from sums the index keeps (no walk)",
		ArgsUsage: "[-s] [-h] [-a] [-c] [-d N] [--apparent-size] [-b] [PATH...]",
		Description: `Prints what GNU du prints for the same PATHs through a mount of the
filesystem, line for line and in the same order, without walking the tree:
the sizes come from sums over the inode index.

PATH is a path in the filesystem (/projects), or a path under a mount point
of it (/mnt/esfs/projects, or a relative path from inside a mount): it is
printed as given. No PATH is the current directory, which must then be in a
mount. Sizes are st_blocks as every mount reports them (a sparse file takes
fewer blocks than its size), in 1024-byte blocks unless -h, --si, -k, -m
or -b say otherwise; a file with several links is counted once, where du
meets it first.

The options are GNU du's, parsed as GNU does: short ones combine (-sh,
-ach, -d1), long ones may be abbreviated (--max=1), and options may follow
the PATHs; -- ends them. The --es-* and --index options are esfs's.

What differs from GNU du: only the options above; -h is human-readable (use
--help for help); a usage mistake exits with status 2 (GNU: 1); the
environment's DU_BLOCK_SIZE, BLOCK_SIZE and POSIXLY_CORRECT are ignored,
and sizes are written with a "." whatever the locale; a path in the
filesystem (not under a mount) that goes through a symbolic link is
refused, where under a mount the kernel follows it. An operand that is a
symbolic link is not followed (as du without -D), unless a slash ends it.`,
		SkipFlagParsing:    true, // GNU's syntax: runDu parses it (parseDu)
		HideHelp:           true, // -h is --human-readable; --help is duFlags'
		CustomHelpTemplate: duHelpTemplate,
		Flags:              append(duFlags(), adminFlags()...),
		Action:             runDu,
	}
}

// duHelpTemplate is urfave/cli's CommandHelpTemplate without the help
// flag that `esfs help du` lists for every command: "--help, -h", where
// du's -h is --human-readable.
const duHelpTemplate = `NAME:
   {{template "helpNameTemplate" .}}

USAGE:
   {{template "usageTemplate" .}}{{if .Description}}

DESCRIPTION:
   {{template "descriptionTemplate" .}}{{end}}

OPTIONS:{{range .VisibleFlags}}{{if not (and (eq .Name "help") .Aliases)}}
   {{wrap .String 6}}{{end}}{{end}}
`

// duFlags are du's options, for the help, the man page and completion;
// parseDu reads them.
func duFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "summarize", Aliases: []string{"s"}, Usage: "print only a total for each PATH (--max-depth=0)"},
		&cli.BoolFlag{Name: "human-readable", Aliases: []string{"h"}, Usage: "sizes in powers of 1024 with a suffix (1.5K 234M 2G), rounded up"},
		&cli.BoolFlag{Name: "si", Usage: "as -h, in powers of 1000"},
		&cli.BoolFlag{Name: "all", Aliases: []string{"a"}, Usage: "print files too, not only directories"},
		&cli.BoolFlag{Name: "total", Aliases: []string{"c"}, Usage: "print a grand total last"},
		&cli.IntFlag{Name: "max-depth", Aliases: []string{"d"}, DefaultText: "no limit", Usage: "print a directory (or a file, with -a) only if it is at most `N` levels below its PATH"},
		&cli.BoolFlag{Name: "apparent-size", Usage: "sum sizes (st_size) rather than disk usage (st_blocks)"},
		&cli.BoolFlag{Name: "bytes", Aliases: []string{"b"}, Usage: "--apparent-size, in bytes"},
		&cli.BoolFlag{Name: "k", Usage: "in 1024-byte blocks (the default)"},
		&cli.BoolFlag{Name: "m", Usage: "in 1048576-byte blocks"},
		&cli.BoolFlag{Name: "help", Usage: "show this help"},
	}
}

// duOptions is a du command line.
type duOptions struct {
	all, total, apparent, summarize bool
	maxDepth                        int // -1: no limit
	depthGiven                      bool
	units                           duUnits
	help                            bool
	paths                           []string
}

// duLongOptions are du's long options; each takes no value but
// max-depth.
var duLongOptions = []string{"all", "apparent-size", "bytes", "human-readable", "max-depth", "si", "summarize", "total", "help"}

// parseDu reads a du command line as GNU getopt_long does: options and
// operands in any order, short options combined (-sh, -d1, -d 1), long
// ones abbreviated to any unique prefix (--max=1, --max 1), "--" ending
// the options. Long options that are not du's are esfs's own (adminFlags):
// set is given each, with its value.
func parseDu(args []string, admin []cli.Flag, set func(name, value string) error) (duOptions, error) {
	o := duOptions{maxDepth: -1, units: duUnits{blockSize: 1024}}
	adminTakesValue := map[string]bool{}
	var longNames []string
	longNames = append(longNames, duLongOptions...)
	for _, f := range admin {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			if len(n) > 1 {
				adminTakesValue[n] = !isBool
				longNames = append(longNames, n)
			}
		}
	}
	depth := func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return usagef("invalid maximum depth %q: give a number of levels, such as 1", v)
		}
		o.maxDepth, o.depthGiven = n, true
		return nil
	}
	short := func(c byte) error {
		switch c {
		case 'a':
			o.all = true
		case 'b':
			o.apparent, o.units = true, duUnits{blockSize: 1}
		case 'c':
			o.total = true
		case 'h':
			o.units = duUnits{blockSize: 1, autoscale: true}
		case 'k':
			o.units = duUnits{blockSize: 1024}
		case 'm':
			o.units = duUnits{blockSize: 1 << 20}
		case 's':
			o.summarize = true
		default:
			return usagef("unknown option -%c (du takes -a -b -c -d N -h -k -m -s, --apparent-size, --si; see esfs help du)", c)
		}
		return nil
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			o.paths = append(o.paths, args[i+1:]...)
			return o, nil
		case strings.HasPrefix(a, "--"):
			name, value, hasValue := strings.Cut(a[2:], "=")
			full, err := longOption(name, longNames)
			if err != nil {
				return o, err
			}
			takesValue := full == "max-depth" || adminTakesValue[full]
			if hasValue && !takesValue {
				if _, isAdmin := adminTakesValue[full]; !isAdmin {
					return o, usagef("option --%s takes no value", full)
				}
			}
			if takesValue && !hasValue {
				if i+1 >= len(args) {
					return o, usagef("option --%s needs a value", full)
				}
				i++
				value = args[i]
			}
			switch full {
			case "all":
				o.all = true
			case "apparent-size":
				o.apparent = true
			case "bytes":
				err = short('b')
			case "human-readable":
				err = short('h')
			case "si":
				o.units = duUnits{blockSize: 1, autoscale: true, base1000: true}
			case "summarize":
				o.summarize = true
			case "total":
				o.total = true
			case "help":
				o.help = true
			case "max-depth":
				err = depth(value)
			default:
				if !hasValue && !takesValue {
					value = "true"
				}
				if err = set(full, value); err != nil {
					err = usagef("--%s %q: %v", full, value, err)
				}
			}
			if err != nil {
				return o, err
			}
		case len(a) > 1 && a[0] == '-':
			for j := 1; j < len(a); j++ {
				if a[j] != 'd' {
					if err := short(a[j]); err != nil {
						return o, err
					}
					continue
				}
				v := a[j+1:]
				if v == "" {
					if i+1 >= len(args) {
						return o, usagef("option -d needs a value (the maximum depth)")
					}
					i++
					v = args[i]
				}
				if err := depth(v); err != nil {
					return o, err
				}
				break
			}
		default:
			o.paths = append(o.paths, a)
		}
	}
	return o, nil
}

// longOption is the long option that name names: itself, or the one it
// is a prefix of, as getopt_long takes abbreviations.
func longOption(name string, names []string) (string, error) {
	var matches []string
	for _, n := range names {
		if n == name {
			return n, nil
		}
		if name != "" && strings.HasPrefix(n, name) {
			matches = append(matches, n)
		}
	}
	switch len(matches) {
	case 0:
		return "", usagef("unknown option --%s%s", name, didYouMean(name, names, true))
	case 1:
		return matches[0], nil
	}
	sort.Strings(matches)
	return "", usagef("option --%s is ambiguous: --%s", name, strings.Join(matches, ", --"))
}

func runDu(c *cli.Context) error {
	o, err := parseDu(c.Args().Slice(), adminFlags(), c.Set)
	if err != nil {
		return err
	}
	if o.help {
		return cli.ShowCommandHelp(c, "du")
	}
	switch {
	case o.summarize && o.all:
		return usagef("-s and -a: cannot both summarize and show all entries")
	case o.summarize && o.depthGiven && o.maxDepth != 0:
		return usagef("-s and --max-depth=%d: summarizing conflicts with a depth (-s is --max-depth=0)", o.maxDepth)
	case o.summarize && o.depthGiven:
		fmt.Fprintln(os.Stderr, "esfs: du: warning: summarizing is the same as using --max-depth=0")
	}
	if len(o.paths) == 0 {
		o.paths = []string{"."}
	}
	mounts, err := mountTable()
	if err != nil {
		return err
	}
	if err := indexOfMounts(c, o.paths, mounts); err != nil {
		return err
	}
	index := c.String("index")
	args := make([]duArg, len(o.paths))
	for i, p := range o.paths {
		if args[i], err = resolveDuArg(p, index, mounts); err != nil {
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
	w := newDuWalk(o, out, len(args))
	b := &duBuilder{st: st, view: r.View, all: o.all, maxDepth: w.maxDepth, log: quietLogger(c.Bool("debug"))}
	if len(args) > 1 {
		b.operands = map[string]bool{}
		for _, a := range args {
			if a.problem == "" {
				b.operands[a.path] = true
			}
		}
	}
	failed := false
	for _, a := range args {
		if a.problem != "" {
			out.Flush() // in order with the lines before it, as du writes them
			fmt.Fprintf(os.Stderr, "esfs: du: %s\n", a.problem)
			failed = true
			continue
		}
		n, problems, err := b.build(ctx, a.path, a.dirOnly)
		if err != nil {
			out.Flush()
			return explain(err, c.String("es-url"))
		}
		for _, p := range problems {
			out.Flush()
			fmt.Fprintf(os.Stderr, "esfs: du: cannot access %s: %s\n", duQuote(childOf(a.shown, a.path, p.path)), p.what)
			failed = true
		}
		if n != nil {
			w.operand(n, a.shown)
		}
	}
	if o.total {
		w.printTotal()
	}
	if err := out.Flush(); err != nil {
		return err
	}
	if failed {
		return exitCode{1}
	}
	return nil
}

// childOf is path, a path in the filesystem at or below operand root,
// as du shows it: under shown, the operand as given.
func childOf(shown, root, path string) string {
	if path == root {
		return shown
	}
	rel := strings.TrimPrefix(path, root)
	if root == "/" {
		rel = path[1:]
	} else {
		rel = strings.TrimPrefix(rel, "/")
	}
	return childPath(shown, rel)
}

// duQuote quotes a name in a message as GNU does for a simple one ('x').
func duQuote(s string) string {
	if !strings.ContainsAny(s, "'\n\t\\") {
		return "'" + s + "'"
	}
	return strconv.Quote(s)
}
