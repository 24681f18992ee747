package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	neturl "net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/fs"
	"github.com/esfs/esfs/fs/vfs"
	"github.com/esfs/esfs/locking"
	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// daemonFD is the descriptor on which a --daemon child reports readiness.
const daemonEnv = "ESFS_DAEMON_READY_FD"

func cmdMount() *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount a filesystem; runs until unmounted or signalled",
		ArgsUsage: "MOUNTPOINT",
		Description: `As mount(8)'s helper (/sbin/mount.fuse.esfs, a symlink to esfs: mount -t
fuse.esfs INDEX DIR -o OPTIONS, and fstab lines of type fuse.esfs) it
mounts in the background and, as mount(8), prints nothing once mounted;
esfs status and the mount's esfs.mount attribute (getfattr -n esfs.mount
DIR) say its pid and where it logs. mount -o remount,ro DIR (or rw,
noexec, noatime...) changes the kernel's flags of a live mount; the
options of esfs itself hold until it is unmounted, and a remount that
would change one is refused, as is rw for a mount made read-only.`,
		Flags: append(esFlags(), []cli.Flag{
			&cli.BoolFlag{Name: "read-only", Aliases: []string{"ro"}, EnvVars: []string{"ESFS_READ_ONLY"}, Usage: "mount read-only"},
			&cli.BoolFlag{Name: "allow-other", EnvVars: []string{"ESFS_ALLOW_OTHER"}, Usage: "let other users access the mount (needs user_allow_other in /etc/fuse.conf unless root)"},
			&cli.DurationFlag{Name: "attr-timeout", Value: time.Second, DefaultText: delegatedTimeoutText, EnvVars: []string{"ESFS_ATTR_TIMEOUT"}, Usage: "how long the kernel caches attributes"},
			&cli.DurationFlag{Name: "entry-timeout", Value: time.Second, DefaultText: delegatedTimeoutText, EnvVars: []string{"ESFS_ENTRY_TIMEOUT"}, Usage: "how long the kernel caches names"},
			&cli.DurationFlag{Name: "negative-timeout", Value: time.Second, DefaultText: delegatedTimeoutText, EnvVars: []string{"ESFS_NEGATIVE_TIMEOUT"}, Usage: "how long the kernel caches missing names"},
			&cli.DurationFlag{Name: "cache-ttl", Value: time.Second, EnvVars: []string{"ESFS_CACHE_TTL"}, Usage: "how long the daemon caches metadata (0 disables)"},
			&cli.IntFlag{Name: "cache-size", Value: 64, EnvVars: []string{"ESFS_CACHE_SIZE"}, Usage: "daemon metadata cache size in MiB"},
			&cli.IntFlag{Name: "names-kept", Value: vfs.DefaultNamesKept, EnvVars: []string{"ESFS_NAMES_KEPT"}, Usage: "with --delegations, how many names of delegated directories the mount keeps known at once, and lets the kernel keep (each costs about 1 KiB here and in the kernel); past it, those of the directories used least recently are forgotten, to be read again when next used (the directory in use keeps up to 100,000)"},
			&cli.IntFlag{Name: "data-cache-size", Value: vfs.DefaultDataCache >> 20, EnvVars: []string{"ESFS_DATA_CACHE_SIZE"}, Usage: "how many MiB of file contents the daemon keeps after reading them, for rereads, of open files and of files closed since (each chunk checked against its stored version when the file is opened again); 0 keeps only what open files read ahead"},
			&cli.BoolFlag{Name: "delegations", Value: true, EnvVars: []string{"ESFS_DELEGATIONS"}, Usage: "hold read delegations on directories: names and listings are answered from memory until another mount changes the directory, which recalls them first (--delegations=false: cache for the timeouts below instead)"},
			&cli.BoolFlag{Name: "write-delegations", Value: true, EnvVars: []string{"ESFS_WRITE_DELEGATIONS"}, Usage: "directories this mount made or changes alone are written in memory and flushed as one atomic batch every --flush-interval, and on fsync, unmount, or when another mount looks in (needs --delegations, off with it; a crash loses at most the last interval's calls, never what fsync returned)"},
			&cli.DurationFlag{Name: "flush-interval", Value: vfs.DefaultFlushInterval, EnvVars: []string{"ESFS_FLUSH_INTERVAL"}, Usage: "with --write-delegations, how long a call made in memory may wait for its flush"},
			&cli.StringFlag{Name: "locking", Value: "tree", EnvVars: []string{"ESFS_LOCKING"}, Usage: "cross-mount locking strategy: tree, document or global"},
			&cli.DurationFlag{Name: "lease", Value: 10 * time.Second, EnvVars: []string{"ESFS_LEASE"}, Usage: "session lease: a mount silent this long (plus half of it) is declared dead and its work recovered"},
			&cli.StringFlag{Name: "nudge-addr", Value: "auto", EnvVars: []string{"ESFS_NUDGE_ADDR"}, Usage: "UDP address (host:port) this mount takes nudges on: other mounts tell it at once when they recall its delegations or release a lock it waits for, instead of waiting for its next poll. auto: any port, published with the address this machine reaches Elasticsearch from; off: poll only"},
			&cli.DurationFlag{Name: "lock-timeout", Value: 30 * time.Second, EnvVars: []string{"ESFS_LOCK_TIMEOUT"}, Usage: "how long an operation waits for locks before failing with EAGAIN"},
			&cli.BoolFlag{Name: "debug", EnvVars: []string{"ESFS_DEBUG"}, Usage: "log every FUSE request (implies --log-level debug)"},
			&cli.StringFlag{Name: "log-level", Value: "info", EnvVars: []string{"ESFS_LOG_LEVEL"}, Usage: "debug, info, warn or error"},
			&cli.StringFlag{Name: "log-format", Value: "text", EnvVars: []string{"ESFS_LOG_FORMAT"}, Usage: "text (key=value) or json"},
			&cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"ESFS_METRICS_ADDR"}, Usage: "serve Prometheus metrics (/metrics) on this host:port (off by default)"},
			&cli.BoolFlag{Name: "pprof", EnvVars: []string{"ESFS_PPROF"}, Usage: "with --metrics-addr, serve Go's profiles there too (/debug/pprof/: heap, goroutines, CPU, trace; never the command line): off by default, as whoever reaches the address may take them, and a CPU profile or trace costs the mount while it runs"},
			&cli.DurationFlag{Name: "shutdown-grace", Value: 10 * time.Second, EnvVars: []string{"ESFS_SHUTDOWN_GRACE"}, Usage: "on SIGTERM or SIGINT, how long a busy mount (detached at once) keeps serving the files still open before the daemon exits; a second signal exits at once"},
			&cli.StringFlag{Name: "subdir", EnvVars: []string{"ESFS_SUBDIR"}, Usage: "mount this directory of the filesystem (a path from its root, such as /projects/a) instead of the whole filesystem; it must exist"},
			&cli.BoolFlag{Name: "nonempty", EnvVars: []string{"ESFS_NONEMPTY"}, Usage: "mount over a directory that is not empty, hiding its files until unmounted (refused otherwise)"},
			&cli.BoolFlag{Name: "daemon", Aliases: []string{"d"}, Usage: "detach once mounted; the exit status says whether it mounted"},
			&cli.StringFlag{Name: "log-file", EnvVars: []string{"ESFS_LOG_FILE"}, Usage: "with --daemon, append the daemon's log here; without it, the log goes to syslog (the system journal) through " + defaultSyslogSocket + " when that exists (" + syslogSocketEnv + " names another socket), else to " + defaultLogDir + "/INDEX@MOUNTPOINT.log (" + logDirEnv + " names another directory); esfs mount --daemon says where once mounted, and esfs status says it of every mount"},
		}...),
		Action: runMount,
	}
}

