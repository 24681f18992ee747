package mounttest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

// FaultProxy is an HTTP relay between a mount and the cluster that delays
// or breaks the requests a test picks: a lock bulk that lands after its
// sender gave up, a stage bulk whose answer never arrives. A TCP proxy
// (Proxy, or toxiproxy) cannot aim at one request among the many a mount
// pipelines over its pooled connections; this one reads each request
// before deciding. For the network itself (latency, resets, a blackhole,
// an outage) use Toxi.
type FaultProxy struct {
	URL    string // http://127.0.0.1:port of the proxy
	target *url.URL
	srv    *http.Server
	client *http.Client

	mu    sync.Mutex // protects rules, hook and closed
	rules []*Fault
	hook  func(w http.ResponseWriter, r *http.Request, body []byte) bool
	// closed: the test ended; a request still arriving (its server's
	// Shutdown gave up waiting for it) is refused. Set under mu before
	// inflight is waited for, so that every Add happens before the Wait
	// (the race detector's rule for a WaitGroup).
	closed bool

	inflight sync.WaitGroup // late forwards still running
}

// resetConn closes c with a reset (RST), as a dead server would.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, like a dead server
	}
	c.Close()
}

// Fault is what to do to the Nth request that Match accepts.
type Fault struct {
	// Match selects requests by method, path and body.
	Match func(method, path string, body []byte) bool
	// Nth: act on the Nth matching request (1-based); 0 means the first.
	Nth int
	// Delay holds the request this long before forwarding it (measured
	// from its arrival, whether or not the sender is still waiting).
	Delay time.Duration
	// Drop: do not forward the request at all (after Delay).
	Drop bool
	// Reset: answer the sender by resetting its connection instead of
	// relaying the response (which is read and discarded).
	Reset bool
	// Rewrite, if set, changes the body before it is forwarded: a test
	// makes one item of a bulk fail, say (FailBulkItem).
	Rewrite func(body []byte) []byte
	// Refuse answers the request with this HTTP status (429, 503)
	// instead of forwarding it, as a cluster that sheds load does.
	Refuse int
	// Until, if set, disarms the fault at that time if it has not acted
	// by then (it never fires).
	Until time.Time
	// Late forwards the request at once and holds its answer this long:
	// the sender learns, late, what the cluster held when the request
	// landed (Delay holds the request itself, so its answer is as late
	// as the request).
	Late time.Duration

	seen    int
	arrived chan struct{}
	fired   chan struct{}
	// Status is the cluster's answer to the forwarded request (0 when it
	// was dropped or could not be forwarded); valid once Fired is closed.
	Status int
}

// Arrived is closed once the fault's request has reached the proxy.
func (f *Fault) Arrived() <-chan struct{} { return f.arrived }

// Fired is closed once the fault has acted (after the late forward, if
// any, got its answer).
func (f *Fault) Fired() <-chan struct{} { return f.fired }

// WaitFired waits for the fault to act, failing the test if it has not
// within a minute: a fault whose request never comes (the mount did its
// work before the fault was added, say) must fail the test, not hang the
// suite until go test's timeout.
func (f *Fault) WaitFired(t testing.TB) {
	t.Helper()
	select {
	case <-f.fired:
	case <-time.After(time.Minute):
		t.Fatal("the fault's request did not come within a minute")
	}
}

