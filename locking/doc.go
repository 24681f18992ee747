// Package locking will hold the cross-mount protocol: sessions with
// heartbeat leases, the global, document and tree lock strategies, the
// rename journal and recovery (issue 4). It reaches Elasticsearch only
// through an interface that store/ implements, and never imports go-fuse.
package locking
