package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
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

// Store is a handle on one filesystem's indices. It is safe for concurrent use.
type Store struct {
	es      *elasticsearch.Client
	idx     indices
	timeout time.Duration
	log     *slog.Logger
	metrics *Metrics
	// textChunks: the data index maps "text", so text chunks are stored
	// as strings (searchable) rather than base64.
	textChunks bool
	// auth says which credentials requests carry ("as user \"x\"", ...), and
	// trust which certificates are trusted, for error messages. No secrets.
	auth, trust string
	// plainHosts are the host:port of the http:// URLs, for speaksTLS;
	// answered is set by the first HTTP answer, after which a broken
	// connection is never taken for a scheme mistake.
	plainHosts []string
	answered   atomic.Bool
	// chunkSize is the data chunk size of this filesystem, read from the data
	// index's _meta at Open (fixed at mkfs time; 0 before Open).
	chunkSize int64
}

type indices struct {
	Paths, Inodes, Data, Locks, Sessions string
}

func indexNames(prefix string) indices {
	return indices{
		Paths:    prefix,
		Inodes:   prefix + "-inodes",
		Data:     prefix + "-data",
		Locks:    prefix + "-locks",
		Sessions: prefix + "-sessions",
	}
}

// New builds a Store without contacting the cluster.
func New(cfg Config) (*Store, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if err := CheckPrefix(cfg.Prefix); err != nil {
		return nil, err
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 30 * time.Second
	}
	if cfg.MaxConnsPerHost <= 0 {
		cfg.MaxConnsPerHost = 64
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if len(cfg.URLs) == 0 {
		cfg.URLs = []string{DefaultURL}
	}
	addrs := make([]string, 0, len(cfg.URLs))
	var plainHosts []string
	for _, raw := range cfg.URLs {
		for _, one := range strings.Split(raw, ",") {
			one = strings.TrimSpace(one)
			if one == "" {
				continue
			}
			u, err := url.Parse(one)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("elasticsearch URL %q: want http(s)://host:port: %w", redactURL(one), ErrInvalid)
			}
			if u.User != nil {
				if cfg.Username == "" {
					cfg.Username = u.User.Username()
					cfg.Password, _ = u.User.Password()
				}
				u.User = nil
			}
			addrs = append(addrs, strings.TrimRight(u.String(), "/"))
			if u.Scheme == "http" {
				plainHosts = append(plainHosts, u.Host)
			}
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no elasticsearch URL given: %w", ErrInvalid)
	}
	if cfg.CertFingerprint != "" {
		fp, err := normalizeFingerprint(cfg.CertFingerprint)
		if err != nil {
			return nil, err
		}
		cfg.CertFingerprint = fp
	}

	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: (&net.Dialer{
			Timeout:   min(cfg.RequestTimeout, 10*time.Second),
			KeepAlive: 30 * time.Second,
		}).DialContext,
		// The default keeps 2 idle connections per host, which turns every
		// burst of parallel requests into new TCP (and TLS) handshakes.
		MaxIdleConns:          cfg.MaxConnsPerHost * len(addrs),
		MaxIdleConnsPerHost:   cfg.MaxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   min(cfg.RequestTimeout, 10*time.Second),
		ExpectContinueTimeout: time.Second,
		// No gzip: Go asks for it by default, and then the cluster
		// compresses every response (megabytes of base64 for a read of
		// data chunks, which barely compress) and we decompress it: CPU
		// on both sides that costs more than the bytes on any LAN.
		DisableCompression: true,
		TLSClientConfig:    &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.Insecure},
	}
	esCfg := elasticsearch.Config{
		Addresses:              addrs,
		Username:               cfg.Username,
		Password:               cfg.Password,
		APIKey:                 cfg.APIKey,
		CertificateFingerprint: cfg.CertFingerprint,
		Transport:              tr,
		// Retries are the caller's decision, never the client's: a resent
		// bulk can land after the operation it belonged to has finished.
		// The one exception is a request that never left: a connection
		// refused (a node that died) is tried on the next node, so that
		// losing one node of a cluster costs no operation. Never on a
		// status: the list must not be empty, or the client retries 502,
		// 503 and 504, and no response has status 0.
		RetryOnError:      func(_ *http.Request, err error) bool { return notSent(err) },
		RetryOnStatus:     []int{0},
		MaxRetries:        len(addrs),
		DisableMetaHeader: true,
	}
	if cfg.CACertFile != "" {
		pem, err := os.ReadFile(cfg.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA certificate: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA certificate file %s holds no PEM certificate: %w", cfg.CACertFile, ErrInvalid)
		}
		esCfg.CACert = pem
	}
	es, err := elasticsearch.NewClient(esCfg)
	if err != nil {
		return nil, fmt.Errorf("elasticsearch client: %s: %w", scrub(err.Error(), cfg), ErrInvalid)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	return &Store{es: es, idx: indexNames(cfg.Prefix), timeout: cfg.RequestTimeout, log: cfg.Logger, metrics: cfg.Metrics,
		auth: describeAuth(cfg), trust: describeTrust(cfg), plainHosts: plainHosts}, nil
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

// Prefix returns the index prefix this store works on.
func (s *Store) Prefix() string { return s.idx.Paths }

// Timeout is the bound on one request.
func (s *Store) Timeout() time.Duration { return s.timeout }

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

// request is one HTTP call to the cluster.
type request struct {
	method string
	path   string // already escaped
	query  url.Values
	body   []byte
	ndjson bool
}

// response is a fully read answer. Bodies are small except for scans and data
// chunks, which are bounded by page and chunk size.
type response struct {
	status int
	body   []byte
	auth   string // Store.auth, for failure
}

// do sends one request with the store's timeout. Transport failures and
// timeouts become ErrUnavailable; HTTP statuses are left to the caller.
func (s *Store) do(ctx context.Context, what string, r request) (response, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	u := r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	var body io.Reader
	if r.body != nil {
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return response{}, fmt.Errorf("%s: %w: %v", what, ErrInvalid, err)
	}
	if r.body != nil {
		if r.ndjson {
			req.Header.Set("Content-Type", "application/x-ndjson")
		} else {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	start := time.Now()
	res, err := s.es.Perform(req)
	if err != nil {
		s.metrics.observe(r.path, time.Since(start), 0)
		return response{}, s.transportError(ctx, what, err)
	}
	defer res.Body.Close()
	s.answered.Store(true)
	data, err := io.ReadAll(res.Body)
	s.metrics.observe(r.path, time.Since(start), res.StatusCode)
	if err != nil {
		return response{}, s.transportError(ctx, what, err)
	}
	return response{status: res.StatusCode, body: data, auth: s.auth}, nil
}

func (s *Store) transportError(ctx context.Context, what string, err error) error {
	// A TLS or scheme mistake is configuration: say so, instead of leaving
	// it to look like an unreachable cluster.
	var verr *tls.CertificateVerificationError
	var rerr tls.RecordHeaderError
	switch {
	case errors.As(err, &verr):
		return fmt.Errorf("%s: %v (%s): %w", what, verr.Err, s.trust, ErrTLS)
	case errors.As(err, &rerr):
		return fmt.Errorf("%s: the node does not speak TLS (%v): use an http:// URL: %w", what, err, ErrScheme)
	case strings.Contains(err.Error(), "fingerprint mismatch"):
		// The client's message repeats the configured fingerprint; the
		// node's own is left out on purpose, lest it be copied unchecked.
		return fmt.Errorf("%s: no certificate the node sent has the given SHA-256 fingerprint: %w", what, ErrTLS)
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return fmt.Errorf("%s: the node answers plain HTTP, not HTTPS: use an http:// URL: %w", what, ErrScheme)
	}
	if u := s.speaksTLS(err); u != "" {
		return fmt.Errorf("%s: %s speaks HTTPS, not plain HTTP: use an https:// URL: %w", what, u, ErrScheme)
	}
	msg := redactURL(err.Error())
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = fmt.Sprintf("no answer within %s (%s)", s.timeout, msg)
	}
	// The product check fails on anything that is not Elasticsearch (a proxy's
	// error page, another HTTP service on the port).
	if strings.Contains(msg, "not Elasticsearch") {
		return fmt.Errorf("%s: %s: %w", what, msg, ErrRejected)
	}
	return fmt.Errorf("%s: %s: %w", what, msg, ErrUnavailable)
}

// speaksTLS tells an http:// request that failed because the node only
// speaks TLS: such a node (Elasticsearch among them) closes the connection
// on the first plain byte, which reads as EOF or a reset. To be sure, it
// makes one TLS handshake (nothing sent, nothing verified) with each http://
// node, at most three, and returns the host:port of the first that answers
// it; "" otherwise. The client does not say which node failed. Only until
// the cluster first answered: later, a broken connection is just that.
func (s *Store) speaksTLS(err error) string {
	if len(s.plainHosts) == 0 || s.answered.Load() || !(errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || strings.Contains(err.Error(), "malformed HTTP response")) {
		return ""
	}
	for _, host := range s.plainHosts[:min(3, len(s.plainHosts))] {
		d := tls.Dialer{
			NetDialer: &net.Dialer{Timeout: 2 * time.Second},
			Config:    &tls.Config{InsecureSkipVerify: true}, // only asks "is this TLS?"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		c, derr := d.DialContext(ctx, "tcp", host)
		cancel()
		if derr == nil {
			c.Close()
			return host
		}
	}
	return ""
}

// failure turns a non-2xx response into a sentinel error. A refusal by
// security also says which credentials were sent.
func failure(what string, res response) error {
	if (res.status == 401 || res.status == 403) && res.auth != "" {
		what += " " + res.auth
	}
	var body struct {
		Error  json.RawMessage `json:"error"`
		Status int             `json:"status"`
	}
	var cause *esError
	if json.Unmarshal(res.body, &body) == nil && len(body.Error) > 0 {
		var e esError
		if json.Unmarshal(body.Error, &e) == nil {
			cause = &e
		} else {
			var text string
			if json.Unmarshal(body.Error, &text) == nil {
				cause = &esError{Reason: text}
			}
		}
	}
	return statusError(res.status, what, cause)
}

// Version asks a node which Elasticsearch version it runs. It uses
// GET /_nodes/_local because some distributions have no "GET /" banner.
func (s *Store) Version(ctx context.Context) (string, error) {
	res, err := s.do(ctx, "asking the cluster's version", request{method: "GET", path: "/_nodes/_local", query: url.Values{"filter_path": {"nodes.*.version"}}})
	if err != nil {
		return "", err
	}
	if res.status != 200 {
		return "", failure("asking the cluster's version", res)
	}
	var body struct {
		Nodes map[string]struct {
			Version string `json:"version"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal(res.body, &body); err != nil {
		return "", fmt.Errorf("asking the cluster's version: %w: %v", ErrCorrupt, err)
	}
	for _, n := range body.Nodes {
		return n.Version, nil
	}
	return "", fmt.Errorf("asking the cluster's version: no node answered: %w", ErrUnavailable)
}

// Close releases idle connections.
func (s *Store) Close() error {
	return s.es.Close(context.Background())
}

// notSent: the request failed before a connection existed, so no node can
// have seen it.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
