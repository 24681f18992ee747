// Package testenv gives tests a real Elasticsearch and a private filesystem
// in it. Tests never fake the cluster: without ELASTICSEARCH_URL they fail
// and say how to get one (test/run.sh starts a local cluster and sets it).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/esfs/esfs/store"
)

// URL returns the cluster under test, or fails the test.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv("ELASTICSEARCH_URL")
	if u == "" {
		t.Fatal("ELASTICSEARCH_URL is not set: run the suite with test/run.sh, or start a cluster with test/es.sh start and export ELASTICSEARCH_URL")
	}
	return u
}

var unsafe = regexp.MustCompile(`[^a-z0-9]+`)

// Prefix returns an index prefix no other test uses.
func Prefix(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := unsafe.ReplaceAllString(strings.ToLower(t.Name()), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	return "esfs-test-" + strings.Trim(name, "-") + "-" + hex.EncodeToString(b[:])
}

// Store returns a Store on a fresh filesystem (mkfs done), deleted when the
// test ends.
func Store(t testing.TB) *store.Store {
	t.Helper()
	s := Unformatted(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Admin().Mkfs(ctx, store.MkfsOptions{}); err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	return s
}

// Unformatted returns a Store on a fresh prefix without running mkfs; the
// prefix's indices are deleted when the test ends.
func Unformatted(t testing.TB) *store.Store {
	t.Helper()
	s, err := store.New(store.Config{URLs: []string{URL(t)}, Prefix: Prefix(t), RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("store: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Admin().DeleteFilesystem(ctx); err != nil {
			t.Errorf("deleting test filesystem: %v", err)
		}
		s.Close()
	})
	return s
}

// PrintVersion prints the version of the cluster under test, so that every
// test log shows what it ran against. Call it from TestMain.
func PrintVersion(pkg string) {
	u := os.Getenv("ELASTICSEARCH_URL")
	if u == "" {
		return
	}
	s, err := store.New(store.Config{URLs: []string{u}, RequestTimeout: 10 * time.Second})
	if err != nil {
		fmt.Printf("%s: elasticsearch at %s: %v\n", pkg, u, err)
		return
	}
	defer s.Close()
	v, err := s.Admin().Version(context.Background())
	if err != nil {
		fmt.Printf("%s: elasticsearch at %s: %v\n", pkg, u, err)
		return
	}
	fmt.Printf("%s: testing against Elasticsearch %s at %s\n", pkg, v, u)
}
