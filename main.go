// Command esfs mounts an Elasticsearch index as a POSIX filesystem.
package main

import (
	"fmt"
	"os"

	"github.com/esfs/esfs/cmd"
)

func main() {
	if err := cmd.Main(os.Args); err != nil {
		if msg := err.Error(); msg != "" {
			fmt.Fprintf(os.Stderr, "esfs: %s\n", msg)
		}
		os.Exit(cmd.ExitCode(err))
	}
}
