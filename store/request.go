package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// request is one HTTP call to the cluster.
type request struct {
	method string
	path   string // already escaped
	query  url.Values
	body   []byte
	ndjson bool
	// items names a bulk's items, for the debug log only.
	items []string
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
	// Who the request is for, where an operator looking at the cluster's
	// tasks or slow log sees it (and a proxy between can tell a call's
	// requests from the mount's background work): two values only, as
	// Elasticsearch asks of this header.
	req.Header.Set("X-Opaque-Id", "esfs/"+origin(ctx))
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
		s.metrics.observe(r.path, s.idx.roleName(r.path), origin(ctx), time.Since(start), 0)
		return response{}, s.transportError(ctx, what, err)
	}
	defer res.Body.Close()
	s.answered.Store(true)
	data, err := readBody(res)
	took := time.Since(start)
	s.metrics.observe(r.path, s.idx.roleName(r.path), origin(ctx), took, res.StatusCode)
	// At debug level every request is logged with what asked for it: the
	// way to see which round trips a call costs.
	if len(r.items) > 0 {
		s.log.Debug("elasticsearch request", "what", what, "items", strings.Join(r.items, "; "), "method", r.method, "path", r.path, "status", res.StatusCode, "took", took)
	} else {
		s.log.Debug("elasticsearch request", "what", what, "method", r.method, "path", r.path, "status", res.StatusCode, "took", took)
	}
	var big tooBig
	if errors.As(err, &big) {
		return response{}, fmt.Errorf("%s: %w", what, err)
	}
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
	// A name that does not resolve is a mistake in the URL far more often
	// than an outage: say which name, not "is it running?".
	var dns *net.DNSError
	if errors.As(err, &dns) && !dns.IsTimeout {
		cause := dns.Err
		if dns.Server != "" {
			cause += ", from " + dns.Server
		}
		return fmt.Errorf("%s: %w: %s (%s)", what, ErrNoSuchHost, dns.Name, cause)
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

// notSent: the request failed before a connection existed, so no node can
// have seen it.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// readBody reads an answer whole, into one buffer of the size it announces
// (io.ReadAll grows its buffer from 512 bytes by copying: a chunk read's
// megabytes were copied a dozen times).
func readBody(res *http.Response) ([]byte, error) { return readBodyUpTo(res, MaxAnswer) }

// readBodyUpTo is readBody with a bound of limit bytes.
func readBodyUpTo(res *http.Response, limit int64) ([]byte, error) {
	if n := res.ContentLength; n > limit {
		return nil, errTooBig(n)
	} else if n >= 0 {
		data := make([]byte, n)
		if _, err := io.ReadFull(res.Body, data); err != nil {
			return nil, err
		}
		return data, nil
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err == nil && int64(len(data)) > limit {
		return nil, errTooBig(-1)
	}
	return data, err
}

// MaxAnswer bounds what is read of one answer: far past any that esfs
// asks for (a read's chunks, a page of a listing), so that only a
// document nothing of esfs wrote (one bad write may leave one as large
// as the cluster takes) reaches it, and costs an error instead of the
// daemon's memory.
const MaxAnswer = 256 << 20

// tooBig is an answer past MaxAnswer, which is not read.
type tooBig int64

func errTooBig(n int64) error { return tooBig(n) }

func (e tooBig) Error() string {
	if e < 0 {
		return fmt.Sprintf("answer longer than %d bytes, not read", MaxAnswer)
	}
	return fmt.Sprintf("answer of %d bytes, longer than %d, not read", int64(e), MaxAnswer)
}

func (tooBig) Is(target error) bool { return target == ErrCorrupt }
