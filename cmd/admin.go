package cmd

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/esfs/esfs/fs/fsck"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// adminSession opens the store and joins the protocol as a short-lived
// session without a sweeper (fsck and status judge sessions themselves).
func adminSession(c *cli.Context) (*store.Store, *locking.Coordinator, func(), error) {
	log := quietLogger(c.Bool("debug"))
	ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("es-timeout"))
	defer cancel()
	st, err := openStore(ctx, c, log, true, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	co, err := locking.Start(ctx, st, locking.Config{Lease: c.Duration("lease"), Mount: "(esfs " + c.Command.Name + ")", Log: log, NoSweeper: true})
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

// noWaitRecall bounds fsck --no-wait's recall of the writers.
const noWaitRecall = 5 * time.Second

// recallWriters makes the mounts that write directories in memory flush
// first (DELEGATIONS.md, invariant 6): a reader of the store then sees
// every call that returned before it began, as a mount would.
func recallWriters(ctx context.Context, co *locking.Coordinator) error {
	if _, err := co.Delegations.RecallWriters(ctx); err != nil {
		return fmt.Errorf("asking the mounts that write in memory to flush first: %w", err)
	}
	return nil
}

func adminFlags(extra ...cli.Flag) []cli.Flag {
	return append(append(esFlags(),
		&cli.DurationFlag{Name: "lease", Value: 10 * time.Second, EnvVars: []string{"ESFS_LEASE"}, Usage: "this tool's own session lease"},
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
			st, co, done, err := adminSession(c)
			if err != nil {
				return err
			}
			defer done()
			ctx, cancel := context.WithTimeout(c.Context, 30*time.Minute)
			defer cancel()
			if c.Bool("no-wait") {
				// A writer that does not answer holds a recall until it is
				// declared dead: not waited for here, and said.
				rctx, rcancel := context.WithTimeout(ctx, noWaitRecall)
				err := recallWriters(rctx, co)
				rcancel()
				if err != nil && rctx.Err() == nil {
					return err
				} else if err != nil {
					fmt.Printf("not flushed: a mount that writes in memory did not answer within %s; its directories are checked as of its last flush\n", noWaitRecall)
				}
			} else if err := recallWriters(ctx, co); err != nil {
				return err
			}
			rep, err := fsck.Run(ctx, co, st, c.Bool("repair"), !c.Bool("no-wait"))
			if err != nil {
				return explain(err, c.String("es-url"))
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
			st, _, done, err := adminSession(c)
			if err != nil {
				return err
			}
			defer done()
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
		Usage: "list mounts (sessions), whether they are alive, and operations in flight",
		Flags: adminFlags(&cli.DurationFlag{Name: "observe", Value: 4 * time.Second, Usage: "how long to watch heartbeats before calling a mount silent"}),
		Action: func(c *cli.Context) error {
			st, co, done, err := adminSession(c)
			if err != nil {
				return err
			}
			defer done()
			ctx := c.Context
			first, err := st.ListSessions(ctx)
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			time.Sleep(c.Duration("observe"))
			second, err := st.ListSessions(ctx)
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			before := map[string]int64{}
			for _, s := range first {
				before[s.ID] = s.Counter
			}
			sort.Slice(second, func(i, j int) bool { return second[i].Started < second[j].Started })
			w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "SESSION\tSTATE\tHOST\tPID\tMOUNT\tLEASE\tHEARTBEATS")
			for _, s := range second {
				state := "live"
				switch {
				case s.ID == co.Session().ID():
					state = "this tool"
				case s.Dead:
					state = "dead (declared by " + s.DeadBy + ")"
				case before[s.ID] == s.Counter:
					state = fmt.Sprintf("silent for %s+ (expired once silent for lease + grace)", c.Duration("observe"))
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%d\n", s.ID, state, s.Host, s.Pid, s.Mount, time.Duration(s.LeaseMs)*time.Millisecond, s.Counter)
			}
			w.Flush()
			for _, s := range second {
				if lines := statusLines(s.Stats); len(lines) > 0 {
					fmt.Printf("\n%s (%s on %s), as of its last heartbeat:\n", s.ID, s.Mount, s.Host)
					for _, l := range lines {
						fmt.Println("  " + l)
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
