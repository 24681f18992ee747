package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

func cmdDestroy() *cli.Command {
	return &cli.Command{
		Name:      "destroy",
		Usage:     "delete a filesystem and everything in it, once no mount of it is live",
		ArgsUsage: " ",
		Flags: append(esFlags(),
			&cli.BoolFlag{Name: "yes", Usage: "do not ask to type the filesystem's name (needed without a terminal)"},
			&cli.BoolFlag{Name: "no-wait", Usage: "refuse at once if a mount is neither declared dead nor gone, instead of watching it for its lease"},
			&cli.BoolFlag{Name: "debug", EnvVars: []string{"ESFS_DEBUG"}, Usage: "verbose log"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("destroy takes no arguments (the filesystem is named by --index)")
			}
			log := quietLogger(c.Bool("debug"))
			st, err := openStore(c.Context, c, log, false, nil)
			if err != nil {
				return err
			}
			defer st.Close()
			return destroy(c, st)
		},
	}
}

func destroy(c *cli.Context, st *store.Store) error {
	ctx, url, name := c.Context, c.String("es-url"), st.Prefix()
	infos, err := st.Admin().Inspect(ctx)
	if err != nil {
		return explain(err, url)
	}
	var existing []string
	var sessions bool
	for _, i := range infos {
		if i.Exists {
			existing = append(existing, i.Name)
			sessions = sessions || i.Role == "session"
		}
		if i.Exists && !i.Foreign && i.Format > store.FormatVersion {
			// It may keep more than these indices, or mounts elsewhere.
			return fmt.Errorf("filesystem %s was made by a newer esfs (format %d; this esfs reads format %d): destroy it with that esfs, or upgrade this one", name, i.Format, store.FormatVersion)
		}
	}
	if len(existing) == 0 {
		return fmt.Errorf("filesystem %s does not exist: nothing to destroy", name)
	}
	if err := st.Admin().Check(infos); errors.Is(err, store.ErrMapping) {
		return explain(err, url) // an index esfs did not make: never touched
	}
	if !c.Bool("yes") && !isTerminal(os.Stdin) {
		// Said before watching the mounts, which can take a lease.
		return usagef("destroy: standard input is not a terminal to confirm on: add --yes to destroy filesystem %s", name)
	}
	if sessions {
		for _, i := range infos {
			if i.Exists && i.Role == "session" && !i.WriteAlias {
				// An older format's: declaring mounts dead writes
				// through it.
				if err := st.Admin().AddWriteAliases(ctx, i.Name); err != nil {
					return explain(err, url)
				}
			}
		}
		if err := judgeMounts(ctx, st, c.Bool("no-wait")); err != nil {
			return explain(err, url)
		}
	}
	if !c.Bool("yes") {
		if err := confirm(name, existing); err != nil {
			return err
		}
	}
	if sessions {
		if err := blockMounts(ctx, st); err != nil {
			return explain(err, url)
		}
	}
	if err := st.Admin().DeleteIndices(ctx, existing); err != nil {
		return explain(err, url)
	}
	fmt.Printf("filesystem %s destroyed (deleted %s)\n", name, strings.Join(existing, ", "))
	return nil
}

// judgeMounts refuses while a mount of the filesystem may be live. A
// mount's session is dead once declared dead (fenced: it cannot write
// again), which this does, as mounts do, for a session whose heartbeat
// counter it sees standing still for the session's lease plus grace on
// its own clock.
func judgeMounts(ctx context.Context, st *store.Store, noWait bool) error {
	all, err := st.ListSessions(ctx)
	if err != nil {
		return err
	}
	var longest time.Duration
	undeclared := 0
	for _, s := range all {
		if !s.Dead {
			undeclared++
			longest = max(longest, time.Duration(s.LeaseMs)*time.Millisecond)
		}
	}
	if undeclared == 0 {
		return nil
	}
	// Grace as a mount of that lease gives (locking.Config's default).
	grace := longest / 2
	if !noWait {
		fmt.Fprintf(os.Stderr, "watching %d mount session(s) of %s for up to %s to tell live from dead\n", undeclared, st.Prefix(), (longest + grace + longest/2).Round(time.Second))
	}
	host, _ := os.Hostname()
	obs := locking.NewObserver(st, fmt.Sprintf("(esfs destroy on %s, pid %d)", host, os.Getpid()), grace, nil)
	v, err := obs.Judge(ctx, !noWait)
	if err != nil {
		return err
	}
	if len(v.Live) > 0 {
		return fmt.Errorf("filesystem %s is mounted: %s; unmount it everywhere (esfs umount MOUNTPOINT), then destroy it", st.Prefix(), describeMounts(v.Live))
	}
	if len(v.Silent) > 0 && noWait {
		return fmt.Errorf("filesystem %s has mounts not known to be dead: %s; run without --no-wait to watch them for their lease and declare them dead if they are", st.Prefix(), describeMounts(v.Silent))
	}
	if len(v.Silent) > 0 {
		return fmt.Errorf("filesystem %s has mounts neither seen alive nor declared dead: %s; try again", st.Prefix(), describeMounts(v.Silent))
	}
	return nil
}

// blockMounts makes sure no mount starts before the indices are gone: a
// write block on the sessions index keeps any new session from
// registering; a session that registered since judgeMounts looked is
// found then, and refused.
func blockMounts(ctx context.Context, st *store.Store) error {
	if err := st.Admin().BlockSessions(ctx); err != nil {
		return err
	}
	all, err := st.ListSessions(ctx)
	var started []store.SessionDoc
	for _, s := range all {
		if !s.Dead {
			started = append(started, s)
		}
	}
	if err == nil && len(started) == 0 {
		return nil
	}
	refusal := err
	if err == nil {
		refusal = fmt.Errorf("filesystem %s was mounted meanwhile: %s; unmount it everywhere, then destroy it", st.Prefix(), describeMounts(started))
	}
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), st.Timeout())
	defer cancel()
	if uerr := st.Admin().UnblockSessions(uctx); uerr != nil {
		return fmt.Errorf("%w; and the block on new mounts could not be removed (remove it with esfs config --index %s --unblock): %v", refusal, st.Prefix(), uerr)
	}
	return refusal
}

func describeMounts(ss []store.SessionDoc) string {
	var out []string
	for _, s := range ss {
		out = append(out, fmt.Sprintf("%s on host %s (pid %d, session %s)", s.Mount, s.Host, s.Pid, s.ID))
	}
	return strings.Join(out, ", ")
}

// isTerminal: f is a terminal, where someone can read a question and
// answer it (not /dev/null, which is a character device too).
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// confirm asks to type the filesystem's name on the terminal.
func confirm(name string, indices []string) error {
	fmt.Fprintf(os.Stderr, "This deletes filesystem %s and every file in it (indices %s).\nType the filesystem's name to go on: ", name, strings.Join(indices, ", "))
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if got := strings.TrimSpace(line); got != name {
		if err != nil && got == "" {
			return fmt.Errorf("not destroyed: no answer")
		}
		return fmt.Errorf("not destroyed: %q is not %q", got, name)
	}
	return nil
}
