package cmd

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/esfs/esfs/fs/fsck"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// adminSession opens the store and joins the protocol as a short-lived
// session without a sweeper, for the admin commands that write (import,
// fsck --repair).
func adminSession(c *cli.Context) (*store.Store, *locking.Coordinator, func(), error) {
	if err := checkLease(c); err != nil {
		return nil, nil, nil, err
	}
	log := quietLogger(c.Bool("debug"))
	ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("es-timeout"))
	defer cancel()
	st, err := openStore(ctx, c, log, true, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	b := thisBuild()
	co, err := locking.Start(ctx, st, locking.Config{Lease: c.Duration("lease"), Mount: "(esfs " + c.Command.Name + ")", Log: log, NoSweeper: true,
		Build: b.String()})
	if err != nil {
		st.Close()
		return nil, nil, nil, explain(err, c.String("es-url"))
	}
	return st, co, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.Duration("es-timeout"))
		defer cancel()
		_ = co.Close(ctx)
		st.Close()
	}, nil
}

// adminReader opens the store for a command that only reads (status,
// locks, search, export, fsck without --repair): no session is registered
// and nothing is written, so read-only credentials run it, and it waits
// for nothing.
func adminReader(c *cli.Context) (*store.Store, *locking.Reader, error) {
	log := quietLogger(c.Bool("debug"))
	cfg, err := storeConfig(c, log)
	if err != nil {
		return nil, nil, err
	}
	cfg.ReadOnly = true
	st, err := store.New(cfg)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("es-timeout"))
	defer cancel()
	if err := st.Open(ctx); err != nil {
		st.Close()
		return nil, nil, explain(err, c.String("es-url"))
	}
	return st, locking.NewReader(st, 0, log), nil
}

// adminView opens the store for a command that searches the tree as
// readers see it (find, du, search): the mounts that write in memory
// flush, then the indices which names are refreshed, so the searches see
// every call that returned on a mount before the command began. In that
// order, not side by side: a mount that flushed on its own while the
// recall looked (and so was not recalled) may have landed its writes
// after a refresh begun with it.
func adminView(c *cli.Context, which store.Searched) (*store.Store, *locking.Reader, error) {
	st, r, err := adminReader(c)
	if err != nil {
		return nil, nil, err
	}
	if err := flushWriters(c.Context, r); err != nil {
		st.Close()
		return nil, nil, err
	}
	if err := st.Refresh(c.Context, which); err != nil {
		st.Close()
		return nil, nil, explain(err, c.String("es-url"))
	}
	return st, r, nil
}

// noWaitRecall bounds fsck --no-wait's recall of the writers.
const noWaitRecall = 5 * time.Second

// recallWriters makes the mounts that write directories in memory flush
// first (a reader never sees the store behind a call that returned on a
// mount): a reader of the store then sees every call that returned before
// it began, as a mount would.
func recallWriters(ctx context.Context, co *locking.Coordinator) error {
	if _, err := co.Delegations.RecallWriters(ctx); err != nil {
		return fmt.Errorf("asking the mounts that write in memory to flush first: %w", err)
	}
	return nil
}

// flushWriters is recallWriters for a command without a session: the
// recall is the one write it makes, and only when some mount writes in
// memory. Credentials that may not write cannot ask; the command goes on
// with what is in the store, and says in one line on stderr what that
// may miss.
func flushWriters(ctx context.Context, r *locking.Reader) error {
	n, err := r.RecallWriters(ctx)
	if n > 0 && errors.Is(err, store.ErrForbidden) {
		fmt.Fprintf(os.Stderr, "esfs: %d directories are written in memory by mounts that were not asked to flush (these credentials may not write): what they did in their last flush interval may be missing\n", n)
		return nil
	}
	if err != nil {
		return fmt.Errorf("asking the mounts that write in memory to flush first: %w", err)
	}
	return nil
}

