package store

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Config says how to reach the cluster and which filesystem to use.
type Config struct {
	// URLs of one or more nodes. Credentials embedded as user:pass@ are moved
	// into Username/Password so that they never appear in an error message.
	URLs     []string
	Username string
	Password string
	APIKey   string // base64 "id:key", as Elasticsearch returns it
	// CACertFile is a PEM file of the CA that signed the cluster's certificate.
	CACertFile string
	// CertFingerprint is the hex SHA-256 of the cluster's certificate (or of
	// a CA certificate the node sends along), as Elasticsearch prints on first
	// start; an alternative to CACertFile. Colons, spaces and case are
	// ignored, so openssl's "AB:CD:..." works too.
	CertFingerprint string
	// Insecure skips TLS verification. Only ever set from an explicit flag.
	Insecure bool
	// RequestTimeout bounds every request, including its retries by the caller.
	RequestTimeout time.Duration
	// Prefix names the filesystem's indices: Prefix, Prefix-inodes, ...
	Prefix string
	// MaxConnsPerHost sizes the HTTP connection pool.
	MaxConnsPerHost int
	// Logger receives request failures; nil means slog.Default().
	Logger *slog.Logger
	// Metrics counts requests; nil makes a private, unregistered set.
	Metrics *Metrics
	// ReadOnly: Open changes nothing (it neither adds the fields of a newer
	// esfs to an older filesystem's mappings nor sets gc_deletes), for the
	// commands that only read, which read-only credentials may run.
	ReadOnly bool
}

// Credentials are the credentials New sends: Username and Password, or
// when no Username is given the user:password@ of the first URL that has
// one; and APIKey. A caller that hands the configuration on without its
// secrets (a daemon started with the URLs bare) takes them from here.
func (cfg Config) Credentials() (user, password, apiKey string) {
	if cfg.Username != "" {
		return cfg.Username, cfg.Password, cfg.APIKey
	}
	for _, raw := range cfg.URLs {
		for _, one := range strings.Split(raw, ",") {
			if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.User != nil {
				password, _ := u.User.Password()
				return u.User.Username(), password, cfg.APIKey
			}
		}
	}
	return cfg.Username, cfg.Password, cfg.APIKey
}

// DefaultPrefix is the index prefix when none is given.
const DefaultPrefix = "fs"

// DefaultURL is where a local test cluster listens.
const DefaultURL = "http://127.0.0.1:9200"

var prefixRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,199}$`)

// CheckPrefix validates an index prefix against Elasticsearch's index name rules
// (lowercase, no separators or wildcards) with room for the "-sessions" suffix.
func CheckPrefix(p string) error {
	if !prefixRE.MatchString(p) || p == "." || p == ".." {
		return fmt.Errorf("index name %q: must be lowercase letters, digits, '_', '.', '-', not start with '_', '-' or '.': %w", p, ErrInvalid)
	}
	return nil
}

// normalizeFingerprint turns "AB:CD:..." or "abcd..." into the 64 lowercase
// hex digits the client compares against; anything else is refused here,
// since the client would silently never match it.
func normalizeFingerprint(fp string) (string, error) {
	clean := strings.ToLower(strings.NewReplacer(":", "", " ", "").Replace(strings.TrimSpace(fp)))
	if b, err := hex.DecodeString(clean); err != nil || len(b) != 32 {
		return "", fmt.Errorf("certificate fingerprint: want the SHA-256 as 64 hex digits (colons allowed): %w", ErrInvalid)
	}
	return clean, nil
}

// describeAuth names the credentials a request carries, without secrets: an
// API key's id is public (it shows in every API key listing), its key is not.
func describeAuth(cfg Config) string {
	switch {
	case cfg.APIKey != "":
		raw, err := base64.StdEncoding.DecodeString(cfg.APIKey)
		id, _, ok := strings.Cut(string(raw), ":")
		if err != nil || !ok || id == "" {
			return `with an API key that is not base64 of "id:key" (use the "encoded" value Elasticsearch returns)`
		}
		return fmt.Sprintf("with API key id %q", id)
	case cfg.Username != "":
		return fmt.Sprintf("as user %q", cfg.Username)
	}
	return "without credentials"
}

// describeTrust names what a certificate must match to be trusted.
func describeTrust(cfg Config) string {
	switch {
	case cfg.Insecure:
		return "verification disabled"
	case cfg.CertFingerprint != "":
		return "trusting only the given SHA-256 fingerprint"
	case cfg.CACertFile != "":
		return "trusting the CA in " + cfg.CACertFile
	}
	return "trusting the system's CAs; none given"
}

var userinfoRE = regexp.MustCompile(`//[^/@\s]*@`)

// redactURL removes user:password@ from anything that looks like a URL.
func redactURL(s string) string { return userinfoRE.ReplaceAllString(s, "//") }

// scrub removes secrets from a message that may quote a request.
func scrub(msg string, cfg Config) string {
	msg = redactURL(msg)
	for _, secret := range []string{cfg.Password, cfg.APIKey} {
		if len(secret) >= 3 {
			msg = strings.ReplaceAll(msg, secret, "***")
		}
	}
	return msg
}
