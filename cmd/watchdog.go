package cmd

// The mount's watchdog: a small process each mount daemon starts (this
// binary again, `esfs watchdog`, hidden), which aborts the mount's FUSE
// connection when the daemon dies without letting go of it.
//
// Why a process of its own. A dying daemon can do nothing for itself:
// SIGKILL (a user, the OOM killer) and a fatal error of the Go runtime
// (exit_group) end its threads where they stand. The kernel fails the
// mount's requests once the daemon's last descriptor of /dev/fuse is
// closed, which needs every thread gone, and a thread held in the kernel
// holds it for ever: an entry invalidation written to /dev/fuse waits for
// its directory's lock, which a process's lookup there holds while it
// waits for this daemon's answer (fs/fusectl.go). So does any death with
// a notification in flight at the wrong moment, whatever made the
// daemon die; making the daemon send no notification that can wait
// would need the kernel's help (it takes the lock). A watchdog outside
// the process sees the death and aborts the connection through fusectl:
// the held lookup fails (ECONNABORTED), the lock is free, the
// notification goes in, the last thread dies, and the processes using
// the mount get ENOTCONN, as after any kill -9.
//
// Not done in the daemon itself. No notification can be made safe from
// this: the kernel takes the directory's lock inside the write, and a
// lookup may be waiting in any directory when the daemon dies. A daemon
// that aborted its own connection once a notification had waited long
// would end a live mount whose request in that directory is merely slow
// (a lock waited for up to --lock-timeout, a cluster slow up to its
// timeout); a recall already logs a notification that waits past a
// second. A hard memory ceiling would kill, at a guessed size, a daemon
// the OOM killer might have spared, with its buffered writes: the soft
// limit (memoryLimit) stays, and a hard one is the service manager's
// (systemd's MemoryMax=), whose kill now ends the mount as cleanly as
// any other.
//
// Every daemon has a watchdog of its own, whichever way it was started
// (in the foreground, --daemon, mount(8) and fstab through the helper):
// serve starts it once mounted, before the mount is said to be ready.
//
// How it sees a death. It polls the daemon's /proc/PID/status (through
// a descriptor of /proc/PID, which never names another process once the
// daemon's number is reused) every watchdogPoll: the daemon is dying once
// its main thread has exited (a zombie while other threads remain: Go's
// main thread never exits on its own), a SIGKILL is pending (the kernel
// queues one on every thread of a process killed, and exit_group queues
// one on every other thread: a thread held in the kernel keeps it
// pending), or it is dumping core. Nothing else is a death: a daemon
// stopped (SIGSTOP, a test's freeze) or slow is left alone. A process that
// dies cleanly closes the watchdog's pipe first (below), which does as
// well. A poll, because a pidfd wakes only once every thread is gone
// (never, here), and the process events of the kernel's netlink connector,
// which would say that the main thread exited, need CAP_NET_ADMIN.
//
// What it holds. The abort file of the mount's connection, opened by the
// daemon (fs.OpenAbort; bound to that connection, so a late write never
// aborts another mount that got the same number), and the read end of a
// pipe from the daemon; never /dev/fuse (fs.Mount makes it close on
// exec), no cluster credentials (its environment is chosen), its working
// directory is /, and it is in a session of its own (a terminal's Ctrl-C
// is for the daemon). It ignores SIGINT, SIGTERM and SIGHUP, and ends
// with its daemon: a service manager stopping the daemon's unit waits for
// the daemon, not for it. As root it asks for the lowest OOM score, so
// that a memory limit's kill (of a whole cgroup, too) spares it.
//
// Ending. A daemon whose mount was unmounted writes "done" on the pipe and
// the watchdog exits without aborting anything (the connection has ended
// anyway). The pipe reaching its end means the daemon's descriptors were
// all closed, the process gone: the kernel has failed the mount's
// requests itself, and the abort (a no-op then) is for a /dev/fuse some
// other process might still hold. A watchdog that dies (killed) takes
// nothing with it: the daemon sees it end, says so in its log and starts
// another a second after the last start (see keep).

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/esfs/esfs/fs"
	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

const (
	watchdogCommand = "watchdog"
	// watchdogPoll is how often the watchdog looks at its daemon: about
	// the longest a process using the mount waits, once the daemon began
	// dying, before its call fails. Each look costs a wakeup: about 1 ms
	// of CPU a second at this rate (2 ms at 100ms), where an idle daemon
	// spends about 10.
	watchdogPoll = 250 * time.Millisecond
	// watchdogDone, written by the daemon on the pipe, says that the
	// mount has ended: nothing to watch.
	watchdogDone = "done\n"
	// abortFD is the watchdog's descriptor of the connection's abort file.
	abortFD = 3
)

func cmdWatchdog() *cli.Command {
	return &cli.Command{
		Name:      watchdogCommand,
		Hidden:    true,
		Usage:     "started by esfs mount: aborts the mount's FUSE connection if its daemon dies without letting go of it",
		ArgsUsage: "MOUNTPOINT",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "pid", Usage: "the mount daemon, this process's parent"},
			&cli.IntFlag{Name: "conn", Usage: "the mount's FUSE connection (for the log; the abort file is descriptor 3)"},
			&cli.StringFlag{Name: "log-level", Value: "info"},
			&cli.StringFlag{Name: "log-format", Value: "text"},
		},
		Action: runWatchdog,
	}
}