func adminFlags(extra ...cli.Flag) []cli.Flag {
	return append(append(esFlags(),
		&cli.DurationFlag{Name: "lease", Value: 10 * time.Second, EnvVars: []string{"ESFS_LEASE"}, Usage: "the session lease of the commands that write (import, fsck --repair); the others have no session"},
		&cli.BoolFlag{Name: "debug", EnvVars: []string{"ESFS_DEBUG"}, Usage: "verbose log"},
	), extra...)
}

func cmdFsck() *cli.Command {
	return &cli.Command{
		Name:  "fsck",
		Usage: "check a filesystem's invariants; exit 0 if clean, 1 if problems were all repaired, 4 if problems are left",
		Flags: adminFlags(
			&cli.BoolFlag{Name: "repair", Usage: "finish or undo what recovery would, and remove leftovers (data chunks of dead writers included), orphans and strays"},
			&cli.BoolFlag{Name: "no-wait", Usage: "do not wait a lease to judge whether silent mounts are dead"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("fsck takes no arguments")
			}
			ctx, cancel := context.WithTimeout(c.Context, 30*time.Minute)
			defer cancel()
			rep, err := runFsck(ctx, c)
			if err != nil {
				return err
			}
			fmt.Printf("%d paths, %d inodes, %d data chunks, %d lock documents, %d operation records\n", rep.Paths, rep.Inodes, rep.Chunks, rep.Locks, rep.Ops)
			for _, f := range rep.InFlight {
				fmt.Printf("in flight: %s\n", f)
			}
			for _, l := range rep.Leases {
				fmt.Printf("lease of a dead mount (nothing to finish; dropped by whoever needs the lock): %s\n", l)
			}
			for _, p := range rep.Problems {
				fmt.Println(p.String())
			}
			switch {
			case rep.Clean():
				fmt.Println("clean")
				return nil
			case rep.Unrepaired() == 0:
				fmt.Printf("%d problems, all repaired\n", len(rep.Problems))
				return exitCode{1}
			default:
				fmt.Printf("%d problems, %d left\n", len(rep.Problems), rep.Unrepaired())
				return exitCode{4}
			}
		},
	}
}

// runFsck checks, or with --repair repairs, in a session of its own; a
// check registers nothing and writes nothing (but the recall of the mounts
// that write in memory, see flushWriters).
func runFsck(ctx context.Context, c *cli.Context) (fsck.Report, error) {
	wait := !c.Bool("no-wait")
	if !c.Bool("repair") {
		st, r, err := adminReader(c)
		if err != nil {
			return fsck.Report{}, err
		}
		defer st.Close()
		if err := boundedRecall(ctx, c, func(ctx context.Context) error { return flushWriters(ctx, r) }); err != nil {
			return fsck.Report{}, err
		}
		rep, err := fsck.Check(ctx, r, st, wait)
		if err != nil {
			return rep, explain(err, c.String("es-url"))
		}
		return rep, nil
	}
	st, co, done, err := adminSession(c)
	if err != nil {
		return fsck.Report{}, err
	}
	defer done()
	if err := boundedRecall(ctx, c, func(ctx context.Context) error { return recallWriters(ctx, co) }); err != nil {
		return fsck.Report{}, err
	}
	rep, err := fsck.Repair(ctx, co, st, wait)
	if err != nil {
		return rep, explain(err, c.String("es-url"))
	}
	return rep, nil
}

// boundedRecall runs recall, within noWaitRecall under --no-wait: a
// writer that does not answer holds a recall until it is declared dead,
// which --no-wait does not wait for, and says so.
func boundedRecall(ctx context.Context, c *cli.Context, recall func(context.Context) error) error {
	if !c.Bool("no-wait") {
		return recall(ctx)
	}
	rctx, rcancel := context.WithTimeout(ctx, noWaitRecall)
	defer rcancel()
	err := recall(rctx)
	if err != nil && rctx.Err() == nil {
		return err
	} else if err != nil {
		fmt.Printf("not flushed: a mount that writes in memory did not answer within %s; its directories are checked as of its last flush\n", noWaitRecall)
	}
	return nil
}

