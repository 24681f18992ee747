package cmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/urfave/cli/v2"
)

// esFlags are the flags that say where the cluster is and which filesystem to
// use. Secrets come only from the environment or from files, never from argv,
// where every user of the machine can read them.
func esFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "es-url", EnvVars: []string{"ELASTICSEARCH_URL", "ESFS_ES_URL"}, Value: store.DefaultURL,
			Usage: "Elasticsearch URL(s), comma-separated"},
		&cli.StringFlag{Name: "index", EnvVars: []string{"ESFS_INDEX"}, Value: store.DefaultPrefix,
			Usage: "name of the filesystem (the prefix of its indices)"},
		&cli.StringFlag{Name: "es-username", EnvVars: []string{"ESFS_ES_USERNAME"}, Usage: "basic auth user (password from ESFS_ES_PASSWORD or --es-password-file)"},
		&cli.StringFlag{Name: "es-password-file", TakesFile: true, EnvVars: []string{"ESFS_ES_PASSWORD_FILE"}, Usage: "file holding the basic auth password"},
		&cli.StringFlag{Name: "es-api-key-file", TakesFile: true, EnvVars: []string{"ESFS_ES_API_KEY_FILE"}, Usage: "file holding an API key (or set ESFS_ES_API_KEY)"},
		&cli.StringFlag{Name: "es-ca-cert", TakesFile: true, EnvVars: []string{"ESFS_ES_CA_CERT"}, Usage: "PEM file of the CA that signed the cluster's certificate"},
		&cli.StringFlag{Name: "es-fingerprint", EnvVars: []string{"ESFS_ES_FINGERPRINT"}, Usage: "hex SHA-256 fingerprint of the cluster's certificate"},
		&cli.BoolFlag{Name: "es-insecure", EnvVars: []string{"ESFS_ES_INSECURE"}, Usage: "do not verify the cluster's TLS certificate (unsafe)"},
		&cli.DurationFlag{Name: "es-timeout", EnvVars: []string{"ESFS_ES_TIMEOUT"}, Value: 15 * time.Second, Usage: "bound on each request to Elasticsearch"},
	}
}

// storeConfig reads the Elasticsearch flags of the root command, for a
// process that runs with its command line (see credentials.go).
func storeConfig(c *cli.Context, log *slog.Logger) (store.Config, error) {
	if err := refuseArgvPassword(os.Args); err != nil {
		return store.Config{}, err
	}
	return readStoreConfig(c, log)
}

// readStoreConfig is storeConfig whatever the command line holds: for a
// --daemon parent, which hands its daemon another.
func readStoreConfig(c *cli.Context, log *slog.Logger) (store.Config, error) {
	cfg := store.Config{
		URLs:            []string{c.String("es-url")},
		Prefix:          c.String("index"),
		Username:        c.String("es-username"),
		Password:        os.Getenv("ESFS_ES_PASSWORD"),
		APIKey:          os.Getenv("ESFS_ES_API_KEY"),
		CACertFile:      c.String("es-ca-cert"),
		CertFingerprint: c.String("es-fingerprint"),
		Insecure:        c.Bool("es-insecure"),
		RequestTimeout:  c.Duration("es-timeout"),
		Logger:          log,
	}
	if c.String("es-url") == "" {
		return cfg, usagef("%s is empty: give the cluster's URL, such as %s", flagSource(c, "es-url"), store.DefaultURL)
	}
	if f := c.String("es-ca-cert"); f != "" {
		// Read by the store too; read here for a message naming the flag.
		if _, err := readFlagFile(c, "es-ca-cert"); err != nil {
			return cfg, err
		}
	}
	if cr := received(c); cr != nil {
		// A --daemon child: its parent read the environment and the
		// files, and took the URL's user:password@ off its command line.
		cfg.Username, cfg.Password, cfg.APIKey = cr.Username, cr.Password, cr.APIKey
	} else if err := readSecrets(c, &cfg); err != nil {
		return cfg, err
	}
	if cfg.RequestTimeout <= 0 {
		return cfg, usagef("%s %s: must be positive, such as 15s (the default)", flagSource(c, "es-timeout"), cfg.RequestTimeout)
	}
	return cfg, nil
}

