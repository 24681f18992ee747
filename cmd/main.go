// Package cmd is esfs's command line: it parses flags and environment, builds
// the store, and runs one command. It holds no package-level mutable state.
package cmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// Version, when set at build time with -ldflags
// "-X github.com/esfs/esfs/cmd.Version=...", names this esfs instead of its
// module version (see build).
var Version string

// invocation is the command line being run (after a mount helper call was
// turned into `esfs mount --daemon ...`), for re-executing in the background.
var invocation []string

func commands() []*cli.Command {
	return []*cli.Command{
		cmdMkfs(),
		withMountOptions(cmdMount()),
		cmdUmount(),
		cmdFsck(),
		cmdLocks(),
		cmdStatus(),
		cmdSearch(),
		cmdFind(),
		cmdDu(),
		cmdImport(),
		cmdExport(),
		cmdConfig(),
		cmdDestroy(),
		cmdCompletion(),
		cmdMan(),
		cmdHelp(),
		cmdWatchdog(),
	}
}

// Main runs the command line given in args (args[0] is the program name).
// Called as a mount helper (mount.fuse.esfs, or by mount.fuse3), it mounts
// in the background and returns once the filesystem is mounted.
func Main(args []string) error {
	completing := len(args) > 1 && args[len(args)-1] == completionFlag
	helper := false
	if call, ok, err := helperArgs(args); ok && !completing {
		switch {
		case err != nil:
			return err
		case call.remount != nil:
			return call.remount.run()
		case call.args == nil:
			return nil // mount -f, a fake mount
		}
		args, helper = call.args, true
	}
	args = permuteFlags(args)
	if !completing {
		args = helpFlag(args)
	}
	invocation = args
	creds, err := receiveCredentials()
	if err != nil {
		reportReady(err) // to the --daemon parent, which says it
		return err
	}
	app := &cli.App{
		Name:  "esfs",
		Usage: "a POSIX filesystem stored in Elasticsearch",
		Description: `esfs help COMMAND, or esfs COMMAND --help, shows a command's flags.
As mount(8)'s helper (/sbin/mount.fuse.esfs, a symlink to esfs) it mounts
fstab lines and mount -t fuse.esfs in the background, saying nothing once
mounted, and takes mount -o remount: see esfs help mount.`,
		Version:  thisBuild().String(),
		Commands: commands(),
		// One clear line on stderr, from main, never a usage dump on an
		// operational error. A misspelled name gets a suggestion from
		// flagUsageError and unknownCommand, not from App.Suggest: that
		// one is not consulted when OnUsageError is set, and suggests the
		// nearest name however far (frobnicate: did you mean fsck?).
		Metadata:             map[string]any{helperCallKey: helper, credentialsKey: creds},
		HideHelpCommand:      true, // cmdHelp is ours: it refuses an unknown command the same way
		EnableBashCompletion: true, // the completion scripts' --generate-bash-completion
		ExitErrHandler:       func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			if errors.Is(err, flag.ErrHelp) {
				return cli.ShowAppHelp(c) // esfs --help, as esfs help: status 0
			}
			return usageError{fmt.Errorf("%w (see esfs help)", flagUsageError(c.App.Flags, err))}
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return unknownCommand(c, c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
	}
	for _, cmd := range app.Commands {
		cmd.HideHelpCommand = true
		cmd.OnUsageError = func(c *cli.Context, err error, _ bool) error {
			return usageError{fmt.Errorf("%s: %w (see esfs help %s)", cmd.Name, flagUsageError(cmd.Flags, err), cmd.Name)}
		}
	}
	return app.Run(args)
}

// helperCallKey, in the app's Metadata, is true when mount(8) runs us as
// its helper: the mount then says nothing on success.
const helperCallKey = "helper"

// usageError is a mistake on the command line (exit status 2).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// ExitCode maps an error to the process exit status: 2 for usage mistakes,
// 1 for everything else.
func ExitCode(err error) int {
	var u usageError
	if errors.As(err, &u) {
		return 2
	}
	var e exitCode
	if errors.As(err, &e) {
		return e.code
	}
	return 1
}

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// logger builds the process's structured logger: text (logfmt) or JSON
// on stderr, at level debug, info, warn or error.
func logger(level, format string) (*slog.Logger, error) {
	h, err := newHandler(os.Stderr, level, format, nil)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// newHandler is the handler of logger writing to w; replace (may be nil)
// rewrites attributes.
func newHandler(w io.Writer, level, format string, replace func([]string, slog.Attr) slog.Attr) (slog.Handler, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: replace}
	switch format {
	case "text", "":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// quietLogger is for the short admin commands: warnings and errors only
// unless --debug.
func quietLogger(debug bool) *slog.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// oneLine keeps an error message on one line, as a terminal user reads it.
func oneLine(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if !strings.ContainsAny(msg, "\n\r") {
		return err
	}
	return fmt.Errorf("%s", strings.Join(strings.Fields(msg), " "))
}

// permuteFlags moves a command's flags that follow its arguments in front
// of them (esfs search foo --under /x), as GNU tools accept; urfave/cli
// stops at the first argument. "--" ends the flags, as usual.
func permuteFlags(args []string) []string {
	if len(args) < 3 {
		return args
	}
	cmd := findCommand(args[1])
	if cmd == nil || cmd.SkipFlagParsing {
		return args // a command that parses its own: find's expression, du's GNU options
	}
	takesValue := valueFlags(cmd)
	var flags, rest []string
	completing := false
	for i := 2; i < len(args); i++ {
		a := args[i]
		if a == completionFlag && i == len(args)-1 {
			completing = true // stays last, where urfave/cli looks for it
			break
		}
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name := strings.TrimLeft(a, "-")
		if !strings.HasPrefix(a, "-") || a == "-" || name == "" {
			rest = append(rest, a)
			continue
		}
		flags = append(flags, a)
		if n, _, hasValue := strings.Cut(name, "="); !hasValue && takesValue[n] && i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	out := append([]string{args[0], args[1]}, flags...)
	out = append(out, rest...)
	if completing {
		out = append(out, completionFlag)
	}
	return out
}

// helpFlag turns a help flag (-h, --help) into the help command: `esfs
// --help mount` and `esfs mount /mnt --help` are `esfs help mount`, as
// with git and GNU tools, whatever else the line holds. urfave/cli would
// take a command's first argument for a help topic (esfs mount -h /mnt:
// "No help topic for '/mnt'", status 1). args are permuted (permuteFlags):
// a command's flags come before its arguments.
func helpFlag(args []string) []string {
	if len(args) < 2 {
		return args
	}
	if isHelpFlag(args[1]) {
		if len(args) > 2 && findCommand(args[2]) != nil {
			return []string{args[0], "help", args[2]}
		}
		return []string{args[0], "help"}
	}
	cmd := findCommand(args[1])
	if cmd == nil || cmd.SkipFlagParsing {
		return args // its own parser reads --help (esfs du, where -h is GNU du's)
	}
	takesValue := valueFlags(cmd)
	for i := 2; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		if isHelpFlag(a) {
			return []string{args[0], "help", cmd.Name}
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		valued, known := takesValue[name]
		if !known {
			break // a mistake, said before any help, as GNU tools do
		}
		if valued && !hasValue {
			i++ // its value, which may look like a flag
		}
	}
	return args
}

// isHelpFlag reports whether a is -h or --help (-help, --h, =true too, as
// Go's flag package takes a switch).
func isHelpFlag(a string) bool {
	if !strings.HasPrefix(a, "-") {
		return false
	}
	name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
	if name != "h" && name != "help" {
		return false
	}
	on, err := strconv.ParseBool(value)
	return !hasValue || err == nil && on
}

func findCommand(name string) *cli.Command {
	for _, c := range commands() {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// valueFlags says, for each name of cmd's flags, whether it takes a value.
func valueFlags(cmd *cli.Command) map[string]bool {
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		_, isBool := f.(*cli.BoolFlag)
		for _, n := range f.Names() {
			takesValue[n] = !isBool
		}
	}
	return takesValue
}
