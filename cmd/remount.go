package cmd

// `mount -o remount,...` of an esfs mount. mount(8) runs the helper for
// it (mount.fuse.esfs, or mount.fuse3 and then esfs) with the mount's
// source and mount point, and with options that are the mount's own —
// its fstab line, or the mount table's when it has none — merged with
// those typed.
//
// What a remount can change is the kernel's: read-only or read-write,
// and the mount's flags (nosuid, nodev, noexec, the atime ones), through
// mount(2) with MS_REMOUNT, as for any FUSE filesystem; the kernel then
// refuses writes with EROFS before they reach the daemon, whose pending
// writes still land. The daemon's settings (lease, caches, delegations,
// es_url, ...) are fixed for its life: an option that would change one
// is refused, naming it, and nothing changes; one equal to what the
// daemon runs with (an fstab line's, as mount(8) passes them again) is
// no change. The daemon tells its settings in its root's esfs.mount
// attribute (aboutMount), so a remount needs no cluster. A mount started
// read-only cannot start writing live: rw is refused for it.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/esfs/esfs/fs"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// remountRequest is a helper call with -o remount.
type remountRequest struct {
	source, dir string
	opts        []string
	sloppy      bool // mount -s: options esfs does not know are ignored
}

// mountAbout is what a mount says of itself in its root's esfs.mount
// attribute (fs.AboutXattr): its pid, where it logs, and each of its
// flags' values as it runs them (after -o, the environment and defaults;
// es-url without credentials), as flagValue writes them.
type mountAbout struct {
	Pid   int               `json:"pid"`
	Log   string            `json:"log"`
	Flags map[string]string `json:"flags"`
}

// aboutMount is the esfs.mount attribute of the mount c runs.
func aboutMount(c *cli.Context) []byte {
	a := mountAbout{Pid: os.Getpid(), Log: logPlace(), Flags: map[string]string{}}
	for _, f := range c.Command.Flags {
		name := f.Names()[0]
		if name == "o" || name == "daemon" || name == "help" {
			continue // taken apart into the others; not the daemon's
		}
		v := fmt.Sprint(c.Value(name))
		if name == "es-url" {
			v = withoutCredentials(v)
		}
		a.Flags[name] = v
	}
	b, err := json.Marshal(a)
	if err != nil {
		panic(err) // strings and an int
	}
	return b
}

// withoutCredentials drops user:password@ from each of a comma-separated
// list of URLs: the attribute is readable by anyone who may list the
// mount's root.
func withoutCredentials(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// aboutTimeout bounds the read of a mount's esfs.mount attribute: a hung
// daemon must not hang mount(8).
const aboutTimeout = 10 * time.Second

// readAbout reads what the daemon serving mp says of itself.
func readAbout(mp string) (mountAbout, error) {
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		buf := make([]byte, 64<<10)
		n, err := unix.Getxattr(mp, fs.AboutXattr, buf)
		if err != nil {
			done <- result{err: err}
			return
		}
		done <- result{b: buf[:n]}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(aboutTimeout):
		return mountAbout{}, fmt.Errorf("remount of %s: its daemon does not answer (in %s): it is hung; esfs umount --lazy %s, and mount it again", mp, aboutTimeout, mp)
	}
	var a mountAbout
	switch {
	case errors.Is(r.err, syscall.ENOTCONN):
		return a, fmt.Errorf("remount of %s: its daemon is gone (the mount is left without it): esfs umount %s, and mount it again", mp, mp)
	case errors.Is(r.err, syscall.ENODATA), errors.Is(r.err, syscall.EOPNOTSUPP):
		return a, fmt.Errorf("remount of %s: the esfs serving it is older and does not say its settings, so a remount cannot tell what it would change: unmount it and mount it again", mp)
	case r.err != nil:
		return a, fmt.Errorf("remount of %s: reading its settings (attribute %s): %w", mp, fs.AboutXattr, r.err)
	}
	if err := json.Unmarshal(r.b, &a); err != nil || a.Flags == nil {
		return a, fmt.Errorf("remount of %s: its settings (attribute %s) do not read: %q", mp, fs.AboutXattr, r.b)
	}
	return a, nil
}