// NewFaultProxy relays to the cluster at esURL until the test ends.
func NewFaultProxy(t testing.TB, esURL string) *FaultProxy {
	t.Helper()
	u, err := url.Parse(esURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &FaultProxy{URL: "http://" + ln.Addr().String(), target: u,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	p.srv = &http.Server{Handler: p}
	go func() { _ = p.srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.srv.Shutdown(ctx)
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		p.inflight.Wait()
	})
	return p
}

// Add arms a fault; it acts once.
func (p *FaultProxy) Add(f *Fault) *Fault {
	f.fired, f.arrived = make(chan struct{}), make(chan struct{})
	if f.Nth <= 0 {
		f.Nth = 1
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = append(p.rules, f)
	return f
}

// Clear disarms the faults that have not acted yet (a test's faults for a
// mount that is gone); those acting go on.
func (p *FaultProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rules = nil
}

// Intercept has hook see every request before the faults do (it may hold
// it, for as long as a test needs a command paused at that request); a
// request the hook answers itself (it returns true) goes no further.
func (p *FaultProxy) Intercept(hook func(w http.ResponseWriter, r *http.Request, body []byte) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook = hook
}

// pick returns the fault that acts on this request, if any.
func (p *FaultProxy) pick(method, path string, body []byte) *Fault {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	live := p.rules[:0]
	for _, f := range p.rules {
		if f.Until.IsZero() || now.Before(f.Until) {
			live = append(live, f)
		}
	}
	p.rules = live
	for i, f := range p.rules {
		if !f.Match(method, path, body) {
			continue
		}
		f.seen++
		if f.seen == f.Nth {
			p.rules = append(p.rules[:i:i], p.rules[i+1:]...)
			return f
		}
	}
	return nil
}

func (p *FaultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	p.mu.Lock()
	hook := p.hook
	p.mu.Unlock()
	if hook != nil && hook(w, r, body) {
		return
	}
	f := p.pick(r.Method, r.URL.Path, body)
	if f == nil {
		p.relay(w, r, body)
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	p.inflight.Add(1)
	p.mu.Unlock()
	defer p.inflight.Done()
	defer close(f.fired)
	close(f.arrived)
	time.Sleep(f.Delay)
	if f.Refuse != 0 {
		f.Status = f.Refuse
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(f.Refuse)
		fmt.Fprintf(w, `{"error":{"type":"fault_proxy","reason":"refused by the fault proxy"},"status":%d}`, f.Refuse)
		return
	}
	if f.Rewrite != nil {
		body = f.Rewrite(body)
	}
	if !f.Drop {
		// A fresh context: the sender may have given up long ago, and the
		// point is that its request still lands.
		res, err := p.forward(context.Background(), r, body)
		if err == nil && f.Late > 0 {
			// Read the whole answer now: it is the cluster's state when
			// the request landed, whatever happens meanwhile.
			var held bytes.Buffer
			_, err = io.Copy(&held, res.Body)
			res.Body.Close()
			res.Body = io.NopCloser(&held)
			time.Sleep(f.Late)
		}
		if err == nil {
			f.Status = res.StatusCode
			if !f.Reset {
				copyResponse(w, res)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			resetConn(c)
			return
		}
	}
	http.Error(w, "fault proxy: dropped", http.StatusBadGateway)
}

func (p *FaultProxy) relay(w http.ResponseWriter, r *http.Request, body []byte) {
	res, err := p.forward(r.Context(), r, body)
	if err != nil {
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				resetConn(c)
				return
			}
		}
		return
	}
	copyResponse(w, res)
}

func (p *FaultProxy) forward(ctx context.Context, r *http.Request, body []byte) (*http.Response, error) {
	u := *p.target
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	req, err := http.NewRequestWithContext(ctx, r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, vs := range r.Header {
		if strings.EqualFold(k, "Connection") {
			continue
		}
		req.Header[k] = vs
	}
	return p.client.Do(req)
}

func copyResponse(w http.ResponseWriter, res *http.Response) {
	defer res.Body.Close()
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = io.Copy(w, res.Body)
}

// BulkTo matches _bulk requests with an item addressed to an index whose
// name ends with suffix (for example "-locks"; "" for any) and whose body
// contains every one of the strings in also.
func BulkTo(suffix string, also ...string) func(method, path string, body []byte) bool {
	return func(method, path string, body []byte) bool {
		if method != http.MethodPost || !strings.HasSuffix(path, "/_bulk") {
			return false
		}
		// Writes name an index's write alias (store.WriteAliasSuffix),
		// reads the index itself.
		if suffix != "" && !bytes.Contains(body, []byte(suffix+`"`)) && !bytes.Contains(body, []byte(suffix+store.WriteAliasSuffix+`"`)) {
			return false
		}
		for _, s := range also {
			if !bytes.Contains(body, []byte(s)) {
				return false
			}
		}
		return true
	}
}

// FailBulkItem is a Rewrite that makes the item of a bulk that writes the
// document with _id id fail on its own, the rest of the bulk landing: its
// source gets a field no esfs mapping has, which the cluster refuses
// (strict mappings) with an error of that item.
func FailBulkItem(id string) func(body []byte) []byte {
	return func(body []byte) []byte {
		lines := bytes.Split(body, []byte("\n"))
		for i := 0; i+1 < len(lines); i++ {
			if bytes.Contains(lines[i], []byte(`"_id":"`+id+`"`)) && bytes.HasPrefix(lines[i+1], []byte("{")) {
				lines[i+1] = append([]byte(`{"esfs_test_refused":1,`), lines[i+1][1:]...)
				break
			}
		}
		return bytes.Join(lines, []byte("\n"))
	}
}
