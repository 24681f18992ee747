// Command swapper exchanges pairs of names in a directory, over and over,
// as a hostile owner of a tree would while root copies it
// (test/transfer_trust_test.go runs it as another user):
//
//	swapper [-pause DURATION] [-once] DIR A:B [C:D ...]
//
// Each pair is exchanged atomically (renameat2 RENAME_EXCHANGE), so that
// neither name is ever missing: a regular file and a symlink beside it
// take each other's place. A round exchanges every pair once, then pauses
// (so that the process it races gets the CPU too). A pair of which a name
// does not exist yet is tried again on the next round, at once: with
// -once, each pair is exchanged as soon as both names exist, and then
// left alone. On SIGTERM or SIGINT it stops and prints how many exchanges
// it made.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	pause := flag.Duration("pause", 0, "pause after each round")
	once := flag.Bool("once", false, "exchange each pair once")
	flag.Parse()
	if flag.NArg() < 2 {
		fmt.Fprintln(os.Stderr, "usage: swapper [-pause DURATION] DIR A:B [C:D ...]")
		os.Exit(2)
	}
	dir, err := unix.Open(flag.Arg(0), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "swapper: %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	var pairs [][2]string
	for _, p := range flag.Args()[1:] {
		a, b, ok := strings.Cut(p, ":")
		if !ok {
			fmt.Fprintf(os.Stderr, "swapper: %q is not A:B\n", p)
			os.Exit(2)
		}
		pairs = append(pairs, [2]string{a, b})
	}
	var stop atomic.Bool
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		stop.Store(true)
	}()
	fmt.Println("swapping") // the caller waits for this line
	var n int64
	done := make([]bool, len(pairs))
	for !stop.Load() {
		for i, p := range pairs {
			if done[i] {
				continue
			}
			if unix.Renameat2(dir, p[0], dir, p[1], unix.RENAME_EXCHANGE) == nil {
				n++
				done[i] = *once
			}
		}
		if *pause > 0 {
			time.Sleep(*pause)
		}
	}
	fmt.Println(n)
}
