// Package cache holds what the mount has recently read from the store: path ->
// node (positive and negative entries) and ino -> attributes, each with a TTL.
// It is an accelerator only; it never decides anything that must be exact
// (locking and every conditional write read the store in real time).
//
// ristretto applies Set asynchronously, so a Set of a value read before an
// invalidation could land after it and bring a stale value back. Every entry
// therefore carries the generation at which its read started, and an
// invalidation records the generation at which it happened; an entry read
// before the last invalidation of its key is ignored.
package cache

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"github.com/esfs/esfs/store"
	"github.com/prometheus/client_golang/prometheus"
)

// Cache is safe for concurrent use.
type Cache struct {
	nodes  *ristretto.Cache[string, nodeEntry]
	inodes *ristretto.Cache[uint64, inodeEntry]
	ttl    time.Duration
	negTTL time.Duration

	gen atomic.Uint64 // advances on every invalidation

	// Lookups answered (hits) or not (misses), for metrics: [0] paths
	// (negative entries count as hits), [1] inodes.
	hits, misses [2]atomic.Uint64

	mu sync.Mutex // protects the following
	// pathInval and inoInval hold, for keys invalidated within the last TTL,
	// the generation of their last invalidation. Older records are pruned:
	// an entry older than the TTL is expired anyway.
	pathInval map[string]stamp
	inoInval  map[uint64]stamp
	allInval  uint64 // generation of the last InvalidateAllPaths
	lastPrune time.Time
}

type stamp struct {
	gen uint64
	at  time.Time
}

type nodeEntry struct {
	gen      uint64
	negative bool
	node     store.Node
}

type inodeEntry struct {
	gen   uint64
	inode store.Inode
}

// New returns a cache of about maxBytes, whose entries live ttl (negative
// entries negTTL). A zero ttl disables the cache.
func New(maxBytes int64, ttl, negTTL time.Duration) (*Cache, error) {
	if maxBytes < 1<<20 {
		maxBytes = 1 << 20
	}
	// ristretto wants ~10 counters per item it may hold; an entry costs a few
	// hundred bytes.
	counters := maxBytes / 300 * 10
	nodes, err := ristretto.NewCache(&ristretto.Config[string, nodeEntry]{
		NumCounters: counters, MaxCost: maxBytes * 3 / 4, BufferItems: 64,
	})
	if err != nil {
		return nil, err
	}
	inodes, err := ristretto.NewCache(&ristretto.Config[uint64, inodeEntry]{
		NumCounters: counters / 2, MaxCost: maxBytes / 4, BufferItems: 64,
	})
	if err != nil {
		return nil, err
	}
	return &Cache{nodes: nodes, inodes: inodes, ttl: ttl, negTTL: negTTL,
		pathInval: map[string]stamp{}, inoInval: map[uint64]stamp{}}, nil
}

// Gen returns the current generation. Read it before reading the store, and
// pass it to Put*, so that a value read before an invalidation is dropped.
func (c *Cache) Gen() uint64 { return c.gen.Load() }

func (c *Cache) pathValid(path string, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen < c.allInval {
		return false
	}
	s, ok := c.pathInval[path]
	return !ok || gen >= s.gen
}

func (c *Cache) inoValid(ino uint64, gen uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.inoInval[ino]
	return !ok || gen >= s.gen
}

// Lookup returns a cached node for path. negative means the path is known
// not to exist; ok false means nothing is known. The node's attributes come
// from the inode cache, so that a setattr through another path is seen.
func (c *Cache) Lookup(path string) (n store.Node, negative, ok bool) {
	if c.ttl <= 0 {
		return store.Node{}, false, false
	}
	e, found := c.nodes.Get(path)
	if !found || !c.pathValid(path, e.gen) {
		c.misses[0].Add(1)
		return store.Node{}, false, false
	}
	if e.negative {
		c.hits[0].Add(1)
		return store.Node{}, true, true
	}
	attr, found := c.Inode(e.node.Ino)
	if !found {
		c.misses[0].Add(1)
		return store.Node{}, false, false
	}
	c.hits[0].Add(1)
	e.node.Attr = attr
	return e.node, false, true
}

