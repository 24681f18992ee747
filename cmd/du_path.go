package cmd

// A PATH operand of esfs du: a path in the filesystem, or a path on this
// machine under a mount point of it (found in the mount table), printed
// as given either way.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// duArg is one PATH operand.
type duArg struct {
	shown string // as du prints it: as given, trailing slashes as fts keeps them
	path  string // the path in the filesystem
	// dirOnly: the operand ends with a slash, and names a directory or
	// nothing (a symbolic link to one was followed, as the kernel does).
	dirOnly bool
	// problem, if not "", is why the operand names nothing (du says so
	// and goes on with the others, exiting 1).
	problem string
}

// ftsShown is an operand as fts keeps it: two or more trailing slashes
// trimmed to one (gnulib fts_open).
func ftsShown(p string) string {
	n := len(p)
	if 2 < n && p[n-1] == '/' {
		for 1 < n && p[n-2] == '/' {
			n--
		}
	}
	return p[:n]
}

// resolveDuArg finds the path in filesystem index that operand p names.
// Under a mount point of the filesystem (esfs mount, or --subdir), it is
// the mounted directory's path plus the rest; an absolute path that is
// under no mount of it is a path in the filesystem itself. A relative p
// is taken from the working directory, and must then be under a mount.
// An error is a usage mistake that stops the command; an operand that
// names nothing gets a problem instead.
func resolveDuArg(p, index string, mounts []mountLine) (duArg, error) {
	a := duArg{shown: ftsShown(p)}
	if p == "" {
		a.problem = "invalid zero-length file name"
		return a, nil
	}
	abs := p
	if !filepath.IsAbs(p) {
		wd, err := os.Getwd()
		if err != nil {
			return a, err
		}
		abs = filepath.Join(wd, p)
	}
	abs = filepath.Clean(abs)
	// Where abs is for the kernel: symbolic links on the way followed
	// (the mount point reached through one, or a link in the filesystem
	// itself), and the last one too if a slash ends the operand.
	real := abs
	if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		real = filepath.Join(dir, filepath.Base(abs))
	}
	a.dirOnly = strings.HasSuffix(p, "/")
	if a.dirOnly {
		if target, err := filepath.EvalSymlinks(real); err == nil {
			real = target
		}
	}
	path, ok, err := mountedPath(real, index, mounts)
	if err != nil {
		return a, err
	}
	if !ok && real != abs {
		if _, ok, _ = mountedPath(abs, index, mounts); ok {
			a.problem = fmt.Sprintf("cannot access %s: it leads out of filesystem %s (to %s)", duQuote(a.shown), index, real)
			return a, nil
		}
	}
	switch {
	case ok:
		a.path = path
	case filepath.IsAbs(p):
		a.path = abs
	default:
		return a, usagef("%s is not under a mount of filesystem %s: give a path in the filesystem (/dir), or one under where it is mounted", p, index)
	}
	return a, nil
}
