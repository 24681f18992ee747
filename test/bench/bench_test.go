// Package bench is esfs's performance suite: every case is timed against a
// floor measured in the same run, A/B interleaved, and reported as the
// ratio of the medians, so that a shared, noisy machine still gives
// comparable figures. It never fails on a figure; it writes a table.
//
// Run it with test/bench.sh (it starts what it needs). ESFS_BENCH_SCALE
// chooses the sizes: "full" is the sizes the performance targets are set
// for (directories of 100k entries, a 1 GiB copy: where per-entry costs and
// memory show), "quick" (the default) divides the largest by ten so that
// the whole suite takes minutes.
package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	mounttest.RemoveBinary()
	removeLoopback()
	os.Exit(code)
}

// row is one line of the results table.
type row struct {
	name, workload, floor string
	esfs, base            []time.Duration // per repetition, same order
	target                string
	limit                 float64 // the ratio must be <= limit; 0: no target
	absolute              string  // for cases without a floor (memory)
	met                   string  // for those: whether the target was met
	note                  string
}

func (r row) ratios() []float64 {
	out := make([]float64, len(r.esfs))
	for i := range r.esfs {
		out[i] = float64(r.esfs[i]) / float64(max(r.base[i], 1))
	}
	return out
}

func median[T int64 | float64 | time.Duration](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ratio is the median of the per-repetition ratios (each repetition runs
// both sides back to back, so this cancels slow phases of the machine).
func (r row) ratio() float64 { return median(r.ratios()) }

type suite struct {
	t     *testing.T
	scale string
	reps  int
	rows  []row
	peers []peerRow // the cases run on esfs and its peers
	// peerVersions names the versions of the peers, once a case mounted
	// them.
	peerVersions string
}

// ab runs a and b alternately, reps times, swapping which goes first each
// time, and returns their durations.
func (s *suite) ab(a, b func() time.Duration) (as, bs []time.Duration) {
	for i := 0; i < s.reps; i++ {
		if i%2 == 0 {
			as = append(as, a())
			bs = append(bs, b())
		} else {
			bs = append(bs, b())
			as = append(as, a())
		}
	}
	return as, bs
}

func (s *suite) add(r row) {
	s.rows = append(s.rows, r)
	if r.absolute != "" {
		s.t.Logf("%-18s %s", r.name, r.absolute)
		return
	}
	s.t.Logf("%-18s ratio %.2f  esfs %s  floor %s  (%d reps)", r.name, r.ratio(), fmtDur(median(r.esfs)), fmtDur(median(r.base)), len(r.esfs))
}

// n scales a size: full keeps it, quick divides sizes above 1000 by ten.
func (s *suite) n(full int) int {
	if s.scale == "full" || full <= 1000 {
		return full
	}
	return full / 10
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.1f µs", float64(d)/float64(time.Microsecond))
	}
}

func TestSuite(t *testing.T) {
	if os.Getenv("ESFS_BENCH") != "1" {
		t.Skip("the benchmark suite runs from test/bench.sh (ESFS_BENCH=1)")
	}
	s := &suite{t: t, scale: envOr("ESFS_BENCH_SCALE", "quick"), reps: 5}
	if v := os.Getenv("ESFS_BENCH_REPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("ESFS_BENCH_REPS=%q: want a positive number", v)
		}
		s.reps = n
	}
	only := os.Getenv("ESFS_BENCH_ONLY")
	started := time.Now()
	load := watchLoad()
	for _, c := range cases {
		named := strings.Contains(","+only+",", ","+c.group+",")
		if only != "" && !named || c.named && !named {
			continue
		}
		t.Run(c.group, func(t *testing.T) {
			sub := &suite{t: t, scale: s.scale, reps: s.reps}
			c.run(sub)
			s.rows = append(s.rows, sub.rows...)
			s.peers = append(s.peers, sub.peers...)
			if sub.peerVersions != "" {
				s.peerVersions = sub.peerVersions
			}
		})
	}
	run := runInfo{only: only, took: time.Since(started), load: load()}
	out := envOr("ESFS_BENCH_OUT", filepath.Join(mounttest.RepoRoot(), "test", "bench", "RESULTS.md"))
	old, _ := os.ReadFile(out)
	var main, peer *table
	if len(s.rows) > 0 {
		main = s.markdown(run)
	}
	if len(s.peers) > 0 {
		peer = s.peerMarkdown(run)
	}
	if err := os.WriteFile(out, []byte(compose(string(old), main, peer, only != "")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results written to %s", out)
}

// runInfo is what the headers say about the run.
type runInfo struct {
	only string
	took time.Duration
	load string // the machine's load averages around the run
}

// command is how to run what this run ran.
func (s *suite) command(only string) string {
	c := fmt.Sprintf("`ESFS_BENCH_SCALE=%s ESFS_BENCH_REPS=%d", s.scale, s.reps)
	if only != "" {
		c += " ESFS_BENCH_ONLY=" + only
	}
	if f := os.Getenv("ESFS_BENCH_ESFS_FLAGS"); f != "" {
		c += fmt.Sprintf(" ESFS_BENCH_ESFS_FLAGS=%q", f)
	}
	return c + " test/bench.sh`"
}

// loadAverage is the machine's 1-minute load average, from /proc.
func loadAverage() float64 {
	raw, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(raw)); len(f) > 0 {
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v
		}
	}
	return -1
}