// PutNode caches a node read at generation gen.
func (c *Cache) PutNode(n store.Node, gen uint64) {
	if c.ttl <= 0 || !c.pathValid(n.Path, gen) {
		return
	}
	c.nodes.SetWithTTL(n.Path, nodeEntry{gen: gen, node: n}, int64(200+2*len(n.Path)), c.ttl)
	c.PutInode(n.Attr, gen)
}

// PutNegative caches that path did not exist at generation gen.
func (c *Cache) PutNegative(path string, gen uint64) {
	if c.negTTL <= 0 || !c.pathValid(path, gen) {
		return
	}
	c.nodes.SetWithTTL(path, nodeEntry{gen: gen, negative: true}, int64(100+len(path)), c.negTTL)
}

// Inode returns cached attributes of ino.
func (c *Cache) Inode(ino uint64) (store.Inode, bool) {
	if c.ttl <= 0 {
		return store.Inode{}, false
	}
	e, found := c.inodes.Get(ino)
	if !found || !c.inoValid(ino, e.gen) {
		c.misses[1].Add(1)
		return store.Inode{}, false
	}
	c.hits[1].Add(1)
	return e.inode, true
}

// PutInode caches attributes read at generation gen.
func (c *Cache) PutInode(n store.Inode, gen uint64) {
	if c.ttl <= 0 || !c.inoValid(n.Ino, gen) {
		return
	}
	c.inodes.SetWithTTL(n.Ino, inodeEntry{gen: gen, inode: n}, int64(200+len(n.Target)+xattrBytes(n)), c.ttl)
}

func xattrBytes(n store.Inode) int {
	t := 0
	for k, v := range n.Xattrs {
		t += len(k) + len(v)
	}
	return t
}

// InvalidatePath forgets what is known of path.
func (c *Cache) InvalidatePath(path string) {
	g := c.gen.Add(1)
	c.mu.Lock()
	c.pathInval[path] = stamp{g, time.Now()}
	c.pruneLocked()
	c.mu.Unlock()
	c.nodes.Del(path)
}

// InvalidateInode forgets the attributes of ino.
func (c *Cache) InvalidateInode(ino uint64) {
	g := c.gen.Add(1)
	c.mu.Lock()
	c.inoInval[ino] = stamp{g, time.Now()}
	c.pruneLocked()
	c.mu.Unlock()
	c.inodes.Del(ino)
}

// InvalidateAllPaths forgets every path (after a directory rename, whose
// subtree cannot be enumerated in the cache). Attributes stay: they are
// keyed by ino, which a rename does not change.
func (c *Cache) InvalidateAllPaths() {
	g := c.gen.Add(1)
	c.mu.Lock()
	c.allInval = g
	c.mu.Unlock()
	c.nodes.Clear()
}

func (c *Cache) pruneLocked() {
	now := time.Now()
	if now.Sub(c.lastPrune) < time.Second {
		return
	}
	c.lastPrune = now
	keep := c.ttl
	if c.negTTL > keep {
		keep = c.negTTL
	}
	keep += time.Second
	for k, s := range c.pathInval {
		if now.Sub(s.at) > keep {
			delete(c.pathInval, k)
		}
	}
	for k, s := range c.inoInval {
		if now.Sub(s.at) > keep {
			delete(c.inoInval, k)
		}
	}
}

// Close stops the cache's goroutines.
func (c *Cache) Close() {
	c.nodes.Close()
	c.inodes.Close()
}

// Register exposes the hit and miss counts as esfs_cache_hits_total and
// esfs_cache_misses_total, labelled kind="path" or "inode".
func (c *Cache) Register(reg prometheus.Registerer) {
	for i, kind := range [...]string{"path", "inode"} {
		i := i
		reg.MustRegister(
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "esfs_cache_hits_total",
				Help: "Metadata cache lookups answered by the cache.", ConstLabels: prometheus.Labels{"kind": kind}},
				func() float64 { return float64(c.hits[i].Load()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "esfs_cache_misses_total",
				Help: "Metadata cache lookups that went to Elasticsearch.", ConstLabels: prometheus.Labels{"kind": kind}},
				func() float64 { return float64(c.misses[i].Load()) }),
		)
	}
}
