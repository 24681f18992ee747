package cmd

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

// Mounting the way the system mounts. mount(8) runs a helper for
// `mount -t fuse.esfs SOURCE DIR -o OPTS` and for fstab lines of type
// fuse.esfs:
//
//   - /sbin/mount.fuse.esfs SOURCE DIR [-sfnv] [-o OPTS], when that
//     helper exists (a symlink to esfs: we recognise the name);
//   - otherwise fuse3's mount.fuse3, which runs `esfs SOURCE DIR -o OPTS`
//     (the "mount.fuse3 convention": the subtype names the program).
//
// Both end up as `esfs mount --daemon`: a helper must return once the
// filesystem is mounted, with an exit status that says whether it is, and
// say nothing on success, as mount(8) does. mount(8) runs the helper for
// `mount -o remount,...` of a mounted esfs too (see remount.go).

// helperNames are the names under which esfs acts as a mount helper.
var helperNames = map[string]bool{"mount.fuse.esfs": true, "mount.esfs": true}

// genericOptions are mount(8)'s and systemd's own options: they are for
// mount, fstab and systemd (ordering, automounting, who may mount), not
// for the filesystem, and are accepted and ignored. esfs does not update
// atimes, runs no executables itself and has no devices, so the atime,
// exec, suid and dev families change nothing either.
var genericOptions = map[string]bool{
	"defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true, "users": true,
	"owner": true, "group": true, "_netdev": true, "nofail": true, "rw": true, "async": true,
	"exec": true, "noexec": true, "suid": true, "nosuid": true, "dev": true, "nodev": true,
	"atime": true, "noatime": true, "relatime": true, "norelatime": true, "strictatime": true,
	"nodiratime": true, "diratime": true, "lazytime": true, "nolazytime": true, "silent": true, "loud": true,
}

// mountOptionFlags maps -o names to `esfs mount` flags where they differ
// from the flag's own name (with '_' or '-').
var mountOptionFlags = map[string]string{
	"ro":          "read-only",
	"allow_other": "allow-other",
	"url":         "es-url",
}

// helperCall is what a mount helper call asks for: the `esfs mount
// --daemon ...` command line it stands for, or a remount; neither for
// mount -f (a fake mount: nothing to do).
type helperCall struct {
	args    []string
	remount *remountRequest
}

// helperArgs reports whether args (as os.Args) are a mount helper call, and
// if so returns what it asks for.
func helperArgs(args []string) (helperCall, bool, error) {
	if len(args) == 0 {
		return helperCall{}, false, nil
	}
	asHelper := helperNames[filepath.Base(args[0])]
	if !asHelper {
		// mount.fuse3 convention: esfs SOURCE DIR -o OPTS (mount(8)
		// always passes options, rw at least). Only taken when the first
		// word is no command, the second a directory and -o follows, so
		// that a mistyped command still gets "unknown command".
		if len(args) < 5 || strings.HasPrefix(args[1], "-") || isCommand(args[1]) || !hasOptions(args[3:]) {
			return helperCall{}, false, nil
		}
		if st, err := os.Stat(args[2]); err != nil || !st.IsDir() {
			return helperCall{}, false, nil
		}
	}
	var pos []string
	var opts []string
	sloppy := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help":
			return helperCall{args: []string{args[0], "help", "mount"}}, true, nil
		case a == "-o":
			if i+1 >= len(args) {
				return helperCall{}, true, usagef("mount helper: -o needs a value")
			}
			opts = append(opts, strings.Split(args[i+1], ",")...)
			i++
		case strings.HasPrefix(a, "-o"):
			opts = append(opts, strings.Split(a[2:], ",")...)
		case a == "-t":
			i++ // the type, fuse.esfs: it is why we were called
		case strings.HasPrefix(a, "-") && len(a) > 1:
			// mount(8) passes -s (sloppy: ignore unknown options), -f
			// (fake), -n (no mtab), -v (verbose).
			for _, ch := range a[1:] {
				switch ch {
				case 's':
					sloppy = true
				case 'f':
					return helperCall{}, true, nil // fake: do everything but mount
				case 'n', 'v':
				default:
					return helperCall{}, true, usagef("mount helper: unknown flag -%c", ch)
				}
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return helperCall{}, true, usagef("mount helper: want SOURCE MOUNTPOINT [-o OPTIONS], got %d arguments", len(pos))
	}
	for _, o := range opts {
		if o == "remount" {
			return helperCall{remount: &remountRequest{source: pos[0], dir: pos[1], opts: opts, sloppy: sloppy}}, true, nil
		}
	}
	index := pos[0]
	for _, p := range []string{"esfs:", "esfs#"} {
		index = strings.TrimPrefix(index, p)
	}
	out := []string{args[0], "mount", "--daemon", "--index", index}
	// esfs:INDEX:/DIR, as the mount table shows a --subdir mount (index
	// names have no ':'), mounts that subdirectory.
	if name, dir, ok := strings.Cut(index, ":"); ok {
		for _, o := range opts {
			if strings.HasPrefix(o, "subdir=") {
				return helperCall{}, true, usagef("mount helper: the source %s names subdirectory %s, and -o %s another: give one", pos[0], dir, o)
			}
		}
		out = []string{args[0], "mount", "--daemon", "--index", name, "--subdir=" + dir}
	}
	known := mountFlagNames()
	for _, o := range opts {
		flag, err := mountOptionFlag(o, known)
		var notOurs notAnOption
		switch {
		case sloppy && errors.As(err, &notOurs):
		case err != nil:
			return helperCall{}, true, err
		case flag != "":
			out = append(out, flag)
		}
	}
	return helperCall{args: append(out, pos[1])}, true, nil
}

