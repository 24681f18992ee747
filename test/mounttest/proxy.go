package mounttest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy is a TCP relay between a mount and the cluster that a test can cut:
// while down, it resets every connection and refuses new ones, which is what
// a client sees when Elasticsearch stops.
type Proxy struct {
	URL    string // http://127.0.0.1:port of the proxy
	target string
	ln     net.Listener

	mu    sync.Mutex // protects the following
	up    bool
	conns map[net.Conn]struct{}
}

// NewProxy relays to the cluster at esURL until the test ends.
func NewProxy(t testing.TB, esURL string) *Proxy {
	t.Helper()
	u, err := url.Parse(esURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{URL: "http://" + ln.Addr().String(), target: u.Host, ln: ln, up: true, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.SetUp(false) })
	return p
}

func (p *Proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		up := p.up
		if up {
			p.conns[c] = struct{}{}
		}
		p.mu.Unlock()
		if !up {
			resetConn(c)
			continue
		}
		go p.relay(c)
	}
}

func (p *Proxy) relay(c net.Conn) {
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
		c.Close()
	}()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, up)
		p.mu.Unlock()
		up.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
}

func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // RST, like a dead server
	}
	c.Close()
}

// SetUp restores (true) or cuts (false) the relay.
func (p *Proxy) SetUp(up bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.up = up
	if !up {
		for c := range p.conns {
			resetConn(c)
		}
		p.conns = map[net.Conn]struct{}{}
	}
}
