package cmd

import (
	"fmt"
	"os"
	"regexp"
	"text/tabwriter"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// A separate command rather than mkfs flags on an existing filesystem:
// mkfs sends its defaults whether given or not, so re-running it (as
// scripts do, it is idempotent) would silently undo a tuned setting.
// config changes only what it is told to.
func cmdConfig() *cli.Command {
	return &cli.Command{
		Name:      "config",
		Usage:     "print a filesystem's settings, or change its replicas and refresh interval",
		ArgsUsage: " ",
		Flags: append(esFlags(),
			&cli.StringFlag{Name: "replicas", Usage: "number of replicas, or a range A-B (or A-all) for auto_expand_replicas"},
			&cli.StringFlag{Name: "refresh-interval", Usage: "index.refresh_interval, a positive time such as 1s or 500ms"},
			&cli.BoolFlag{Name: "unblock", Usage: "let mounts start again after an esfs destroy that was interrupted"},
		),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("config takes no arguments (the filesystem is named by --index)")
			}
			replicas, refresh := c.String("replicas"), c.String("refresh-interval")
			if err := checkIndexSettings(c); err != nil {
				return err
			}
			log := quietLogger(false)
			st, err := openStore(c.Context, c, log, false, nil)
			if err != nil {
				return err
			}
			defer st.Close()
			url := c.String("es-url")
			if _, err := st.Admin().Settings(c.Context); err != nil {
				return explain(err, url)
			}
			if err := st.Admin().ChangeSettings(c.Context, replicas, refresh); err != nil {
				return explain(err, url)
			}
			if c.Bool("unblock") {
				if err := st.Admin().UnblockSessions(c.Context); err != nil {
					return explain(err, url)
				}
			}
			infos, err := st.Admin().Settings(c.Context)
			if err != nil {
				return explain(err, url)
			}
			printSettings(st.Prefix(), infos)
			return nil
		},
	}
}

// What Elasticsearch takes for index.number_of_replicas or
// index.auto_expand_replicas, and a positive time for refresh_interval
// (-1 would stop periodic refreshes, which listings of mounts without
// delegations wait for): checked here so that the message names the flag.
var (
	replicasRE = regexp.MustCompile(`^[0-9]+(-([0-9]+|all))?$`)
	refreshRE  = regexp.MustCompile(`^0*[1-9][0-9]*(ms|s|m|h|d)$`)
)

// checkIndexSettings checks the --replicas and --refresh-interval given
// to mkfs or config.
func checkIndexSettings(c *cli.Context) error {
	if r := c.String("replicas"); c.IsSet("replicas") && !replicasRE.MatchString(r) {
		return usagef("--replicas %q: give a number of replicas (1) or a range (0-1, 1-all)", r)
	}
	if r := c.String("refresh-interval"); c.IsSet("refresh-interval") && !refreshRE.MatchString(r) {
		return usagef("--refresh-interval %q: give a positive time such as 1s, 500ms or 1m (esfs needs periodic refreshes)", r)
	}
	return nil
}

func printSettings(name string, infos []store.IndexInfo) {
	var format int
	var chunk int64
	for _, i := range infos {
		format = max(format, i.Format)
		if i.Role == "data" {
			chunk = i.ChunkSize
		}
	}
	fmt.Printf("filesystem %s: format %d, chunk size %d bytes (shards and chunk size are fixed at mkfs)\n", name, format, chunk)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "INDEX\tSHARDS\tREPLICAS\tREFRESH INTERVAL")
	for _, i := range infos {
		extra := ""
		if i.WriteBlocked {
			extra = "\t(new mounts blocked by esfs destroy)"
		}
		refresh := i.RefreshInterval
		if refresh == "" {
			refresh = "1s (default)"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s%s\n", i.Name, i.Shards, i.ReplicasSetting(), refresh, extra)
	}
	w.Flush()
}
