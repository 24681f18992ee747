package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Where a --daemon mount logs when --log-file is not given: nobody reads
// its stderr, and a daemon that dies must leave its reasons where a user
// looks. The system's syslog socket when there is one (on systemd
// machines it is the journal's), else a file per mount under
// /var/log/esfs. The environment can point both elsewhere.
const (
	defaultSyslogSocket = "/dev/log"
	syslogSocketEnv     = "ESFS_SYSLOG_SOCKET"
	defaultLogDir       = "/var/log/esfs"
	logDirEnv           = "ESFS_LOG_DIR"
	// daemonSyslogEnv tells a --daemon child to send its log to syslog
	// through this socket.
	daemonSyslogEnv = "ESFS_DAEMON_SYSLOG"
	// daemonLogEnv tells a --daemon child where its log goes, in words
	// (daemonLog.where), for esfs status and its esfs.mount attribute.
	daemonLogEnv = "ESFS_DAEMON_LOG"
)

// logPlace says where this mount's log goes: what a --daemon parent
// chose, else the mount's standard error (a mount in the foreground).
func logPlace() string {
	if w := os.Getenv(daemonLogEnv); w != "" {
		return w
	}
	return "stderr"
}

// daemonLog is where a --daemon child's output goes.
type daemonLog struct {
	out    *os.File // the child's stdout and stderr
	syslog string   // the syslog socket, when the log goes there
	where  string   // for the user
}

// openDaemonLog picks and opens the log of a --daemon child mounting index
// at mp: logFile if given, else syslog, else a file named after the index
// and the mount point.
func openDaemonLog(index, mp, logFile string) (daemonLog, error) {
	if logFile != "" {
		f, err := os.OpenFile(logFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			var perr *os.PathError
			if errors.As(err, &perr) {
				err = perr.Err // the path is said once
			}
			return daemonLog{}, fmt.Errorf("--log-file %s: cannot open it for appending: %w", logFile, err)
		}
		return daemonLog{out: f, where: logFile}, nil
	}
	sock := os.Getenv(syslogSocketEnv)
	if sock == "" {
		sock = defaultSyslogSocket
	}
	if st, err := os.Stat(sock); err == nil && st.Mode().Type() == os.ModeSocket {
		// The child's stdout and stderr go to syslog too, as raw lines: a
		// panic or a fatal error of the runtime is written there.
		if conn, err := dialSyslog(sock); err == nil {
			f, err := conn.(interface{ File() (*os.File, error) }).File()
			conn.Close()
			if err == nil {
				return daemonLog{out: f, syslog: sock, where: "syslog (" + sock + ")"}, nil
			}
		}
	}
	dir := os.Getenv(logDirEnv)
	if dir == "" {
		dir = defaultLogDir
	}
	name := index + "@" + escapePath(mp) + ".log"
	f, err := openLogIn(dir, name)
	if err != nil && os.Getenv(logDirEnv) == "" && os.Geteuid() != 0 {
		// A user who may not write /var/log: their own state directory.
		if state, serr := userStateDir(); serr == nil {
			dir = filepath.Join(state, "esfs")
			f, err = openLogIn(dir, name)
		}
	}
	if err != nil {
		return daemonLog{}, fmt.Errorf("no syslog at %s, and the daemon's log cannot be written: %v (give --log-file)", sock, err)
	}
	return daemonLog{out: f, where: f.Name()}, nil
}

func openLogIn(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	return os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
}

// userStateDir is $XDG_STATE_HOME, by default ~/.local/state.
func userStateDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".local", "state"), nil
}

// escapePath names a path in one file name component, as systemd-escape
// --path does: "/" becomes "-", and every byte but letters, digits, ':',
// '_' and '.' (not first) is written \xNN, so that no two paths share a
// name. "/" itself is "-".
func escapePath(p string) string {
	p = strings.Trim(filepath.Clean(p), "/")
	if p == "" {
		return "-"
	}
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '/':
			b.WriteByte('-')
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == ':', c == '_', c == '.' && i > 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, `\x%02x`, c)
		}
	}
	return b.String()
}

// dialSyslog connects to a local syslog socket: datagram, or stream as
// some syslog daemons listen.
func dialSyslog(sock string) (net.Conn, error) {
	c, err := net.Dial("unixgram", sock)
	if err == nil {
		return c, nil
	}
	if c, serr := net.Dial("unix", sock); serr == nil {
		return c, nil
	}
	return nil, err
}

// syslogConn sends messages to a local syslog socket in the format of
// syslog(3), "<PRI>Mmm dd hh:mm:ss esfs[PID]: MSG", reconnecting once when
// a send fails (the syslog daemon restarted).
type syslogConn struct {
	sock string
	mu   sync.Mutex // protects conn
	conn net.Conn
}

// Severities of syslog(3), with the daemon facility.
const (
	facilityDaemon = 3 << 3
	sevErr         = 3
	sevWarning     = 4
	sevInfo        = 6
	sevDebug       = 7
)

func (c *syslogConn) send(severity int, msg []byte) error {
	msg = []byte(strings.TrimRight(string(msg), "\n"))
	line := fmt.Appendf(nil, "<%d>%s esfs[%d]: %s", facilityDaemon|severity, time.Now().Format(time.Stamp), os.Getpid(), msg)
	c.mu.Lock()
	defer c.mu.Unlock()
	var err error
	for try := 0; try < 2; try++ {
		if c.conn == nil {
			if c.conn, err = dialSyslog(c.sock); err != nil {
				return err
			}
		}
		out := line
		if c.conn.LocalAddr().Network() == "unix" {
			out = append(out, '\n') // a stream: one message per line
		}
		if _, err = c.conn.Write(out); err == nil {
			return nil
		}
		c.conn.Close()
		c.conn = nil
	}
	return err
}

// severityWriter writes each slog record as one syslog message.
type severityWriter struct {
	c        *syslogConn
	severity int
}

func (w severityWriter) Write(p []byte) (int, error) {
	if err := w.c.send(w.severity, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// syslogLogger is the structured log of a --daemon child, to syslog
// through sock, each record with the severity of its level.
func syslogLogger(sock, level, format string) (*slog.Logger, error) {
	c := &syslogConn{sock: sock}
	var h severityHandler
	for i, sev := range []int{sevDebug, sevInfo, sevWarning, sevErr} {
		var err error
		// syslog stamps each message: no time attribute.
		if h.by[i], err = newHandler(severityWriter{c, sev}, level, format, dropTime); err != nil {
			return nil, err
		}
	}
	return slog.New(h), nil
}

func dropTime(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

// severityHandler hands each record to the handler of its level's
// severity: debug, info, warn, error.
type severityHandler struct{ by [4]slog.Handler }

func (h severityHandler) pick(l slog.Level) slog.Handler {
	switch {
	case l >= slog.LevelError:
		return h.by[3]
	case l >= slog.LevelWarn:
		return h.by[2]
	case l >= slog.LevelInfo:
		return h.by[1]
	}
	return h.by[0]
}

func (h severityHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.pick(l).Enabled(ctx, l)
}

func (h severityHandler) Handle(ctx context.Context, r slog.Record) error {
	return h.pick(r.Level).Handle(ctx, r)
}

func (h severityHandler) WithAttrs(as []slog.Attr) slog.Handler {
	for i := range h.by {
		h.by[i] = h.by[i].WithAttrs(as)
	}
	return h
}

func (h severityHandler) WithGroup(name string) slog.Handler {
	for i := range h.by {
		h.by[i] = h.by[i].WithGroup(name)
	}
	return h
}
