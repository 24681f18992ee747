package cache

// Wait applies buffered Sets (ristretto applies them asynchronously).
func (c *Cache) Wait() {
	c.nodes.Wait()
	c.inodes.Wait()
}