// exitCode ends the program with a status and no message (the command
// printed its own report).
type exitCode struct{ code int }

func (e exitCode) Error() string { return "" }

func cmdLocks() *cli.Command {
	return &cli.Command{
		Name:  "locks",
		Usage: "list lock holders and waiters",
		Flags: adminFlags(),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("locks takes no arguments (the filesystem is named by --index)")
			}
			st, _, err := adminReader(c)
			if err != nil {
				return err
			}
			defer st.Close()
			locks, err := st.SearchLocks(c.Context)
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PATH\tMODE\tSESSION\tOPERATION\tAGE")
			now := time.Now()
			for _, d := range locks {
				name := fmt.Sprintf("%q", d.Path)
				switch {
				case d.ID == store.GlobalLockID:
					name = "(global)"
				case store.IsDelegLock(d.ID):
					name += " (directory)"
				case store.IsFileLock(d.ID):
					name += " (file lock)"
				}
				for _, h := range d.Holders {
					mode := lockMode(d.ID, h.Mode)
					if store.IsFileLock(d.ID) {
						mode = fileLockMode(h.Mode, h.Flock, h.Start, h.End) + fmt.Sprintf(" pid %d", h.Pid)
					}
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", name, mode, h.Session, h.Op, age(now, h.Since))
				}
				for _, q := range d.Waiters {
					mode := lockMode(d.ID, q.WaitMode())
					if store.IsFileLock(d.ID) {
						mode = fileLockMode(q.Mode, q.Flock, q.Start, q.End)
					}
					fmt.Fprintf(w, "%s\t%s (waiting)\t%s\t%s\t%s\n", name, mode, q.Session, q.Op, age(now, q.Since))
				}
			}
			w.Flush()
			return nil
		},
	}
}

// lockMode names a lock's mode for people: the letters of path locks
// (S, X), words for a directory's delegation lock.
func lockMode(id string, m store.LockMode) string {
	if !store.IsDelegLock(id) {
		return string(m)
	}
	switch m {
	case store.ReadDeleg:
		return "read delegation"
	case store.Exclusive:
		return "write delegation"
	case store.Change:
		return "change"
	}
	return string(m)
}

// fileLockMode names an advisory file lock: "flock exclusive", or
// "write 0-99", "read 100-EOF" for a record lock's bytes.
func fileLockMode(m store.LockMode, flock bool, start, end int64) string {
	if flock {
		if m == store.FileWrite {
			return "flock exclusive"
		}
		return "flock shared"
	}
	kind := "read"
	if m == store.FileWrite {
		kind = "write"
	}
	if end == math.MaxInt64 {
		return fmt.Sprintf("%s %d-EOF", kind, start)
	}
	return fmt.Sprintf("%s %d-%d", kind, start, end)
}

// age is for display only: it compares another machine's clock with ours.
func age(now time.Time, since int64) string {
	if since == 0 {
		return "?"
	}
	return now.Sub(time.Unix(0, since)).Round(time.Second).String()
}

