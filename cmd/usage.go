package cmd

// Mistakes on the command line: each one gets one line on stderr that
// says what to type instead (exit status 2), with a suggestion when a
// command or flag name is misspelled.

import (
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/hbollon/go-edlib"
	"github.com/urfave/cli/v2"
	"github.com/xrash/smetrics"
)

// closest is the name in names most like typed, or "" if none is close
// enough to be what was meant: at most one edit in three characters
// (mout/mount, atr-timeout/attr-timeout), never a guess (frobnicate). Two
// neighbours swapped, the commonest typo, are one edit (moutn/mount,
// lzay/lazy): the optimal string alignment distance, where Levenshtein's
// counts them two and would let a short name (five letters allow one
// edit) go unrecognised. Ties go to the more similar by urfave/cli's own
// measure, Jaro-Winkler, which alone prefers a shared prefix to a shared
// rest (atr-timeout/entry-timeout); alone it would rank every name, so it
// does not decide whether one is close enough.
func closest(typed string, names []string) string {
	if len(typed) < 3 {
		return "" // x for -d, h or l: a guess
	}
	limit := max(1, len(typed)/3)
	best, bestEdits, bestScore := "", limit+1, 0.0
	for _, n := range names {
		edits := edlib.OSADamerauLevenshteinDistance(typed, n)
		if edits > limit {
			continue // frob is two edits from ro: no guess
		}
		score := smetrics.JaroWinkler(typed, n, 0.7, 4)
		if edits < bestEdits || edits == bestEdits && score > bestScore {
			best, bestEdits, bestScore = n, edits, score
		}
	}
	return best
}

// didYouMean is ": did you mean X?" for the closest of names, or "".
func didYouMean(typed string, names []string, dashes bool) string {
	n := closest(typed, names)
	if n == "" {
		return ""
	}
	if dashes {
		n = dashed(n)
	}
	return fmt.Sprintf(": did you mean %s?", n)
}

// dashed is a flag name as typed: -d, --daemon.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

func commandNames(cmds []*cli.Command) []string {
	var names []string
	for _, c := range cmds {
		if !c.Hidden {
			names = append(names, c.Names()...)
		}
	}
	return names
}

func flagNames(flags []cli.Flag) []string {
	names := []string{"help"}
	for _, f := range flags {
		names = append(names, f.Names()...)
	}
	return names
}

func findFlag(flags []cli.Flag, name string) cli.Flag {
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// The errors of Go's flag package and of urfave/cli's reading of
// environment variables, which are what a user mistyped.
var (
	undefinedFlagRE = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	invalidValueRE  = regexp.MustCompile(`^invalid (?:boolean )?value "(.*)" for (?:flag )?-+([^:]+): (.*)$`)
	needsValueRE    = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
	envValueRE      = regexp.MustCompile(`^could not parse "(.*)" as \w+ value from (?:env var|environment variable) "?(\w+)"? for flag ([\w-]+): (.*)$`)
)

// flagUsageError rewrites an error of parsing a command's flags into one
// line that says what to type; others pass unchanged.
func flagUsageError(flags []cli.Flag, err error) error {
	msg := err.Error()
	if m := undefinedFlagRE.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("unknown flag %s%s", dashed(m[1]), didYouMean(m[1], flagNames(flags), true))
	}
	if m := needsValueRE.FindStringSubmatch(msg); m != nil {
		return fmt.Errorf("%s needs a value", dashed(m[1]))
	}
	if m := invalidValueRE.FindStringSubmatch(msg); m != nil {
		return badValue(findFlag(flags, m[2]), dashed(m[2]), m[1], m[3])
	}
	if m := envValueRE.FindStringSubmatch(msg); m != nil {
		return badValue(findFlag(flags, m[3]), m[2]+" (for "+dashed(m[3])+")", m[1], m[4])
	}
	return err
}