func runWatchdog(c *cli.Context) error {
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	_ = os.WriteFile("/proc/self/oom_score_adj", []byte("-1000"), 0) // root only
	log, err := logger(c.String("log-level"), c.String("log-format"))
	if sock := os.Getenv(daemonSyslogEnv); sock != "" {
		log, err = syslogLogger(sock, c.String("log-level"), c.String("log-format"))
	}
	if err != nil {
		return err
	}
	pid := c.Int("pid")
	log = log.With("watchdog", os.Getpid(), "pid", pid, "mountpoint", c.Args().First(), "conn", c.Int("conn"))
	abort := os.NewFile(abortFD, "abort")
	if pid <= 0 || !isAbortFile(abort) {
		return errors.New("watchdog: esfs mount starts it, with the daemon's pid and, on descriptor 3, the abort file of its FUSE connection")
	}
	daemon, err := os.OpenRoot("/proc/" + strconv.Itoa(pid))
	if os.Getppid() != pid {
		// Gone before its watchdog started (a child whose parent dies
		// gets another): nothing is served any more.
		endWatch(log, abort, "gone before its watchdog started")
		return nil
	}
	if err != nil {
		return fmt.Errorf("watchdog: cannot watch the mount daemon: %w", err)
	}
	defer daemon.Close()
	for {
		switch daemonSaid(int(watchdogPoll / time.Millisecond)) {
		case saidDone:
			return nil
		case pipeEnded:
			// The daemon's descriptors are closed: the kernel has failed
			// the mount's requests already (see the top of the file).
			_ = fs.Abort(abort)
			return nil
		}
		why := dying(daemon)
		if why == "" {
			continue
		}
		if daemonSaid(0) == saidDone {
			return nil // unmounted, then exited: said before it exited
		}
		endWatch(log, abort, why)
		return nil
	}
}

// isAbortFile reports whether f is a fusectl abort file (so that a
// watchdog started by hand writes nothing anywhere else).
func isAbortFile(f *os.File) bool {
	const fusectlMagic = 0x65735543 // FUSE_CTL_SUPER_MAGIC
	var st unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &st); err != nil || st.Type != fusectlMagic {
		return false
	}
	to, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	return filepath.Base(to) == "abort"
}

// endWatch aborts the connection of a daemon that can no longer serve
// its mount, and says so in the mount's log.
func endWatch(log *slog.Logger, abort *os.File, why string) {
	if err := fs.Abort(abort); err != nil {
		log.Error("mount daemon dying with its mount attached, and its FUSE connection could not be aborted: processes using the mount may wait until it is (echo 1 > /sys/fs/fuse/connections/CONN/abort)", "why", why, "err", err)
		return
	}
	log.Error("mount daemon dying with its mount attached: aborted its FUSE connection; processes using the mount get ENOTCONN until it is unmounted", "why", why)
}

type pipeNews int

const (
	saidNothing pipeNews = iota
	saidDone
	pipeEnded
)

// daemonSaid waits up to ms milliseconds for the daemon's word on the
// pipe (standard input).
func daemonSaid(ms int) pipeNews {
	fds := []unix.PollFd{{Fd: 0, Events: unix.POLLIN}}
	n, err := unix.Poll(fds, ms)
	if n <= 0 || err != nil {
		return saidNothing // EINTR too: the next round asks again
	}
	var buf [64]byte
	k, err := unix.Read(0, buf[:])
	switch {
	case k > 0 && strings.Contains(string(buf[:k]), strings.TrimSpace(watchdogDone)):
		return saidDone
	case k == 0 && err == nil:
		return pipeEnded
	}
	return saidNothing
}

// dying says why the daemon whose /proc directory is proc can no longer
// serve its mount, or "" while it can (see the top of the file).
func dying(proc *os.Root) string {
	b, err := proc.ReadFile("status")
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return "gone"
	} else if err != nil {
		return "" // nothing known: asked again at the next look
	}
	for _, line := range strings.Split(string(b), "\n") {
		key, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch key {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return "exiting: its main thread has ended"
			}
		case "SigPnd", "ShdPnd":
			if mask, err := strconv.ParseUint(v, 16, 64); err == nil && mask&(1<<(syscall.SIGKILL-1)) != 0 {
				return "killed: SIGKILL pending (a kill -9, the OOM killer, or a fatal error's exit)"
			}
		case "CoreDumping":
			if v == "1" {
				return "dumping core"
			}
		}
	}
	return ""
}

// watchdog is the daemon's side of its watchdog: it keeps one running
// until stop, starting another when one ends.
type watchdog struct {
	log   *slog.Logger
	args  []string
	abort *os.File
	stop  chan struct{} // closed by Stop
	ended chan struct{} // closed when keep returns

	mu      sync.Mutex // protects the fields below
	pipe    *os.File   // the running watchdog's standard input; nil between runs
	proc    *os.Process
	stopped bool
}

