package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
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
			if err := checkIndexSettings(c); err != nil {
				return err
			}
			log := quietLogger(false)
			ctx, cancel := context.WithTimeout(c.Context, 2*c.Duration("es-timeout"))
			defer cancel()
			s, err := openStore(ctx, c, log, false, nil)
			if err != nil {
				return err
			}
			defer s.Close()
			before, err := s.Admin().Inspect(ctx)
			if err != nil {
				return explain(err, c.String("es-url"))
			}
			if err := s.Admin().Check(before); errors.Is(err, store.ErrFormat) && store.Upgradable(before) {
				// Judging the mounts may take their lease: no deadline.
				if err := upgradeFormat(c.Context, s, before); err != nil {
					return explain(err, c.String("es-url"))
				}
				if before, err = s.Admin().Inspect(ctx); err != nil {
					return explain(err, c.String("es-url"))
				}
			}
			err = s.Admin().Mkfs(ctx, store.MkfsOptions{
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
			mkfsKept(c, s.Prefix(), before)
			return nil
		},
	}
}

// upgradeFormat upgrades a filesystem of an older format in place (see
// store.Upgradable for the steps and why each is safe to repeat).
func upgradeFormat(ctx context.Context, s *store.Store, infos []store.IndexInfo) error {
	if err := s.Admin().AddWriteAliases(ctx); err != nil {
		return err
	}
	if err := judgeMounts(ctx, s, false); err != nil {
		return fmt.Errorf("not upgraded: %w", err)
	}
	var first store.IndexInfo
	for _, i := range infos {
		if i.Role == "path" {
			first = i
		}
	}
	if first.Format != store.FormatVersion {
		if err := s.Admin().SetFormat(ctx, first); err != nil {
			return err
		}
	}
	if err := judgeMounts(ctx, s, false); err != nil {
		return fmt.Errorf("upgrade of filesystem %s not finished (no esfs mounts it meanwhile): %w; then run esfs mkfs --index %s again", s.Prefix(), err, s.Prefix())
	}
	for _, i := range infos {
		if i.Role != "path" && i.Format != store.FormatVersion {
			if err := s.Admin().SetFormat(ctx, i); err != nil {
				return err
			}
		}
	}
	fmt.Printf("filesystem %q upgraded to format %d: every write goes through its write aliases (%s), which no write can make Elasticsearch create again once the filesystem is destroyed\n",
		s.Prefix(), store.FormatVersion, s.Prefix()+store.WriteAliasSuffix+", ...")
	return nil
}

// mkfsKept says what mkfs did to a filesystem that existed, wholly or in
// part: it made the missing indices, and changed no setting of the others
// even where the flags ask for other values (config changes them).
func mkfsKept(c *cli.Context, name string, before []store.IndexInfo) {
	var made []string
	for _, i := range before {
		if !i.Exists {
			made = append(made, i.Name)
		}
	}
	if len(made) == len(before) {
		return // a new filesystem
	}
	if len(made) > 0 {
		fmt.Printf("completed: made the missing index %s\n", strings.Join(made, ", "))
	}
	for _, i := range before {
		if !i.Exists {
			continue
		}
		var differ []string
		if c.IsSet("shards") && i.Shards != fmt.Sprint(c.Int("shards")) {
			differ = append(differ, fmt.Sprintf("shards %s, not %d (fixed at mkfs)", i.Shards, c.Int("shards")))
		}
		if c.IsSet("replicas") && i.ReplicasSetting() != c.String("replicas") {
			differ = append(differ, fmt.Sprintf("replicas %s, not %s", i.ReplicasSetting(), c.String("replicas")))
		}
		if c.IsSet("refresh-interval") && i.RefreshInterval != c.String("refresh-interval") {
			differ = append(differ, fmt.Sprintf("refresh interval %s, not %s", i.RefreshInterval, c.String("refresh-interval")))
		}
		if len(differ) > 0 {
			fmt.Printf("note: filesystem %s already existed and mkfs changes no setting of an existing index: it keeps %s (change replicas and refresh interval with esfs config --index %s)\n",
				name, strings.Join(differ, ", "), name)
		}
		return // config keeps the indices alike: the first tells
	}
}