func runMount(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("mount needs exactly one argument, the mount point")
	}
	if err := checkMountFlags(c); err != nil {
		return err
	}
	for _, d := range []string{"attr-timeout", "entry-timeout", "negative-timeout", "cache-ttl"} {
		if c.Duration(d) < 0 {
			return usagef("--%s must not be negative", d)
		}
	}
	if c.Int("cache-size") < 1 {
		return usagef("--cache-size must be at least 1 (MiB)")
	}
	if c.Int("names-kept") < 1000 {
		return usagef("--names-kept must be at least 1000")
	}
	if c.Int("data-cache-size") < 0 || c.Int("data-cache-size") > 1<<20 {
		return usagef("--data-cache-size must be between 0 and 1048576 (MiB)")
	}
	if _, err := locking.NewStrategy(c.String("locking")); err != nil {
		return usagef("--locking %q: want tree, document or global", c.String("locking"))
	}
	if c.Duration("shutdown-grace") < 0 {
		return usagef("--shutdown-grace must not be negative")
	}
	if c.IsSet("write-delegations") && c.Bool("write-delegations") && !c.Bool("delegations") {
		return usagef("--write-delegations needs --delegations (a directory written in memory must be recalled before others read it)")
	}
	if c.Duration("flush-interval") <= 0 {
		return usagef("--flush-interval must be positive, such as 200ms")
	}
	if _, err := subdirPath(c.String("subdir")); err != nil {
		return err
	}
	mp, err := filepath.Abs(c.Args().First())
	if err != nil {
		return err
	}
	if err := checkMountpoint(mp, c.Bool("nonempty")); err != nil {
		return err
	}
	if _, err := logger(c.String("log-level"), c.String("log-format")); err != nil {
		return err
	}
	if c.Bool("daemon") && os.Getenv(daemonEnv) == "" {
		return daemonize(c, mp, c.String("index"), c.String("log-file"), c.App.Metadata[helperCallKey] == true)
	}
	err = serve(c, mp)
	if fd := os.Getenv(daemonEnv); fd != "" && err != nil {
		reportReady(err)
	}
	return err
}