// watchLoad samples the load average every ten seconds from now on; the
// function it returns stops and describes it (at the start, the highest,
// at the end): on a shared machine, the figures are only as good as the
// share the run had.
func watchLoad() func() string {
	start, highest := loadAverage(), loadAverage()
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(10 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				highest = max(highest, loadAverage())
			}
		}
	}()
	return func() string {
		close(done)
		<-stopped
		end := loadAverage()
		return fmt.Sprintf("%.2f at the start, at most %.2f, %.2f at the end", start, max(highest, end), end)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// markdown is the main table: esfs against its floors.
func (s *suite) markdown(run runInfo) *table {
	host, _ := os.Hostname()
	tb := &table{
		intro: fmt.Sprintf("# esfs benchmark results\n\n"+
			"Produced by %s on %s (%s, %d CPUs, %s), Elasticsearch %s, in %s; load average %s.\n\n"+
			"Ratio: median over the repetitions of esfs time / floor time, each repetition running both back to back (alternating which goes first). Spread: lowest and highest per-repetition ratio. Times are medians per repetition of the whole workload.\n\n",
			s.command(run.only), host, machine(), runtime.NumCPU(), runtime.Version(), esVersion(s.t), run.took.Round(time.Second), run.load),
		header: "| case | workload | floor (same run) | esfs | floor | ratio | spread | reps | target | met |\n" +
			"|---|---|---|---:|---:|---:|---|---:|---|---|\n",
	}
	for _, r := range s.rows {
		if r.absolute != "" {
			tb.rows = append(tb.rows, fmt.Sprintf("| %s | %s | — | %s | — | — | — | 1 | %s | %s |", r.name, r.workload, r.absolute, r.target, r.met))
			continue
		}
		rs := r.ratios()
		met := ""
		if r.limit > 0 {
			met = "no"
			if r.ratio() <= r.limit {
				met = "yes"
			}
		}
		tb.rows = append(tb.rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %.2f | %.2f–%.2f | %d | %s | %s |",
			r.name, r.workload, r.floor, fmtDur(median(r.esfs)), fmtDur(median(r.base)), r.ratio(),
			slices.Min(rs), slices.Max(rs), len(rs), r.target, met))
	}
	for _, r := range s.rows {
		if r.note != "" {
			tb.notes = append(tb.notes, fmt.Sprintf("- %s: %s", r.name, r.note))
		}
	}
	return tb
}

// machine describes the CPU, from /proc/cpuinfo.
func machine() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "model name") {
			if _, v, ok := strings.Cut(l, ":"); ok {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH
}