// msAtime are the mount(2) flags of which at most one is set.
const msAtime = unix.MS_NOATIME | unix.MS_RELATIME | unix.MS_STRICTATIME

// vfsOptions are mount(8)'s options that are mount(2) flags: each sets
// some flags and clears others.
var vfsOptions = map[string]struct{ set, clear uintptr }{
	"ro": {unix.MS_RDONLY, 0}, "rw": {0, unix.MS_RDONLY},
	"nosuid": {unix.MS_NOSUID, 0}, "suid": {0, unix.MS_NOSUID},
	"nodev": {unix.MS_NODEV, 0}, "dev": {0, unix.MS_NODEV},
	"noexec": {unix.MS_NOEXEC, 0}, "exec": {0, unix.MS_NOEXEC},
	"sync": {unix.MS_SYNCHRONOUS, 0}, "async": {0, unix.MS_SYNCHRONOUS},
	"dirsync":  {unix.MS_DIRSYNC, 0},
	"lazytime": {unix.MS_LAZYTIME, 0}, "nolazytime": {0, unix.MS_LAZYTIME},
	"silent": {unix.MS_SILENT, 0}, "loud": {0, unix.MS_SILENT},
	"nodiratime": {unix.MS_NODIRATIME, 0}, "diratime": {0, unix.MS_NODIRATIME},
	"noatime":       {unix.MS_NOATIME, msAtime &^ unix.MS_NOATIME},
	"atime":         {0, unix.MS_NOATIME},
	"relatime":      {unix.MS_RELATIME, msAtime &^ unix.MS_RELATIME},
	"norelatime":    {0, unix.MS_RELATIME},
	"strictatime":   {unix.MS_STRICTATIME, msAtime &^ unix.MS_STRICTATIME},
	"nostrictatime": {0, unix.MS_STRICTATIME},
}

// currentFlags are the mount(2) flags of the mount m as it is, from
// which a remount changes what its options name. The mount table shows
// strictatime as neither relatime nor noatime.
func currentFlags(m mounted) uintptr {
	var flags uintptr
	for _, o := range strings.Split(m.mountOpts+","+m.superOpts, ",") {
		if f, ok := vfsOptions[o]; ok {
			flags |= f.set
		}
	}
	if flags&msAtime == 0 {
		flags |= unix.MS_STRICTATIME
	}
	return flags
}

// fuseOptions are the kernel's options of a FUSE mount, which the mount
// table shows and mount(8) passes back on a remount: set once, when
// mounting. allow_other is also an esfs flag, compared as one.
var fuseOptions = map[string]bool{"user_id": true, "group_id": true, "default_permissions": true,
	"max_read": true, "blksize": true, "rootmode": true, "fd": true}

