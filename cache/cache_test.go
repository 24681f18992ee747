package cache_test

import (
	"sync"
	"testing"
	"time"

	"github.com/esfs/esfs/cache"
	"github.com/esfs/esfs/store"
)

func node(path string, ino uint64, mode uint32) store.Node {
	return store.Node{Dentry: store.Dentry{Path: path, Ino: ino, Type: store.TypeFile},
		Attr: store.Inode{Ino: ino, Type: store.TypeFile, Mode: mode}}
}

func newCache(t *testing.T, ttl time.Duration) *cache.Cache {
	c, err := cache.New(8<<20, ttl, ttl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestPositiveNegativeAndInvalidate(t *testing.T) {
	c := newCache(t, time.Minute)
	c.PutNode(node("/a", 5, 0o644), c.Gen())
	c.PutNegative("/missing", c.Gen())
	c.Wait()
	if n, neg, ok := c.Lookup("/a"); !ok || neg || n.Ino != 5 || n.Attr.Mode != 0o644 {
		t.Fatalf("positive entry: %+v %v %v", n, neg, ok)
	}
	if _, neg, ok := c.Lookup("/missing"); !ok || !neg {
		t.Fatalf("negative entry: %v %v", neg, ok)
	}
	c.InvalidatePath("/a")
	if _, _, ok := c.Lookup("/a"); ok {
		t.Fatal("entry survived its invalidation")
	}
	// Attributes come from the inode entry: a setattr through another
	// path shows up under this one.
	c.PutNode(node("/b", 6, 0o600), c.Gen())
	c.Wait()
	c.InvalidateInode(6)
	if _, _, ok := c.Lookup("/b"); ok {
		t.Fatal("path entry served without its inode's attributes")
	}
}

// TestStaleSetAfterInvalidation: a value read before an invalidation and
// stored after it must not come back (ristretto applies Sets late).
func TestStaleSetAfterInvalidation(t *testing.T) {
	c := newCache(t, time.Minute)
	gen := c.Gen() // a reader starts reading the store
	c.InvalidatePath("/x")
	c.InvalidateInode(7) // a writer changes /x meanwhile
	c.PutNode(node("/x", 7, 0o644), gen)
	c.Wait()
	if _, _, ok := c.Lookup("/x"); ok {
		t.Fatal("a value read before the invalidation was cached after it")
	}
	gen = c.Gen()
	c.InvalidateAllPaths()
	c.PutNegative("/y", gen)
	c.Wait()
	if _, _, ok := c.Lookup("/y"); ok {
		t.Fatal("a negative entry read before InvalidateAllPaths was cached")
	}
}

func TestTTL(t *testing.T) {
	c := newCache(t, 100*time.Millisecond)
	c.PutNode(node("/t", 8, 0o644), c.Gen())
	c.Wait()
	if _, _, ok := c.Lookup("/t"); !ok {
		t.Fatal("fresh entry missing")
	}
	time.Sleep(1200 * time.Millisecond) // ristretto expires on a 1s bucket
	if _, _, ok := c.Lookup("/t"); ok {
		t.Fatal("entry outlived its TTL")
	}
}

func TestDisabled(t *testing.T) {
	c := newCache(t, 0)
	c.PutNode(node("/z", 9, 0o644), c.Gen())
	c.Wait()
	if _, _, ok := c.Lookup("/z"); ok {
		t.Fatal("a zero TTL must disable the cache")
	}
}

func TestConcurrentUse(t *testing.T) {
	c := newCache(t, time.Minute)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				p := string(rune('a'+w)) + "/f"
				c.PutNode(node(p, uint64(w+1), 0o644), c.Gen())
				c.Lookup(p)
				if i%10 == 0 {
					c.InvalidatePath(p)
					c.InvalidateInode(uint64(w + 1))
				}
				if i%500 == 0 {
					c.InvalidateAllPaths()
				}
			}
		}(w)
	}
	wg.Wait()
}