func serve(c *cli.Context, mp string) error {
	level := c.String("log-level")
	if c.Bool("debug") {
		level = "debug"
	}
	log, err := logger(level, c.String("log-format"))
	if sock := os.Getenv(daemonSyslogEnv); sock != "" {
		log, err = syslogLogger(sock, level, c.String("log-format"))
	}
	if err != nil {
		return err
	}
	// Signals are handled from the start: with their default action, a
	// SIGTERM while mounting would kill the process with its mount half
	// made.
	stop := watchSignals(c.Context, log)
	defer stop.end()
	reg := newRegistry()
	if addr := c.String("metrics-addr"); addr != "" {
		stop, err := serveMetrics(addr, c.Bool("pprof"), reg, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	ctx, cancel := context.WithTimeout(stop.ctx, 2*c.Duration("es-timeout"))
	st, err := openStore(ctx, c, log, true, store.NewMetrics(reg))
	if err != nil {
		cancel()
		return stop.explain(err)
	}
	defer st.Close()
	_, err = st.GetDentry(ctx, "/")
	cancel()
	if err != nil && stop.ctx.Err() != nil {
		return stop.explain(err)
	}
	if err != nil {
		return explain(fmt.Errorf("filesystem %q has no root directory (run esfs mkfs --index %s): %w", st.Prefix(), st.Prefix(), err), c.String("es-url"))
	}
	// A soft limit on the heap: the metadata cache, plus room for the
	// write buffers and the bulk bodies of one flush, plus the file
	// contents kept (memoryLimit follows them). Without it the garbage of
	// a large copy (data chunks turned into JSON) lets the heap reach
	// several times what is live before a collection.
	memLimit := os.Getenv("GOMEMLIMIT") == ""
	baseLimit := int64(c.Int("cache-size"))<<20 + 64<<20
	if memLimit {
		debug.SetMemoryLimit(baseLimit)
	}
	ch, err := cache.New(int64(c.Int("cache-size"))<<20, c.Duration("cache-ttl"), c.Duration("cache-ttl"))
	if err != nil {
		return err
	}
	defer ch.Close()
	ch.Register(reg)
	ctx, cancel = context.WithTimeout(stop.ctx, 2*c.Duration("es-timeout"))
	b := thisBuild()
	nudgeListen, nudgeHost, err := nudgeAddr(c.String("nudge-addr"), c.String("es-url"))
	if err != nil {
		cancel()
		return err
	}
	co, err := locking.Start(ctx, st, locking.Config{Strategy: c.String("locking"), Lease: c.Duration("lease"),
		LockTimeout: c.Duration("lock-timeout"), Mount: mp, Log: log,
		Metrics: locking.NewMetrics(reg), Stats: func() map[string]float64 { return statsOf(reg) },
		Build: b.String(), Options: mountOptions(c), NudgeListen: nudgeListen, NudgeHost: nudgeHost})
	cancel()
	if err != nil && stop.ctx.Err() != nil {
		return stop.explain(err)
	}
	if err != nil {
		return explain(err, c.String("es-url"))
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.Duration("es-timeout"))
		defer cancel()
		if err := co.Close(ctx); err != nil {
			log.Warn("ending the session", "err", err)
		}
	}()
	subdir, _ := subdirPath(c.String("subdir")) // checked by runMount
	root := store.Dentry{Path: "/", Ino: store.RootIno}
	if subdir != "/" {
		ctx, cancel = context.WithTimeout(stop.ctx, 2*c.Duration("es-timeout"))
		root, err = subdirRoot(ctx, st, co, subdir)
		cancel()
		if err != nil {
			return stop.explain(explain(err, c.String("es-url")))
		}
	}
	core := vfs.New(st, co, ch, vfs.Options{
		ReadOnly:         c.Bool("read-only"),
		AllowOther:       c.Bool("allow-other"),
		AttrTimeout:      kernelTimeout(c, "attr-timeout"),
		EntryTimeout:     kernelTimeout(c, "entry-timeout"),
		NegativeTimeout:  kernelTimeout(c, "negative-timeout"),
		CacheTTL:         c.Duration("cache-ttl"),
		DataCache:        dataCache(c.Int("data-cache-size")),
		NamesKept:        c.Int("names-kept"),
		Delegations:      c.Bool("delegations"),
		WriteDelegations: c.Bool("write-delegations") && c.Bool("delegations"),
		FlushInterval:    c.Duration("flush-interval"),
		LockTimeout:      c.Duration("lock-timeout"),
		Debug:            c.Bool("debug"),
		Logger:           log,
		FsName:           fsName(st.Prefix(), root.Path),
		Root:             root.Path,
		RootIno:          root.Ino,
		Metrics:          vfs.NewMetrics(reg),
	})
	// The mount table names the directory the kernel mounted on; resolved
	// now, since afterwards resolving mp would look into the mount.
	tableMp := resolvedMountpoint(mp)
	srv, err := fs.Mount(mp, core, reg, aboutMount(c))
	if err != nil {
		return oneLine(err)
	}
	if memLimit {
		go memoryLimit(stop.ctx, baseLimit, core)
	}
	stop.onSecond(func() { _ = fs.Unmount(mp, true) })
	// Watched from before the mount is said to be ready.
	wd, wdErr := startWatchdog(mp, tableMp, level, c.String("log-format"), log)
	// The first line of a mount's log (but for --metrics-addr's): which
	// esfs serves what. A mount that fails logs nothing before its error,
	// which is then the one line it prints.
	log.Info("mounted", "index", st.Prefix(), "subdir", root.Path, "mountpoint", mp, "pid", os.Getpid(),
		"version", b.Version, "revision", b.Revision, "go", b.GoVersion)
	if wdErr != nil {
		log.Warn("no watchdog for this mount: if this daemon dies with one of its threads held in the kernel, the mount and the processes using it wait until its FUSE connection is aborted by hand", "err", wdErr)
	}
	reportReady(nil)

	done := make(chan struct{})
	go func() { srv.Wait(); close(done) }()
	select {
	case <-done:
		// Unmounted from outside (umount): what is still pending in
		// memory lands before the session ends.
		wd.Stop()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.Close(ctx); err != nil {
			log.Error("flushing after unmount", "err", err)
			return oneLine(err)
		}
		log.Info("unmounted", "mountpoint", mp)
		return nil
	case s := <-stop.first:
		log.Info("signal: unmounting", "signal", s.String(), "mountpoint", mp)
	}
	err = shutdown(srv, done, mp, c.Duration("shutdown-grace"), log)
	select {
	case <-done:
		wd.Stop()
	default:
		// Exiting with the mount detached and still in use: its processes
		// get ENOTCONN once this process is gone; the watchdog sees to it
		// should a thread of ours be held in the kernel meanwhile.
	}
	return err
}

// mountOptions are the flags a mount runs with that matter to an operator,
// as they take effect (a write delegation needs delegations; the kernel
// timeouts are those of the consistency model when not given), for its
// session document: `esfs status` shows which mount runs what.
func mountOptions(c *cli.Context) map[string]string {
	writeDeleg := c.Bool("write-delegations") && c.Bool("delegations")
	o := map[string]string{
		"read-only":         fmt.Sprint(c.Bool("read-only")),
		"allow-other":       fmt.Sprint(c.Bool("allow-other")),
		"delegations":       fmt.Sprint(c.Bool("delegations")),
		"write-delegations": fmt.Sprint(writeDeleg),
		"locking":           c.String("locking"),
		"lease":             c.Duration("lease").String(),
		"lock-timeout":      c.Duration("lock-timeout").String(),
		"cache-ttl":         c.Duration("cache-ttl").String(),
		"cache-size":        fmt.Sprintf("%dMiB", c.Int("cache-size")),
		"data-cache-size":   fmt.Sprintf("%dMiB", c.Int("data-cache-size")),
		"names-kept":        fmt.Sprint(c.Int("names-kept")),
		"attr-timeout":      kernelTimeout(c, "attr-timeout").String(),
		"entry-timeout":     kernelTimeout(c, "entry-timeout").String(),
		"negative-timeout":  kernelTimeout(c, "negative-timeout").String(),
		"es-timeout":        c.Duration("es-timeout").String(),
		"nudge-addr":        c.String("nudge-addr"),
	}
	if writeDeleg {
		o["flush-interval"] = c.Duration("flush-interval").String()
	}
	if v, ok := c.Value("subdir").(string); ok && v != "" {
		o["subdir"] = v // a mount of part of the tree, where supported
	}
	o["log"] = logPlace() // shown on a line of its own
	return o
}

// mountOptionOrder is the order in which `esfs status` lists the options:
// what changes what the mount may do first, then its caches and timeouts.
func mountOptionOrder() []string {
	return []string{"read-only", "subdir", "delegations", "write-delegations", "flush-interval", "locking",
		"lease", "lock-timeout", "cache-ttl", "cache-size", "data-cache-size", "names-kept", "attr-timeout", "entry-timeout", "negative-timeout", "es-timeout", "nudge-addr", "allow-other"}
}

// memoryLimit keeps the heap's soft limit at base plus what the mount
// keeps now (file contents, delegated names: vfs.Mount.KeptMemory), until
// ctx ends: a fixed limit with room for the whole --data-cache-size and
// --names-kept would let a copy's garbage grow into room the caches do
// not use, and one without them would have the collector run without end
// once they fill (it took 62% of the daemon's time listing a directory of
// 100,000 from memory).
func memoryLimit(ctx context.Context, base int64, core *vfs.Mount) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	set := base
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// In steps of 8 MiB: no call for every chunk.
		if want := base + core.KeptMemory()&^(8<<20-1); want != set {
			debug.SetMemoryLimit(want)
			set = want
		}
	}
}