// badValue says what a flag (named as given: --lease, or ESFS_LEASE (for
// --lease)) takes, given value.
func badValue(f cli.Flag, given, value, cause string) error {
	switch f.(type) {
	case *cli.DurationFlag:
		if _, err := strconv.ParseFloat(value, 64); err == nil {
			return fmt.Errorf("%s %s: a duration needs a unit: %ss (or ms, m, h)", given, value, value)
		}
		return fmt.Errorf("%s %q is not a duration: give one such as 5s, 500ms or 2m", given, value)
	case *cli.IntFlag, *cli.Int64Flag, *cli.UintFlag, *cli.Uint64Flag:
		return fmt.Errorf("%s %q is not a whole number", given, value)
	case *cli.BoolFlag:
		return fmt.Errorf("%s %q: a switch takes true or false, or no value", given, value)
	}
	return fmt.Errorf("%s %q: %s", given, value, cause)
}

// flagSource names where flag's value came from, for a message about
// it: "--es-password-file", or "ESFS_ES_PASSWORD_FILE (--es-password-file)"
// when the environment gave it (a flag on the command line wins over the
// environment, so a value equal to the variable's is the variable's).
func flagSource(c *cli.Context, name string) string {
	if f, ok := findFlag(c.Command.Flags, name).(interface{ GetEnvVars() []string }); ok {
		for _, env := range f.GetEnvVars() {
			if v, set := os.LookupEnv(env); set && v == c.String(name) {
				return env + " (" + dashed(name) + ")"
			}
		}
	}
	return dashed(name)
}

// checkLease checks the --lease of a mount or of an admin command's
// session.
func checkLease(c *cli.Context) error {
	if l := c.Duration("lease"); l < 500*time.Millisecond {
		return usagef("%s %s: a lease must be at least 500ms, such as 10s (the default)", flagSource(c, "lease"), l)
	}
	return nil
}

// checkMountFlags catches the mount flags' mistakes that runMount's own
// checks do not, before anything is started.
func checkMountFlags(c *cli.Context) error {
	if err := checkLease(c); err != nil {
		return err
	}
	if t := c.Duration("lock-timeout"); t <= 0 {
		return usagef("%s %s: must be positive, such as 30s (the default)", flagSource(c, "lock-timeout"), t)
	}
	if c.Bool("pprof") && c.String("metrics-addr") == "" {
		return usagef("%s needs --metrics-addr: the profiles are served there", flagSource(c, "pprof"))
	}
	return checkListenAddr(c, "metrics-addr")
}

// checkSearchMount refuses a --mount that is not where the filesystem
// named by index is mounted: the paths printed would name other files.
func checkSearchMount(dir, index string) (subdir string, err error) {
	m, ok, err := mountEntry(dir)
	switch {
	case err != nil:
		return "", err
	case !ok:
		if st, err := os.Stat(dir); err != nil {
			return "", usagef("--mount %s: %v", dir, errors.Unwrap(err))
		} else if !st.IsDir() {
			return "", usagef("--mount %s is not a directory: give where filesystem %s is mounted", dir, index)
		}
		return "", usagef("--mount %s is not a mount point: give where filesystem %s is mounted", dir, index)
	case m.fstype != esfsType:
		return "", usagef("--mount %s is a %s mount (source %s), not esfs: give where filesystem %s is mounted", dir, m.fstype, m.source, index)
	}
	subdir, ok = subdirOfSource(m.source, index)
	if !ok {
		// The source is esfs:INDEX, or esfs:INDEX:/DIR for a subdirectory.
		other, _, _ := strings.Cut(strings.TrimPrefix(m.source, "esfs:"), ":")
		return "", usagef("--mount %s is where filesystem %s is mounted, not %s (--index %s, or --mount where %s is mounted)",
			dir, other, index, other, index)
	}
	return subdir, nil
}