// readSecrets sets cfg's password and API key from the files the flags
// name, if they do.
func readSecrets(c *cli.Context, cfg *store.Config) error {
	if c.String("es-password-file") != "" {
		pw, err := readSecret(c, "es-password-file")
		if err != nil {
			return err
		}
		cfg.Password = pw
	}
	if c.String("es-api-key-file") != "" {
		key, err := readSecret(c, "es-api-key-file")
		if err != nil {
			return err
		}
		cfg.APIKey = key
	}
	return nil
}

// readSecret reads the secret in the file named by flag.
func readSecret(c *cli.Context, flag string) (string, error) {
	b, err := readFlagFile(c, flag)
	if err != nil {
		return "", err
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("%s %s: the file is empty", flagSource(c, flag), c.String(flag))
	}
	return secret, nil
}

// readFlagFile reads the file named by flag; its error says which flag
// (or environment variable) named which file.
func readFlagFile(c *cli.Context, flag string) ([]byte, error) {
	path := c.String(flag)
	b, err := os.ReadFile(path)
	if err != nil {
		var perr *os.PathError
		if errors.As(err, &perr) {
			err = perr.Err // the path is said once, below
		}
		return nil, fmt.Errorf("%s %s: cannot read the file: %w", flagSource(c, flag), path, err)
	}
	return b, nil
}

// openStore connects to the cluster and opens the filesystem, turning the
// usual mistakes into one line that says what to do.
func openStore(ctx context.Context, c *cli.Context, log *slog.Logger, mustExist bool, m *store.Metrics) (*store.Store, error) {
	cfg, err := storeConfig(c, log)
	cfg.Metrics = m
	if err != nil {
		return nil, err
	}
	s, err := store.New(cfg)
	if err != nil {
		return nil, err
	}
	if !mustExist {
		return s, nil
	}
	if err := s.Open(ctx); err != nil {
		s.Close()
		return nil, explain(err, c.String("es-url"))
	}
	return s, nil
}

// explain adds the likely cause, and what to set, to a connection-level
// error. The store's part says what was sent and trusted (never a secret).
func explain(err error, url string) error {
	switch {
	case errors.Is(err, store.ErrNoSuchHost):
		return fmt.Errorf("cannot find Elasticsearch at %s (check the host name and the DNS; set ELASTICSEARCH_URL or --es-url): %w", redact(url), err)
	case errors.Is(err, store.ErrUnavailable):
		return fmt.Errorf("cannot reach Elasticsearch at %s (is it running? set ELASTICSEARCH_URL or --es-url): %w", redact(url), err)
	case errors.Is(err, store.ErrForbidden):
		return fmt.Errorf("Elasticsearch at %s denied the request (the user or API key lacks privileges on the esfs indices): %w", redact(url), err)
	case errors.Is(err, store.ErrAuth):
		return fmt.Errorf("Elasticsearch at %s refused to authenticate esfs (check ESFS_ES_USERNAME with ESFS_ES_PASSWORD or --es-password-file, or ESFS_ES_API_KEY or --es-api-key-file): %w", redact(url), err)
	case errors.Is(err, store.ErrTLS):
		return fmt.Errorf("cannot verify the TLS certificate of Elasticsearch at %s (give the CA that signed it with --es-ca-cert or ESFS_ES_CA_CERT, or its SHA-256 with --es-fingerprint): %w", redact(url), err)
	case errors.Is(err, store.ErrBlocked):
		return fmt.Errorf("Elasticsearch refuses writes to an index of the filesystem (esfs destroy blocks new mounts while it runs; a full disk or an administrator can block writes too): %w", oneLine(err))
	case errors.Is(err, store.ErrScheme):
		return fmt.Errorf("wrong scheme in the Elasticsearch URL %s (set ELASTICSEARCH_URL or --es-url): %w", redact(url), err)
	}
	return oneLine(err)
}

// redact drops user:password@ from a URL for messages.
func redact(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		if j := strings.LastIndex(u[i+3:], "@"); j >= 0 {
			return u[:i+3] + u[i+3+j+1:]
		}
	}
	return u
}
