package cmd

// The mount's daemon: its shutdown on a signal, the signals it watches,
// and running in the background (--daemon).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/esfs/esfs/fs"
	"github.com/urfave/cli/v2"
)

// shutdown ends a mount on a signal: it flushes and unmounts, and if the
// mount is busy (a process has its working directory or a file there) it
// detaches it and serves what is still open for at most grace, so that a
// signalled daemon always exits, in bounded time. Writes that reach it
// until it stops serving are made durable before it exits.
func shutdown(srv *fs.Server, done <-chan struct{}, mp string, grace time.Duration, log *slog.Logger) error {
	// One bound for both flushes: a cluster that is down costs it once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute+grace)
	defer cancel()
	detached, err := srv.Unmount(ctx)
	if err != nil {
		log.Error("unmounting", "mountpoint", mp, "err", err)
	}
	if detached {
		log.Warn("mount point busy: detached; serving the files still open there until they are closed, for at most the grace period",
			"mountpoint", mp, "grace", grace)
	}
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		log.Warn("grace period over: exiting; processes still using the detached mount now get ENOTCONN", "mountpoint", mp, "grace", grace)
	}
	if cerr := srv.Close(ctx); cerr != nil {
		log.Error("flushing buffered writes", "err", cerr)
		err = errors.Join(err, cerr)
	}
	if err != nil {
		return oneLine(err)
	}
	log.Info("unmounted", "mountpoint", mp)
	return nil
}

// signals follows SIGINT and SIGTERM for the whole life of a mount
// process. The first cancels ctx (ending a startup in progress) and is
// delivered on first; a second one ends the process at once, after
// detaching the mount, whatever is in progress.
type signals struct {
	ctx    context.Context
	cancel context.CancelFunc
	first  chan os.Signal
	sigs   chan os.Signal
	last   atomic.Pointer[func()] // run before exiting on a second signal
}

func watchSignals(parent context.Context, log *slog.Logger) *signals {
	s := &signals{first: make(chan os.Signal, 1), sigs: make(chan os.Signal, 2)}
	s.ctx, s.cancel = context.WithCancel(parent)
	signal.Notify(s.sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		sig, ok := <-s.sigs
		if !ok {
			return
		}
		s.cancel()
		s.first <- sig
		if sig, ok = <-s.sigs; !ok {
			return
		}
		log.Warn("second signal: exiting at once; data written but not yet flushed or closed by its programs is lost", "signal", sig.String())
		if f := s.last.Load(); f != nil {
			(*f)()
		}
		os.Exit(1)
	}()
	return s
}

// onSecond sets what a second signal does before the process exits.
func (s *signals) onSecond(f func()) { s.last.Store(&f) }

// end stops following signals.
func (s *signals) end() {
	signal.Stop(s.sigs)
	close(s.sigs)
	s.cancel()
}

// explain turns an error of a startup interrupted by a signal into one
// line saying so; other errors pass.
func (s *signals) explain(err error) error {
	if s.ctx.Err() == nil {
		return err
	}
	return errors.New("interrupted by a signal while starting: nothing was mounted")
}

// daemonize starts this program again in the background, without
// --daemon, and waits until the child reports that it mounted or failed.
// The child keeps none of our stdio: a caller reading our output through a
// pipe must see it close when we exit. Nor does it get our secrets where
// other processes read them: its URLs are bare in its command line and
// environment, and the credentials come through a pipe (credentials.go).
//
// quiet, for mount(8)'s helper, prints nothing once mounted: mount(8) and
// its helpers say nothing on success, and scripts compare their output.
// The log's place is still said by the log itself, by esfs status and by
// the mount's esfs.mount attribute.
func daemonize(c *cli.Context, mp, index, logFile string, quiet bool) error {
	logTo, err := openDaemonLog(index, mp, logFile)
	if err != nil {
		return err
	}
	defer logTo.out.Close()
	creds, err := credentialsPipe(c)
	if err != nil {
		return err
	}
	defer creds.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, daemonArgs(invocation)...)
	cmd.Env = append(daemonEnviron(os.Environ()), daemonEnv+"=3", daemonCredentialsEnv+"="+strconv.Itoa(daemonCredentialsFD),
		daemonSyslogEnv+"="+logTo.syslog, daemonLogEnv+"="+logTo.where)
	cmd.ExtraFiles = []*os.File{w, creds} // 3 and 4
	cmd.Stdin = nil
	cmd.Stdout = logTo.out
	cmd.Stderr = logTo.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	creds.Close()
	msg, _ := io.ReadAll(r)
	r.Close()
	text := strings.TrimSpace(string(msg))
	if text == "ok" {
		if !quiet {
			fmt.Printf("mounted %s (pid %d); its log: %s\n", mp, cmd.Process.Pid, logTo.where)
		}
		return nil
	}
	_ = cmd.Wait()
	if text == "" {
		return fmt.Errorf("the mount process exited before mounting %s", mp)
	}
	return errors.New(text)
}

// reportReady tells a waiting --daemon parent the outcome, once.
// Under delegations the kernel is told an answer for as long as
// delegatedTimeout, and only when a delegation covers it: a recall
// invalidates it first, so nothing bounds it but the delegation. What no
// delegation covers is told for 1 ns whatever the flags say (see
// fs.uncached). Without delegations the timeouts are the staleness bound
// another mount's change has, and stay short.
const (
	delegatedTimeout     = time.Hour
	delegatedTimeoutText = "1s, and 1h for what a delegation covers (at most the lease left)"
)