// dataCache is vfs.Options.DataCache for --data-cache-size MiB (0: none).
func dataCache(mib int) int64 {
	if mib == 0 {
		return -1
	}
	return int64(mib) << 20
}

// kernelTimeout is the kernel cache timeout flag name asks for: the one
// given, else the default of the mount's consistency model.
func kernelTimeout(c *cli.Context, name string) time.Duration {
	if !c.IsSet(name) && c.Bool("delegations") {
		return delegatedTimeout
	}
	return c.Duration(name)
}

func reportReady(err error) {
	fdStr := os.Getenv(daemonEnv)
	if fdStr == "" {
		return
	}
	os.Unsetenv(daemonEnv)
	f := os.NewFile(3, "ready")
	if f == nil {
		return
	}
	defer f.Close()
	if err != nil {
		fmt.Fprintln(f, err.Error())
		return
	}
	fmt.Fprintln(f, "ok")
}

func cmdUmount() *cli.Command {
	return &cli.Command{
		Name:      "umount",
		Aliases:   []string{"unmount"},
		Usage:     "unmount a mounted esfs filesystem (refuses any other kind of mount)",
		ArgsUsage: "MOUNTPOINT",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "lazy", Aliases: []string{"l", "z"}, Usage: "detach now, clean up when no longer busy"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usagef("umount needs exactly one argument, the mount point")
			}
			// Not resolved through the filesystem: a hung mount must not
			// hang its own unmount.
			mp, err := filepath.Abs(c.Args().First())
			if err != nil {
				return err
			}
			m, ok, err := mountEntry(mp)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s is not mounted: it is not a mount point", mp)
			}
			if m.fstype != esfsType {
				return fmt.Errorf("%s is a %s mount (source %s), not esfs: not unmounting it", mp, m.fstype, m.source)
			}
			if err := fs.Unmount(mp, c.Bool("lazy")); errors.Is(err, syscall.EBUSY) {
				return fmt.Errorf("%s is busy (a process has files open or its working directory there; --lazy detaches it now)", mp)
			} else if err != nil {
				return oneLine(err)
			}
			// Wait for the kernel to drop it, so that the caller can reuse the
			// directory as soon as we return.
			for i := 0; i < 100; i++ {
				if m, _ := isMounted(mp); !m {
					return nil
				}
				time.Sleep(50 * time.Millisecond)
			}
			return fmt.Errorf("%s is still mounted", mp)
		},
	}
}