// run remounts: it checks that the directory is an esfs mount of the
// source and that nothing asked would change the daemon's settings, then
// changes the kernel's flags.
func (r remountRequest) run() error {
	mp, err := filepath.Abs(r.dir)
	if err != nil {
		return err
	}
	m, ok, err := mountEntry(mp)
	switch {
	case err != nil:
		return err
	case !ok:
		return fmt.Errorf("remount of %s: it is not a mount point: nothing is mounted there to remount (mount it without remount)", mp)
	case m.fstype != esfsType:
		return fmt.Errorf("remount of %s: it is a %s mount (source %s), not esfs", mp, m.fstype, m.source)
	}
	if src := "esfs:" + trimSourcePrefix(r.source); r.source != m.source && src != m.source {
		return fmt.Errorf("remount of %s: %s is mounted there, not %s", mp, m.source, src)
	}
	about, err := readAbout(mp)
	if err != nil {
		return err
	}
	flags := currentFlags(m)
	readOnly := about.Flags["read-only"] == "true"
	var changes []string
	superOpts := map[string]string{}
	for _, o := range strings.Split(m.superOpts, ",") {
		name, value, _ := strings.Cut(o, "=")
		superOpts[name] = value
	}
	known := mountFlagNames()
	for _, o := range r.opts {
		name, value, _ := strings.Cut(o, "=")
		if f, ok := vfsOptions[name]; ok {
			flags = flags&^f.clear | f.set
			continue
		}
		switch {
		case name == "remount", name == "nonempty": // nonempty: for mounting only
			continue
		case fuseOptions[name]:
			if have, ok := superOpts[name]; !ok || have != value {
				changes = append(changes, fmt.Sprintf("%s (the mount has %s)", o, fuseOptionText(name, have, ok)))
			}
			continue
		}
		flag, err := mountOptionFlag(o, known)
		var notOurs notAnOption
		switch {
		case r.sloppy && errors.As(err, &notOurs):
			continue
		case err != nil:
			return err
		case flag == "":
			continue // mount(8)'s own (_netdev, x-systemd.*, ...)
		}
		fname, want, err := flagValue(flag)
		if err != nil {
			return err
		}
		if fname == "read-only" { // read_only, as ro
			if want == "true" {
				flags |= unix.MS_RDONLY
			} else {
				flags &^= unix.MS_RDONLY
			}
			continue
		}
		if have := about.Flags[fname]; have != want {
			changes = append(changes, fmt.Sprintf("%s (it runs with %s)", o, orNone(have)))
		}
	}
	if len(changes) > 0 {
		return fmt.Errorf("remount of %s: esfs cannot change these on a live mount: %s; unmount it and mount it again to change them",
			mp, strings.Join(changes, ", "))
	}
	if readOnly && flags&unix.MS_RDONLY == 0 {
		return fmt.Errorf("remount of %s read-write: it was mounted read-only (ro), and its daemon cannot start writing live: unmount it and mount it again without ro", mp)
	}
	err = unix.Mount("", mp, "", flags|unix.MS_REMOUNT, "")
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.EPERM):
		return fmt.Errorf("remount of %s: not permitted: changing a mount's flags needs root (CAP_SYS_ADMIN)", mp)
	case errors.Is(err, syscall.EBUSY) && flags&unix.MS_RDONLY != 0:
		return fmt.Errorf("remount of %s read-only: files are open for writing there, and the kernel refuses while they are (device or resource busy)", mp)
	}
	return fmt.Errorf("remount of %s: %w", mp, err)
}

// trimSourcePrefix is a helper's source without esfs: or esfs#.
func trimSourcePrefix(source string) string {
	for _, p := range []string{"esfs:", "esfs#"} {
		source = strings.TrimPrefix(source, p)
	}
	return source
}

func fuseOptionText(name, value string, set bool) string {
	switch {
	case !set:
		return "no " + name
	case value == "":
		return name
	}
	return name + "=" + value
}

func orNone(v string) string {
	if v == "" {
		return "none"
	}
	return v
}

// flagValue is the `esfs mount` flag an option stands for ("--lease=2s",
// from mountOptionFlag) and its value as aboutMount writes a running
// mount's (time.Duration, int, bool or string, printed by fmt).
func flagValue(flag string) (name, value string, err error) {
	name, value, hasValue := strings.Cut(strings.TrimPrefix(flag, "--"), "=")
	f := findFlag(cmdMount().Flags, name)
	if f == nil {
		return "", "", usagef("mount option %q is not an esfs option", name)
	}
	option := "-o " + strings.ReplaceAll(name, "-", "_")
	name = f.Names()[0]
	switch f.(type) {
	case *cli.BoolFlag:
		if !hasValue {
			return name, "true", nil
		}
		b, err := strconv.ParseBool(value)
		if err != nil {
			return "", "", usageError{badValue(f, option, value, err.Error())}
		}
		return name, strconv.FormatBool(b), nil
	case *cli.DurationFlag:
		d, err := time.ParseDuration(value)
		if err != nil {
			return "", "", usageError{badValue(f, option, value, err.Error())}
		}
		return name, d.String(), nil
	case *cli.IntFlag:
		n, err := strconv.Atoi(value)
		if err != nil {
			return "", "", usageError{badValue(f, option, value, err.Error())}
		}
		return name, strconv.Itoa(n), nil
	}
	if name == "es-url" {
		value = withoutCredentials(value)
	}
	return name, value, nil
}