// notAnOption is an -o option that no flag of `esfs mount` takes (which
// mount -s, sloppy, ignores).
type notAnOption struct{ error }

func (n notAnOption) Unwrap() error { return n.error }

// mountOptionFlag turns one -o option into the `esfs mount` flag it
// stands for ("lease=20s" is "--lease=20s"), or "" for one of mount(8)'s
// own. known is mountFlagNames().
func mountOptionFlag(o string, known map[string]string) (string, error) {
	name, value, hasValue := strings.Cut(o, "=")
	if name == "" || genericOptions[name] || strings.HasPrefix(name, "x-") || name == "comment" {
		return "", nil
	}
	if name == "remount" { // the helper takes it before (remount.go)
		return "", usagef("mount option \"remount\" changes a live mount: mount -o remount,ro (or rw) MOUNTPOINT, through mount(8) and esfs's helper")
	}
	flag, ok := mountOptionFlags[name]
	if !ok {
		flag = strings.ReplaceAll(name, "_", "-")
	}
	kind, ok := known[flag]
	switch {
	case !ok || flag == "daemon":
		var options []string
		for n := range known {
			if n != "daemon" {
				options = append(options, strings.ReplaceAll(n, "-", "_"))
			}
		}
		for o, f := range mountOptionFlags {
			if _, ok := known[f]; ok {
				options = append(options, o)
			}
		}
		sort.Strings(options) // the same suggestion for the same typo
		return "", notAnOption{usagef("mount option %q is not an esfs option%s (see esfs mount --help; '_' and '-' are alike)",
			name, didYouMean(strings.ReplaceAll(name, "-", "_"), options, false))}
	case kind == "bool" && hasValue && value != "true" && value != "false":
		// true and false are allowed, for a switch that is on by
		// default (delegations=false).
		return "", usagef("mount option %q takes no value, or true or false", name)
	case kind != "bool" && !hasValue:
		return "", usagef("mount option %q needs a value (%s=...)", name, name)
	case kind == "bool" && !hasValue:
		return "--" + flag, nil
	}
	return "--" + flag + "=" + value, nil
}

// withMountOptions gives `esfs mount` mount(8)'s -o: the options of a
// helper call or an fstab line, on the command line.
func withMountOptions(mount *cli.Command) *cli.Command {
	mount.Flags = append(mount.Flags, &cli.StringSliceFlag{Name: "o",
		Usage: "mount options, as mount(8) and fstab take them: -o ro,allow_other,lease=20s (any flag above, with '_' or '-'; " +
			"mount's own, such as noatime or _netdev, are ignored); -o options win over flags"})
	before := mount.Before
	mount.Before = func(c *cli.Context) error {
		known := mountFlagNames()
		for _, o := range c.StringSlice("o") {
			flag, err := mountOptionFlag(o, known)
			if err != nil || flag == "" {
				return err
			}
			name, value, hasValue := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
			if !hasValue {
				value = "true"
			}
			if err := c.Set(name, value); err != nil {
				option, _, _ := strings.Cut(o, "=")
				return usageError{badValue(findFlag(c.Command.Flags, name), "-o "+option, value, err.Error())}
			}
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
	return mount
}

// mountFlagNames lists `esfs mount`'s flags with "bool" or "value".
func mountFlagNames() map[string]string {
	out := map[string]string{}
	for _, f := range cmdMount().Flags {
		kind := "value"
		if _, ok := f.(*cli.BoolFlag); ok {
			kind = "bool"
		}
		for _, n := range f.Names() {
			out[n] = kind
		}
	}
	return out
}

func isCommand(name string) bool {
	for _, c := range commands() {
		if c.Name == name || c.HasName(name) {
			return true
		}
	}
	return name == "help" || name == "h"
}

func hasOptions(args []string) bool {
	for _, a := range args {
		if strings.HasPrefix(a, "-o") {
			return true
		}
	}
	return false
}
