// Package locking is the cross-mount protocol of esfs: sessions with
// heartbeat leases, lock documents with one entry per holder (global,
// document and tree strategies), the rename journal with its commit point,
// and recovery of what a dead mount left half done.
//
// It reaches Elasticsearch only through Backend, which store.Store
// implements, and never imports go-fuse. Every decision it makes is a
// conditional write that Elasticsearch checks (op_type=create, or
// if_seq_no + if_primary_term): nothing here relies on reading and then
// writing without a condition, and no two machines' clocks are compared.
//
// LOCK ORDERING (in-process mutexes): Manager.mu may be held while taking
// Session.mu, never the reverse. No mutex is held across a request to
// Elasticsearch.
package locking

import (
	"context"
	"errors"

	"github.com/esfs/esfs/store"
)

// Sentinels.
var (
	// ErrLocked: the locks could not be had before the deadline.
	ErrLocked = errors.New("locked by another operation")
	// ErrLeaseLost: this mount's session expired or was declared dead; it
	// must not write (fenced) until a new session starts.
	ErrLeaseLost = errors.New("session lease lost")
	// ErrAborted: the operation was rolled back (by recovery, or because it
	// lost its locks) and had no effect.
	ErrAborted = errors.New("operation aborted")
	// ErrRetry: the operation was fenced off before it began (a reader
	// met its first writes before its record) and had no effect: run it
	// again.
	ErrRetry = errors.New("operation fenced off before it began")
)

// Backend is what locking needs from the store. *store.Store implements it.
// Writes are built with store's builders (store.WriteLocks, store.PutOp,
// store.PutDentry, ...) and sent with Write, one alone, or Bulk.
type Backend interface {
	Write(ctx context.Context, o store.BulkOp) (store.Version, error)
	Bulk(ctx context.Context, ops []store.BulkOp) ([]store.BulkResult, error)

	GetLocks(ctx context.Context, ids []string) ([]store.LockDoc, error)
	GetRecalls(ctx context.Context, session string) (store.Recalls, error)
	SearchLocks(ctx context.Context) ([]store.LockDoc, error)
	GetOp(ctx context.Context, id string) (store.OpRecord, error)
	SearchOps(ctx context.Context, states ...store.OpState) ([]store.OpRecord, error)
	GetSession(ctx context.Context, id string) (store.SessionDoc, error)
	ListSessions(ctx context.Context) ([]store.SessionDoc, error)

	// Path documents, for the rename journal, recovery and the view.
	GetDentry(ctx context.Context, path string) (store.Dentry, error)
	GetDentries(ctx context.Context, paths []string) ([]store.DentryResult, error)
	Refresh(ctx context.Context, which store.Searched) error
	ScanTree(root string, pageSize int) *store.Scanner
	ScanOp(op string, pageSize int) *store.Scanner
	ScanIntents(pageSize int) *store.Scanner
	ListDir(dir string, pageSize int) *store.Scanner
	SearchPaths(query string, inos []uint64, f store.SearchFilter, pageSize int) (*store.Scanner, error)

	// Directories' link counts, which renames move.
	AddDirLinks(ctx context.Context, ino uint64, delta int, t int64, unknown ...store.Inode) (store.Inode, error)
	// Inodes, whose link a finished rename drops (DropLink), and those a
	// finished batch drops, read together.
	InodeBackend
	GetInodes(ctx context.Context, inos []uint64) ([]store.InodeResult, error)
	// Files kept without links by the mounts that have them open
	// (store.KeptInodes), whose keepers the sweeper outlives.
	ScanInodes(which store.InodeSet) *store.InodeScanner
}

var _ Backend = (*store.Store)(nil)
