package cmd

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// inoBatch bounds the inode numbers of one terms query (Elasticsearch's
// index.max_terms_count is 65,536).
const inoBatch = 10000

func cmdSearch() *cli.Command {
	return &cli.Command{
		Name:      "search",
		Usage:     "print the paths whose name or text content matches QUERY, one per line (like grep -rl); exit 1 if none",
		ArgsUsage: "[QUERY]",
		Description: `QUERY is Elasticsearch's simple query string, matched against the words of
names and of text file contents (case-insensitive, whole words):
  foo bar        both words (in the name, or in the contents)
  foo | bar      either
  foo -bar       foo, not bar
  "foo bar"      the phrase
  foo*           words starting with foo
  foo~1          foo, or a word one edit away
An empty QUERY with --name lists by name alone, like find -name.`,
		Flags: adminFlags(
			&cli.StringFlag{Name: "under", Value: "/", Usage: "only paths at or below this directory (a path in the filesystem, or under --mount)"},
			&cli.StringFlag{Name: "name", Usage: "only names matching this shell pattern (*, ?, [a-z], [!a]), as find -name"},
			&cli.StringFlag{Name: "iname", Usage: "as --name, ignoring case"},
			&cli.StringFlag{Name: "mount", Usage: "print paths under this mount point of the filesystem, so that the output can be used on files"},
		),
		Action: runSearch,
	}
}

func runSearch(c *cli.Context) error {
	if c.NArg() > 1 {
		return usagef("search takes one QUERY (quote it: esfs search 'foo bar')")
	}
	query := strings.TrimSpace(c.Args().First())
	f := store.SearchFilter{Name: c.String("name")}
	if g := c.String("iname"); g != "" {
		if f.Name != "" {
			return usagef("give --name or --iname, not both")
		}
		f.Name, f.NameFold = g, true
	}
	if query == "" && f.Name == "" {
		return usagef("search needs a QUERY, or --name/--iname")
	}
	// subdir: the directory of the filesystem mounted at mount (esfs
	// mount --subdir), "/" for the whole filesystem.
	mount, subdir := c.String("mount"), "/"
	if mount != "" {
		abs, err := filepath.Abs(mount)
		if err != nil {
			return err
		}
		mount = filepath.Clean(abs)
		if subdir, err = checkSearchMount(mount, c.String("index")); err != nil {
			return err
		}
	}
	under := c.String("under")
	if mount != "" && filepath.IsAbs(under) && (under == mount || strings.HasPrefix(under, mount+"/")) {
		under = filepath.Join(subdir, strings.TrimPrefix(under, mount))
	}
	if !strings.HasPrefix(under, "/") {
		return usagef("--under %q: give a path from the filesystem's root (/dir), or one under --mount", under)
	}
	f.Under = filepath.Clean(under)
	if store.IsWithin(subdir, f.Under) {
		f.Under = subdir // what is outside the mount cannot be printed under it
	}

	st, r, err := adminView(c, store.SearchedPaths|store.SearchedData)
	if err != nil {
		return err
	}
	defer st.Close()
	ctx := c.Context
	found := map[string]bool{}
	collect := func(q string, inos []uint64) error {
		// The view shows each path as readers see it (a rename in flight
		// under its old names or its new ones, never both).
		sc, err := r.View.Search(q, inos, f, store.DefaultPageSize)
		if err != nil {
			return err
		}
		defer sc.Close()
		for {
			page, bad, err := sc.Next(ctx)
			if err != nil {
				return err
			}
			for _, b := range bad {
				fmt.Fprintf(os.Stderr, "esfs: skipping a damaged path document: %v\n", b)
			}
			if page == nil {
				return nil
			}
			for _, d := range page {
				if d.Path != "/" {
					found[d.Path] = true
				}
			}
		}
	}
	if query == "" {
		err = collect("", nil)
	} else {
		// Names first, then the files whose contents match, by inode: a
		// path is found through its inode, so renames (and hard links)
		// are reflected whatever moved since the contents were written.
		err = collect(query, nil)
		seen := map[uint64]bool{}
		var batch []uint64
		flush := func() error {
			if len(batch) == 0 {
				return nil
			}
			err := collect("", batch)
			batch = batch[:0]
			return err
		}
		if err == nil {
			err = st.ContentMatches(ctx, query, func(inos []uint64) error {
				for _, ino := range inos {
					if !seen[ino] {
						seen[ino] = true
						batch = append(batch, ino)
					}
				}
				if len(batch) >= inoBatch {
					return flush()
				}
				return nil
			})
		}
		if err == nil {
			err = flush()
		}
	}
	if err != nil {
		return explain(err, c.String("es-url"))
	}
	paths := make([]string, 0, len(found))
	for p := range found {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	w := bufio.NewWriter(os.Stdout)
	printed := 0
	for _, p := range paths {
		if mount != "" {
			if !store.IsWithin(p, subdir) || p == subdir {
				continue // outside the mounted directory, or its root
			}
			p = mount + strings.TrimPrefix(p, strings.TrimSuffix(subdir, "/"))
		}
		fmt.Fprintln(w, p)
		printed++
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if printed == 0 {
		return exitCode{1}
	}
	return nil
}