// startWatchdog starts the watchdog of this process's mount at mp (at
// tableMp in the mount table), which logs with the level and format
// given, and returns it once it runs. It returns nil and why when it
// cannot: then a death of this daemon with a thread held in the kernel
// hangs the mount until its connection is aborted by hand.
func startWatchdog(mp, tableMp, logLevel, logFormat string, log *slog.Logger) (*watchdog, error) {
	conn, err := fuseConnection(tableMp)
	if err != nil {
		return nil, err
	}
	abort, err := fs.OpenAbort(conn)
	if err != nil {
		return nil, err
	}
	w := &watchdog{log: log, abort: abort, stop: make(chan struct{}), ended: make(chan struct{}),
		args: []string{"esfs", watchdogCommand, "--pid", strconv.Itoa(os.Getpid()), "--conn", strconv.Itoa(conn),
			"--log-level", logLevel, "--log-format", logFormat, "--", mp}}
	started := make(chan struct{})
	go w.keep(started)
	<-started
	return w, nil
}

// keep runs the watchdog until Stop; started is closed once the first
// one was started (or failed to be).
func (w *watchdog) keep(started chan struct{}) {
	defer close(w.ended)
	defer w.abort.Close()
	// A watchdog that cannot run (it ends at once, again and again) is
	// started less and less often: a second after the last start, then
	// twice as long each time, up to a minute; one that ran a minute
	// resets that.
	delay := time.Second
	for {
		begun := time.Now()
		cmd, pipe, err := w.start()
		if started != nil {
			close(started)
			started = nil
		}
		if err != nil {
			w.log.Warn("cannot start the mount's watchdog; trying again", "err", err, "in", delay)
		} else {
			w.mu.Lock()
			stopped := w.stopped
			if !stopped {
				w.pipe, w.proc = pipe, cmd.Process
			}
			w.mu.Unlock()
			if stopped {
				_, _ = pipe.WriteString(watchdogDone)
			}
			err = cmd.Wait()
			w.mu.Lock()
			w.pipe, w.proc = nil, nil
			w.mu.Unlock()
			pipe.Close()
			select {
			case <-w.stop:
				return
			default:
			}
			w.log.Warn("the mount's watchdog ended: starting another", "watchdog", cmd.Process.Pid, "err", err)
		}
		if time.Since(begun) > time.Minute {
			delay = time.Second
		}
		select {
		case <-w.stop:
			return
		case <-time.After(time.Until(begun.Add(delay))):
		}
		delay = min(2*delay, time.Minute)
	}
}

// start starts one watchdog: this very binary (/proc/self/exe, even if a
// newer esfs replaced the file since), given the abort file and the read
// end of a pipe whose write end it returns.
func (w *watchdog) start() (*exec.Cmd, *os.File, error) {
	r, pipe, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer r.Close()
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: w.args, Dir: "/", Env: watchdogEnv(),
		Stdin: r, Stdout: os.Stderr, Stderr: os.Stderr, ExtraFiles: []*os.File{w.abort},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if err := cmd.Start(); err != nil {
		pipe.Close()
		return nil, nil, err
	}
	return cmd, pipe, nil
}

// watchdogEnv is the watchdog's environment: where the log goes, and the
// Go runtime's settings; nothing else of the daemon's (credentials may be
// there).
func watchdogEnv() []string {
	env := []string{"GOMAXPROCS=1"}
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case daemonSyslogEnv, "GORACE", "GODEBUG", "GOTRACEBACK", "TZ", "PATH":
			env = append(env, kv)
		}
	}
	return env
}

// Stop tells the watchdog that the mount has ended (it exits without
// aborting anything) and waits for it to exit.
func (w *watchdog) Stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.stopped = true
	pipe, proc := w.pipe, w.proc
	w.mu.Unlock()
	close(w.stop)
	if pipe != nil {
		_, _ = pipe.WriteString(watchdogDone)
	}
	select {
	case <-w.ended:
	case <-time.After(5 * time.Second):
		w.log.Warn("the mount's watchdog did not exit within 5s of the unmount: killing it")
		if proc != nil {
			_ = proc.Kill()
		}
		<-w.ended
	}
}

// fuseConnection is the number of the FUSE connection of the esfs mount
// at mp, as the mount table says (mp with its symbolic links resolved:
// the table names the directory the kernel mounted on).
func fuseConnection(mp string) (int, error) {
	m, ok, err := mountEntry(mp)
	switch {
	case err != nil:
		return 0, err
	case !ok || m.fstype != esfsType:
		return 0, fmt.Errorf("%s is not in the mount table as an esfs mount", mp)
	case m.minor < 0:
		return 0, fmt.Errorf("the mount table gives no device number for %s", mp)
	}
	return m.minor, nil
}

// resolvedMountpoint is mp with its symbolic links resolved, read before
// mounting (afterwards, resolving it would look into the mount itself).
func resolvedMountpoint(mp string) string {
	if r, err := filepath.EvalSymlinks(mp); err == nil {
		return r
	}
	return mp
}