// esfsType is the filesystem type of esfs mounts in the mount table.
const esfsType = "fuse.esfs"

// nudgeAddr is where --nudge-addr (flag) says to listen for nudges, and
// the host to publish (empty: the listening one). auto listens on every
// interface, on any port, and publishes the address this machine reaches
// the cluster from (esURL's host): what other mounts of the cluster can
// most likely reach too. A host given but unspecified (":7000",
// "0.0.0.0:7000") is published the same way.
func nudgeAddr(flag, esURL string) (listen, host string, err error) {
	switch flag {
	case "off", "":
		return "", "", nil
	case "auto":
		flag = ":0"
	}
	h, port, err := net.SplitHostPort(flag)
	if err != nil {
		return "", "", usagef("--nudge-addr %q: want host:port, auto or off (%v)", flag, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", "", usagef("--nudge-addr %q: the port must be a number up to 65535", flag)
	}
	if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
		return flag, h, nil
	}
	return flag, routeTo(esURL), nil
}

// routeTo returns this machine's address on the way to the host of url
// (a UDP socket's local address once connected: no packet is sent), or
// empty if there is none.
func routeTo(url string) string {
	u, err := neturl.Parse(strings.Split(url, ",")[0])
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "9200"
	}
	c, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return ""
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP.String()
}
