package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// The data group: bytes in and out, and random reads,
// on esfs, JuiceFS + Redis and the loopback. esfs and JuiceFS write
// through one mount and read through a second one of the same filesystem,
// whose caches never saw the file; the loopback has one mount, and its
// reads come after the page cache is dropped like everyone's.
func benchData(s *suite) {
	t := s.t
	mib, randomReads := 128, 5000
	if s.scale == "full" {
		mib, randomReads = 512, 20000
	}
	// Incompressible, as most data that is large is.
	src := filepath.Join(t.TempDir(), "src")
	fh, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fh.ReadFrom(io.LimitReader(&prng{state: 29}, int64(mib)<<20)); err != nil {
		t.Fatal(err)
	}
	if err := fh.Close(); err != nil {
		t.Fatal(err)
	}

	f := mounttest.NewFS(t)
	flags := strings.Fields(os.Getenv("ESFS_BENCH_ESFS_FLAGS"))
	esfsW := f.MountAt(t, t.TempDir(), nil, flags...).Dir
	esfsR := f.MountAt(t, t.TempDir(), nil, flags...).Dir
	jv := newJuiceVolume(t)
	s.peerVersions = jv.versions
	juiceW, juiceR := jv.mount(t, "w"), jv.mount(t, "r")
	loop := mountLoopback(t)

	reps := [3]int{}
	side := func(k int, w, r string) func() []time.Duration {
		return func() []time.Duration {
			reps[k]++
			name := fmt.Sprintf("data-%d", reps[k])
			in := run(t, w, "dd", "if="+src, "of="+name, "bs=1M", "conv=fsync", "status=none")
			dropCaches(t)
			out := run(t, r, "dd", "if="+name, "of=/dev/null", "bs=1M", "status=none")
			dropCaches(t)
			// psync, one reader, offsets spread over the whole file; fio
			// drops the file's pages before it starts (invalidate=1).
			random := run(t, r, "fio", "--name=randread", "--filename="+name, "--rw=randread", "--bs=4k",
				"--ioengine=psync", fmt.Sprintf("--size=%dm", mib), fmt.Sprintf("--io_size=%d", randomReads*4096),
				"--randrepeat=1", "--output=/dev/null")
			if err := os.Remove(filepath.Join(w, name)); err != nil {
				t.Fatal(err)
			}
			return []time.Duration{in, out, random}
		}
	}
	res := rounds(s.reps, side(0, esfsW, esfsR), side(1, juiceW, juiceR), side(2, loop, loop))
	rows := []peerRow{
		{name: "dd in", ops: mib, unit: "MiB", workload: fmt.Sprintf("`dd bs=1M conv=fsync` of a %d MiB file in (incompressible)", mib)},
		{name: "dd out, other mount", ops: mib, unit: "MiB", workload: "`dd bs=1M` of that file out through a second mount (the loopback: the same), the page cache dropped"},
		{name: "random 4 KiB reads", ops: randomReads, workload: fmt.Sprintf("fio randread, psync, 4 KiB, %d reads over that file through the second mount, its pages dropped first (reads/s)", randomReads)},
	}
	for i, r := range rows {
		r.esfs, r.juice, r.loop = column(res[0], i), column(res[1], i), column(res[2], i)
		r.target, r.atLeast = "≥ 1 (aim 2)", 1
		s.addPeer(r)
	}
}
