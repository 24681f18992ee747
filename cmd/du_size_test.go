package cmd

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestDuSizeFormatAsGNU: sizes written as GNU du writes them, for every
// unit esfs du has (-h, --si, -k, -m, -b), checked against GNU du itself
// on files of those apparent sizes (sparse, made by truncate): around
// every power and every rounding boundary, and random ones, seeded.
func TestDuSizeFormatAsGNU(t *testing.T) {
	if _, err := exec.LookPath("du"); err != nil {
		t.Skip("no du")
	}
	seed := uint64(rand.Int64())
	if s := os.Getenv("ESFS_TEST_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (ESFS_TEST_SEED replays)", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	sizes := map[uint64]bool{}
	for n := uint64(0); n <= 2100; n++ {
		sizes[n] = true
	}
	for _, p := range []uint64{1000, 1024} {
		for e, v := 1, p; e <= 4; e, v = e+1, v*p {
			for _, m := range []uint64{1, 9, 10, 99, 100, 999, 1000, 1023, 1024} {
				for d := -3; d <= 3; d++ {
					sizes[uint64(int64(v*m)+int64(d))] = true
				}
				// Just under and over a tenth's boundary: 9.95, 9.96...
				for tenth := uint64(0); tenth < 10; tenth++ {
					x := v*m + v*tenth/10
					sizes[x-1], sizes[x], sizes[x+1] = true, true, true
				}
			}
		}
	}
	for i := 0; i < 300; i++ {
		sizes[rnd.Uint64N(1<<uint(rnd.IntN(43)+1))] = true
	}
	dir := t.TempDir()
	byName := map[string]uint64{}
	var total uint64
	i := 0
	for n := range sizes {
		if n > 1<<43 {
			continue // past what ext4 takes
		}
		name := fmt.Sprintf("f%d", i)
		i++
		if err := os.Truncate(filepath.Join(dir, name), 0); err != nil {
			f, err := os.Create(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		if err := os.Truncate(filepath.Join(dir, name), int64(n)); err != nil {
			t.Fatal(err)
		}
		byName[filepath.Join(dir, name)] = n
		total += n
	}
	// du 9.1 counts a directory's st_size too with --apparent-size.
	st, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	total += uint64(st.Size())
	for _, c := range []struct {
		flag  string
		units duUnits
	}{
		{"-h", duUnits{blockSize: 1, autoscale: true}},
		{"--si", duUnits{blockSize: 1, autoscale: true, base1000: true}},
		{"-k", duUnits{blockSize: 1024}},
		{"-m", duUnits{blockSize: 1 << 20}},
		{"-b", duUnits{blockSize: 1}},
	} {
		cmd := exec.Command("du", "-a", "-c", "--apparent-size", c.flag, dir)
		for _, e := range os.Environ() {
			switch name, _, _ := strings.Cut(e, "="); name {
			case "DU_BLOCK_SIZE", "BLOCK_SIZE", "BLOCKSIZE", "POSIXLY_CORRECT", "LC_ALL", "LC_NUMERIC", "LANG":
			default:
				cmd.Env = append(cmd.Env, e)
			}
		}
		cmd.Env = append(cmd.Env, "LC_ALL=C")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("du %s: %v", c.flag, err)
		}
		checked := 0
		for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
			size, name, ok := strings.Cut(line, "\t")
			if !ok {
				t.Fatalf("du %s: line %q", c.flag, line)
			}
			n, isFile := byName[name]
			if !isFile {
				n = total // the directory and the total line: the sum
			}
			if got := c.units.format(n); got != size {
				t.Errorf("%s of %d bytes: %q, GNU du writes %q", c.flag, n, got, size)
			}
			checked++
		}
		if checked != len(byName)+2 {
			t.Errorf("du %s: %d lines for %d files", c.flag, checked, len(byName))
		}
	}
}
