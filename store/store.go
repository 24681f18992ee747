package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elastic/go-elasticsearch/v8"
)

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
	// blocksField: the inode index maps "blocks" (st_blocks, which esfs
	// du sums), so inode documents carry it.
	blocksField bool
	// auth says which credentials requests carry ("as user \"x\"", ...), and
	// trust which certificates are trusted, for error messages. No secrets.
	auth, trust string
	// plainHosts are the host:port of the http:// URLs, for speaksTLS;
	// answered is set by the first HTTP answer, after which a broken
	// connection is never taken for a scheme mistake.
	plainHosts []string
	answered   atomic.Bool
	// damaged: the documents found damaged, by index and id, each
	// logged once (NoteDamaged).
	damaged sync.Map
	// chunkSize is the data chunk size of this filesystem, read from the data
	// index's _meta at Open (fixed at mkfs time; 0 before Open).
	chunkSize int64
	// readOnly: see Config.ReadOnly.
	readOnly bool
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
	cfg.Username, cfg.Password, cfg.APIKey = cfg.Credentials()
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
			u.User = nil // taken by Credentials
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
		// Retries are the caller's decision: a resent bulk can land after
		// the operation it belonged to has finished. The one exception is
		// a request that never left: a connection refused (a node that
		// died) is tried on the next node, so that losing one node of a
		// cluster costs no operation. Never on a status: the list must not
		// be empty, or the client retries 502, 503 and 504, and no
		// response has status 0.
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
		auth: describeAuth(cfg), trust: describeTrust(cfg), plainHosts: plainHosts, readOnly: cfg.ReadOnly}, nil
}

// Prefix returns the index prefix this store works on.
func (s *Store) Prefix() string { return s.idx.Paths }

// Timeout is the bound on one request. Every write also asks the cluster
// to give up waiting for its shards after as long (writeTimeout), so a
// write whose answer never came can still be applied at most twice
// Timeout after it was sent; a request that reaches the cluster later
// than that (held in a proxy on the way) is outside the bound.
func (s *Store) Timeout() time.Duration { return s.timeout }

// writeTimeout is the timeout parameter of every write: how long the
// cluster may wait for the shards it writes to (primary relocating, a
// node lost) before it gives up; its default is a minute, past the point
// where the sender stopped waiting for the answer.
func (s *Store) writeTimeout() string { return strconv.FormatInt(s.timeout.Milliseconds(), 10) + "ms" }

// Version asks a node which Elasticsearch version it runs. It uses
// GET /_nodes/_local because some distributions have no "GET /" banner.
func (a Admin) Version(ctx context.Context) (string, error) {
	s := a.s
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

// encoding is how this filesystem stores documents, for sending ops.
func (s *Store) encoding() encoding {
	e := encoding{textChunks: s.textChunks}
	if s.blocksField {
		e.blocksChunkSize = s.chunkSize
	}
	return e
}
