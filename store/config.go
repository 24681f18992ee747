package store

import (
	"bytes"
	"context"
	"crypto/tls"
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
	// CertFingerprint is the hex SHA-256 of the cluster's certificate, as
	// Elasticsearch prints on first start; an alternative to CACertFile.
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
		}
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("no elasticsearch URL given: %w", ErrInvalid)
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
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.Insecure},
	}
	esCfg := elasticsearch.Config{
		Addresses:              addrs,
		Username:               cfg.Username,
		Password:               cfg.Password,
		APIKey:                 cfg.APIKey,
		CertificateFingerprint: cfg.CertFingerprint,
		Transport:              tr,
		// Retries are the caller's decision (LOCKING-REVIEW item 8): a resent
		// bulk can land after the operation it belonged to has finished.
		DisableRetry:      true,
		DisableMetaHeader: true,
	}
	if cfg.CACertFile != "" {
		pem, err := os.ReadFile(cfg.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("reading CA certificate: %w", err)
		}
		esCfg.CACert = pem
	}
	es, err := elasticsearch.NewClient(esCfg)
	if err != nil {
		return nil, fmt.Errorf("elasticsearch client: %s: %w", scrub(err.Error(), cfg), ErrInvalid)
	}
	return &Store{es: es, idx: indexNames(cfg.Prefix), timeout: cfg.RequestTimeout, log: cfg.Logger}, nil
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
	res, err := s.es.Perform(req)
	if err != nil {
		return response{}, s.transportError(ctx, what, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, s.transportError(ctx, what, err)
	}
	return response{status: res.StatusCode, body: data}, nil
}

func (s *Store) transportError(ctx context.Context, what string, err error) error {
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

// failure turns a non-2xx response into a sentinel error.
func failure(what string, res response) error {
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