func cmdStatus() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "list mounts (sessions): their state, version and options, their figures, and operations in flight",
		Flags: adminFlags(&cli.DurationFlag{Name: "observe", Usage: "watch the heartbeats this long (such as 5s) to tell live mounts from silent ones; by default STATE is what the session documents say, at once"}),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("status takes no arguments (the filesystem is named by --index)")
			}
			if c.Duration("observe") < 0 {
				return usagef("--observe must not be negative")
			}
			st, _, err := adminReader(c)
			if err != nil {
				return err
			}
			defer st.Close()
			ctx := c.Context
			sessions, err := st.ListSessions(ctx)
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			// Liveness is a counter seen moving on our own clock, never a
			// timestamp of another machine's: only watched on demand.
			observe := c.Duration("observe")
			var moved map[string]bool
			if observe > 0 {
				if sessions, moved, err = watchHeartbeats(ctx, st, sessions, observe); err != nil {
					return explain(err, c.String("es-url"))
				}
			}
			sort.Slice(sessions, func(i, j int) bool { return sessions[i].Started < sessions[j].Started })
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION\tSTATE\tHOST\tPID\tMOUNT\tVERSION\tLEASE\tHEARTBEATS")
			for _, s := range sessions {
				state := "registered"
				switch {
				case s.Dead:
					state = "dead (declared by " + s.DeadBy + ")"
				case observe == 0:
				case moved[s.ID]:
					state = "live"
				default:
					state = fmt.Sprintf("silent for %s+ (declared dead once silent for lease + grace)", observe)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%d\n", s.ID, state, s.Host, s.Pid, s.Mount, shortVersion(s.Build),
					time.Duration(s.LeaseMs)*time.Millisecond, s.Counter)
			}
			w.Flush()
			if observe == 0 && len(sessions) > 0 {
				fmt.Println("(heartbeats not watched: --observe 5s tells live mounts from silent ones)")
			}
			for _, s := range sessions {
				fmt.Printf("\n%s (%s on %s)\n", s.ID, s.Mount, s.Host)
				fmt.Printf("  esfs %s\n", orUnknown(s.Build))
				fmt.Printf("  options %s\n", optionsLine(s.Options))
				if l, ok := s.Options["log"]; ok {
					fmt.Printf("  log %s\n", l)
				}
				if lines := statusLines(s.Stats); len(lines) > 0 {
					fmt.Println("  as of its last heartbeat:")
					for _, l := range lines {
						fmt.Println("    " + l)
					}
				}
			}
			fmt.Println()
			recs, err := st.SearchOps(ctx, store.OpPrepared, store.OpCommitted, store.OpAborted)
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			if len(recs) == 0 {
				fmt.Println("no operations in flight")
			}
			for _, r := range recs {
				fmt.Printf("operation %s: %s rename %q -> %q, owner %s, epoch %d\n", r.ID, r.State, r.Src, r.Dst, r.Owner, r.Epoch)
			}
			locks, err := st.SearchLocks(ctx)
			if err == nil {
				n := 0
				for _, d := range locks {
					n += len(d.Holders)
				}
				fmt.Printf("%d lock documents, %d holder entries\n", len(locks), n)
			}
			return nil
		},
	}
}

// watchHeartbeats reads the sessions again after d and says which
// counters moved: those mounts are alive.
func watchHeartbeats(ctx context.Context, st *store.Store, first []store.SessionDoc, d time.Duration) ([]store.SessionDoc, map[string]bool, error) {
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-time.After(d):
	}
	second, err := st.ListSessions(ctx)
	if err != nil {
		return nil, nil, err
	}
	before := map[string]int64{}
	for _, s := range first {
		before[s.ID] = s.Counter
	}
	moved := map[string]bool{}
	for _, s := range second {
		if c, ok := before[s.ID]; !ok || c != s.Counter {
			moved[s.ID] = true // new since the first look: it registered, so it ran
		}
	}
	return second, moved, nil
}

// shortVersion is the version part of a session's build ("?" for the
// documents of mounts older than esfs's recording it).
func shortVersion(build string) string {
	v, _, _ := strings.Cut(build, " ")
	return orUnknown(v)
}

func orUnknown(s string) string {
	if s == "" {
		return "?"
	}
	return s
}

// optionsLine lists a mount's options as name=value, in the order of
// mountOptionOrder, then any others ("?" for an older mount's document).
func optionsLine(o map[string]string) string {
	if len(o) == 0 {
		return "?"
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range mountOptionOrder() {
		if v, ok := o[k]; ok {
			out = append(out, k+"="+v)
			seen[k] = true
		}
	}
	var rest []string
	for k, v := range o {
		if !seen[k] && k != "log" {
			rest = append(rest, k+"="+v)
		}
	}
	sort.Strings(rest)
	return strings.Join(append(out, rest...), " ")
}
