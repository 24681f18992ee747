package store_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
	"github.com/esfs/esfs/test/testenv"
)

func TestMain(m *testing.M) {
	testenv.PrintVersion("store")
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dentry(path string, ino uint64, typ store.FileType) store.Dentry {
	return store.Dentry{Path: path, Ino: ino, Type: typ}
}

func TestVersionReported(t *testing.T) {
	s := testenv.Unformatted(t)
	v, err := s.Admin().Version(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(v, "8.") {
		t.Fatalf("version %q: want an Elasticsearch 8.x", v)
	}
	t.Logf("Elasticsearch %s", v)
}

func TestUnreachableClusterFailsFast(t *testing.T) {
	// Nothing listens: connection refused.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://esfsuser:s3cr3t-pw@" + l.Addr().String()
	l.Close()
	// Something listens but never answers: a hung node.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, u := range []string{refused, "http://esfsuser:s3cr3t-pw@" + hung.Addr().String()} {
		s, err := store.New(store.Config{URLs: []string{u}, Prefix: "esfs-unreachable", RequestTimeout: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err = s.GetDentry(context.Background(), "/")
		took := time.Since(start)
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("%s: got %v, want ErrUnavailable", u, err)
		}
		if took > 5*time.Second {
			t.Errorf("%s: took %s with a 2s timeout", u, took)
		}
		if err != nil && (strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "esfsuser")) {
			t.Errorf("credentials leak into the error: %v", err)
		}
		if err := s.Open(context.Background()); !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("open: %v", err)
		}
	}
}

func TestNotElasticsearch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"ok":true}`))
	}))
	defer srv.Close()
	s, err := store.New(store.Config{URLs: []string{srv.URL}, RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Open(context.Background())
	if err == nil || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("got %v, want a clear refusal of a non-Elasticsearch server", err)
	}
	t.Log(err)
}

func TestBadConfig(t *testing.T) {
	for _, c := range []store.Config{
		{URLs: []string{"localhost:9200"}},
		{URLs: []string{"ftp://x"}},
		{URLs: []string{"http://x"}, Prefix: "Upper"},
		{URLs: []string{"http://x"}, Prefix: "_hidden"},
		{URLs: []string{"http://x"}, Prefix: "a/b"},
		{URLs: []string{"http://x"}, CACertFile: "/nonexistent/ca.pem"},
	} {
		if _, err := store.New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
