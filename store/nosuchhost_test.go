package store_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

// TestNoSuchHost: a host name that does not resolve is ErrNoSuchHost,
// naming the host, and still ErrUnavailable for the retries of a running
// mount.
func TestNoSuchHost(t *testing.T) {
	const host = "nosuchhost.invalid" // RFC 6761: never resolves
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dns *net.DNSError
	if _, err := net.DefaultResolver.LookupHost(ctx, host); !errors.As(err, &dns) || !dns.IsNotFound {
		t.Skipf("no DNS server says %s does not exist here (%v)", host, err)
	}
	s, err := store.New(store.Config{URLs: []string{"http://" + host + ":9200"}, Prefix: "fs", RequestTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	err = s.Open(ctx)
	if !errors.Is(err, store.ErrNoSuchHost) || !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), host) {
		t.Fatalf("Open through a host name that does not resolve: %v; want ErrNoSuchHost (and ErrUnavailable) naming %s", err, host)
	}
}
