package cmd

// Credentials and the command line. A process's command line is world
// readable (ps, /proc/PID/cmdline), for as long as it runs, so no esfs
// process that runs takes a secret there:
//
//   - a command that runs in the foreground (an admin command, or esfs
//     mount without --daemon) refuses a URL with user:password@ on its
//     command line, saying where to put the password instead: there it
//     is already in the process's own command line, and esfs cannot take
//     it out;
//   - esfs mount --daemon, and so mount(8)'s helper (-o url=, an fstab
//     line), starts the daemon with its URLs bare, and hands it the
//     credentials it resolved (the URL's, the environment's, a file's)
//     through a pipe, with ESFS_ES_PASSWORD and ESFS_ES_API_KEY taken
//     out of its environment: the helper returns once the filesystem is
//     mounted, and what stays running holds its secrets only in memory.
//
// A pipe rather than the daemon's environment: /proc/PID/environ is
// readable by the user's other processes for the daemon's whole life (a
// variable unset later stays there), a pipe is read once and gone.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"
)

// credentials are what a --daemon parent resolved and its daemon uses.
type credentials struct {
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	APIKey   string `json:"api_key,omitempty"`
}

const (
	// daemonCredentialsEnv names the descriptor a --daemon child reads its
	// credentials from (JSON, to the end).
	daemonCredentialsEnv = "ESFS_DAEMON_CREDENTIALS_FD"
	daemonCredentialsFD  = 4 // after daemonEnv's 3
	// credentialsKey, in the app's Metadata, holds the *credentials a
	// --daemon child received: they replace the environment's and files'.
	credentialsKey = "credentials"
)

// urlUserinfo is the user:password@ of a URL anywhere in an argument (a
// flag's value, an -o list, a comma-separated list of URLs): from the
// scheme's // to the last @ before the path, as url.Parse reads it.
var urlUserinfo = regexp.MustCompile(`(?i)\b(https?://)[^/?#\s]*@`)

// urlPassword finds a URL whose userinfo holds a password (user:password@).
var urlPassword = regexp.MustCompile(`(?i)\bhttps?://[^/?#\s]*:[^/?#\s]*@`)

// refuseArgvPassword is the error of a foreground command whose command
// line holds a URL with a password.
func refuseArgvPassword(args []string) error {
	for _, a := range args[1:] {
		if urlPassword.MatchString(a) {
			return usagef("the Elasticsearch URL on the command line holds a password, which any user of this machine can read there (ps) while esfs runs: " +
				"put the password in ESFS_ES_PASSWORD or in a file for --es-password-file, or the whole URL in ELASTICSEARCH_URL")
		}
	}
	return nil
}

// daemonArgs are the arguments of a --daemon child (args[0], the program,
// left out): args, the mount's with the mount point last, without
// --daemon, and every URL without its user:password@. The mount point is
// taken as it is.
func daemonArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i, a := range args {
		if i == 0 || a == "--daemon" || a == "-d" || a == "-daemon" {
			continue
		}
		if i < len(args)-1 {
			a = urlUserinfo.ReplaceAllString(a, "$1")
		}
		out = append(out, a)
	}
	return out
}

// daemonEnviron is the environment of a --daemon child: env without the
// secrets the child gets through its pipe, its URLs without user:password@.
func daemonEnviron(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "ESFS_ES_PASSWORD", "ESFS_ES_API_KEY", daemonCredentialsEnv:
			continue
		case "ELASTICSEARCH_URL", "ESFS_ES_URL":
			kv = k + "=" + urlUserinfo.ReplaceAllString(v, "$1")
		}
		out = append(out, kv)
	}
	return out
}

// credentialsPipe resolves the credentials of c's cluster as the store
// would send them, and returns the read end of a pipe that holds them,
// for the child; the caller closes it once the child started.
func credentialsPipe(c *cli.Context) (*os.File, error) {
	cfg, err := readStoreConfig(c, quietLogger(false))
	if err != nil {
		return nil, err
	}
	var cr credentials
	cr.Username, cr.Password, cr.APIKey = cfg.Credentials()
	b, err := json.Marshal(cr)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// A pipe holds 64 KiB: written whole before the child starts.
	_, err = w.Write(b)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("handing the credentials to the mount process: %w", err)
	}
	return r, nil
}

// receiveCredentials reads what a --daemon parent handed this process, if
// it is such a child; nil otherwise.
func receiveCredentials() (*credentials, error) {
	fdStr := os.Getenv(daemonCredentialsEnv)
	if fdStr == "" {
		return nil, nil
	}
	os.Unsetenv(daemonCredentialsEnv) // not for anything this process starts
	fd, err := strconv.Atoi(fdStr)
	if err != nil || fd != daemonCredentialsFD {
		return nil, fmt.Errorf("%s=%q: not the descriptor esfs mount --daemon passes", daemonCredentialsEnv, fdStr)
	}
	f := os.NewFile(uintptr(fd), "credentials")
	if f == nil {
		return nil, errors.New("the credentials' descriptor is not open")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the credentials from the parent: %w", err)
	}
	var cr credentials
	if err := json.Unmarshal(b, &cr); err != nil {
		return nil, fmt.Errorf("the credentials from the parent are not JSON: %w", err)
	}
	return &cr, nil
}

// received are the credentials c's process received from its --daemon
// parent, or nil.
func received(c *cli.Context) *credentials {
	cr, _ := c.App.Metadata[credentialsKey].(*credentials)
	return cr
}
