// Package vfs is the core of one esfs mount: its state and every
// operation on it, by inode and name, with no FUSE in it. The adapter
// (package fs) turns each kernel request into one call here and the
// answer into a reply; the in-process tests, the campaign's in-process
// mounts and esfs import call the same entry points without a kernel.
//
// The entry points, and what a caller hands in:
//
//   - in a directory (Dir: its inode and its stored path now): LookupAt,
//     MakeAt, CreateAt, LinkAt, RemoveAt, RenameAt, OpenDir (a Listing);
//   - on an inode the caller holds (Node: a Dir that also knows its type and
//     its name in its directory): Getattr, Setattr, Truncate, Readlink, the
//     xattr calls, SetLock;
//   - on an open file (Handle, from Open or CreateAt): Read, Write, Lseek,
//     Flush, Fsync, Release; CopyRange between two;
//   - by path, for callers without a kernel: Create, Link, Unlink, Rmdir,
//     Rename (ops.go).
//
// How a call runs is decided once, at its start, by what the mount holds
// of the directory it is made in (holdOf, hold.go): nothing (the call
// takes the tree-locking protocol's locks and writes the store, or reads
// in real time), a read delegation (lookups, listings and attributes
// answered from what the delegation knows, kept true by recalls, deleg.go),
// or a write delegation (names made, removed and renamed in memory,
// flushed in batches, writeback.go).
//
// What the kernel keeps of an answer is the adapter's to set, and the
// core's to decide: each answer says whether it may be kept (LookupAnswer,
// Getattr's kept, TellEntry, TellAttrs), and what the kernel must forget
// when another mount's change makes it wrong reaches the kernel through
// the KernelNodes the adapter hands in.
//
// What the mount keeps of a fact, and which copy wins. A read consults
// them in this order, and the first that has the fact answers:
//
//  1. an open file's own state (file.go, Current): the size and times of
//     what it has buffered, written or truncated, until its flush;
//  2. the pending batch of write delegations (writeback.go): names, inodes
//     and attribute changes made in memory (writeback.inode,
//     writeback.update), and a directory's attributes as its pending
//     entries change them (writeback.overlay, over what 3 holds); it is
//     the only copy of those until the flush lands;
//  3. the delegation of the directory (deleg.go, dirState): its names, the
//     attributes of its files with one link, its own attributes (selfAttr),
//     read after the grant and kept true by recalls, by this mount's own
//     writes (delegs.wrote, updateAttr) and by dropping what this mount
//     changes (forgetAttr); delegs.attrsIn only indexes them;
//  4. the daemon's cache (package cache), with delegations off only: with
//     them on, what no delegation holds is read in real time, since no
//     recall would tell the cache of another mount's change;
//  5. the store, through the locking view (what a half-done rename shows).
//
// A file's directories are the store's alone (store.Inode.Parents, moved
// by the rename journal): a change of its attributes recalls the
// directories the stored inode names, never one this mount remembers.
//
// Errors are Go errors: store's sentinels, locking's, and syscall.Errno
// values where the call decided the errno itself; the adapter maps them
// (fs.FS.toErrno). A call bounds its own wait (CallContext): no operation
// can hang however the cluster behaves.
package vfs
