package cmd

import (
	"context"
	"fmt"
	"os"
	"regexp"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// What Elasticsearch takes for index.number_of_replicas or
// index.auto_expand_replicas, and for a time value: checked here so that
// the message names the flag.
var (
	replicasPattern = regexp.MustCompile(`^[0-9]+(-([0-9]+|all))?$`)
	refreshPattern  = regexp.MustCompile(`^(-1|[0-9]+(d|h|m|s|ms|micros|nanos))$`)
)

func cmdMkfs() *cli.Command {
	return &cli.Command{
		Name:      "mkfs",
		Usage:     "create a filesystem's indices and root directory (idempotent)",
		ArgsUsage: " ",
		Flags: append(esFlags(), []cli.Flag{
			&cli.IntFlag{Name: "shards", Value: 1, Usage: "primary shards of the path and inode indices"},
			&cli.StringFlag{Name: "replicas", Value: "0-1", Usage: "number of replicas, or a range for auto_expand_replicas"},
			&cli.StringFlag{Name: "refresh-interval", Value: "1s", Usage: "index.refresh_interval of the indices"},
		}...),
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usagef("mkfs takes no arguments (the filesystem is named by --index)")
			}
			if c.Int("shards") < 1 || c.Int("shards") > 1024 {
				return usagef("--shards must be between 1 and 1024")
			}
			if r := c.String("replicas"); !replicasPattern.MatchString(r) {
				return usagef("--replicas %q: give a number of replicas (1) or a range (0-1, 0-all)", r)
			}
			if r := c.String("refresh-interval"); !refreshPattern.MatchString(r) {
				return usagef("--refresh-interval %q: give a time such as 1s or 500ms, or -1 for no periodic refresh", r)
			}
			log := quietLogger(false)
			ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("es-timeout"))
			defer cancel()
			s, err := openStore(ctx, c, log, false, nil)
			if err != nil {
				return err
			}
			defer s.Close()
			err = s.Mkfs(ctx, store.MkfsOptions{
				Shards:          c.Int("shards"),
				Replicas:        c.String("replicas"),
				RefreshInterval: c.String("refresh-interval"),
				RootUid:         uint32(os.Getuid()),
				RootGid:         uint32(os.Getgid()),
			})
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			fmt.Printf("filesystem %q ready\n", s.Prefix())
			return nil
		},
	}
}