// checkListenAddr checks a host:port flag before anything is started,
// so that a bare port number gets the fix rather than Go's "missing port".
func checkListenAddr(c *cli.Context, name string) error {
	addr := c.String(name)
	if addr == "" {
		return nil
	}
	if _, err := strconv.ParseUint(addr, 10, 16); err == nil {
		return usagef("%s %s: give host:port, such as :%s (all interfaces) or 127.0.0.1:%s", flagSource(c, name), addr, addr, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var aerr *net.AddrError
		if errors.As(err, &aerr) {
			err = errors.New(aerr.Err)
		}
		return usagef("%s %q: %v: give host:port, such as :9567 or 127.0.0.1:9567", flagSource(c, name), addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		if _, lerr := net.LookupPort("tcp", port); lerr != nil {
			return usagef("%s %q: port %q is not a number: give host:port, such as %s:9567", flagSource(c, name), addr, port, host)
		}
	}
	return nil
}

// unknownCommand is the error for a first argument that is no command.
func unknownCommand(c *cli.Context, name string) error {
	return usagef("unknown command %s%s (see esfs help)", name, didYouMean(name, commandNames(c.App.Commands), false))
}

// cmdHelp is `esfs help [COMMAND]`: the same text as --help.
func cmdHelp() *cli.Command {
	return &cli.Command{
		Name:      "help",
		Aliases:   []string{"h"},
		Usage:     "show the commands, or one command's flags",
		ArgsUsage: "[COMMAND]",
		BashComplete: func(c *cli.Context) {
			for _, n := range commandNames(c.App.Commands) {
				fmt.Fprintln(c.App.Writer, n)
			}
		},
		Action: func(c *cli.Context) error {
			switch {
			case c.NArg() == 0:
				return cli.ShowAppHelp(c)
			case c.NArg() > 1:
				return usagef("help takes one COMMAND")
			}
			name := c.Args().First()
			if c.App.Command(name) == nil {
				return unknownCommand(c, name)
			}
			return cli.ShowCommandHelp(c, name)
		},
	}
}

// cmdCompletion prints a completion script. bash and zsh ask the program
// for the words (urfave/cli's --generate-bash-completion); fish's script
// lists them, generated from the commands' definitions.
func cmdCompletion() *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script: source <(esfs completion bash)",
		ArgsUsage: "bash|zsh|fish",
		Description: `bash:  source <(esfs completion bash)   in ~/.bashrc, or
       esfs completion bash > /etc/bash_completion.d/esfs
zsh:   source <(esfs completion zsh)    in ~/.zshrc, after compinit
fish:  esfs completion fish > ~/.config/fish/completions/esfs.fish`,
		BashComplete: func(c *cli.Context) { fmt.Fprintln(c.App.Writer, "bash\nzsh\nfish") },
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("completion needs one argument: bash, zsh or fish")
			}
			var script string
			switch shell := c.Args().First(); shell {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return err
				}
				script = s
			default:
				return usagef("completion %s: want bash, zsh or fish", shell)
			}
			_, err := fmt.Fprint(c.App.Writer, script)
			return err
		},
	}
}

// cmdMan prints the manual page, in roff, from the commands' definitions.
func cmdMan() *cli.Command {
	return &cli.Command{
		Name:  "man",
		Usage: "print the manual page (roff): esfs man | man -l -",
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("man takes no arguments")
			}
			page, err := c.App.ToManWithSection(1)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(c.App.Writer, page)
			return err
		},
	}
}

// completionFlag is the argument, last on the line, with which the
// completion scripts ask for the words that may come next.
const completionFlag = "--generate-bash-completion"

// bashCompletion is urfave/cli's autocomplete/bash_autocomplete made for
// esfs: it runs the line typed so far (never through eval) and needs
// nothing of the bash-completion package.
const bashCompletion = `# bash completion for esfs: source <(esfs completion bash)
_esfs_complete() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  local words=("${COMP_WORDS[@]:0:COMP_CWORD}")
  local opts
  if [[ $cur == -* ]]; then
    opts=$("${words[@]}" "$cur" ` + completionFlag + ` 2>/dev/null)
  else
    opts=$("${words[@]}" ` + completionFlag + ` 2>/dev/null)
  fi
  local IFS=$'\n'
  COMPREPLY=($(compgen -W "$opts" -- "$cur"))
}
complete -o bashdefault -o default -F _esfs_complete esfs
`

// zshCompletion is urfave/cli's autocomplete/zsh_autocomplete made for
// esfs; it needs compinit (compdef) loaded first.
const zshCompletion = `#compdef esfs
# zsh completion for esfs: source <(esfs completion zsh), after compinit
_esfs() {
  local -a opts
  local cur=${words[-1]}
  if [[ "$cur" == -* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} ` + completionFlag + ` 2>/dev/null)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ` + completionFlag + ` 2>/dev/null)}")
  fi
  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}
compdef _esfs esfs
`
