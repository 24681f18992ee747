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
// Getattr's kept, TellEntry, TellAttrs; TellMoved for what a rename moved,
// which the kernel keeps as long as it was told at the source), and what
// the kernel must forget when another mount's change makes it wrong
// reaches the kernel through the KernelNodes the adapter hands in.
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
// What the mount keeps of a file's bytes, and what proves each copy
// current. A read consults them in this order (read.go, chunk):
//
//  1. the open file's buffered writes (openFile.dirty, write.go): this
//     mount's own, newer than anything stored until they land; a flush
//     that fails drops them and marks the kernel's pages stale
//     (forget, flush.go), as Linux drops dirty pages after a failed
//     write-back;
//  2. the chunks the open file keeps (openFile.clean, clean.go), each
//     with the data version it was read or written at (cleanVer;
//     store.DataVersion, which every chunk write raises on any mount, 0
//     for a chunk read absent, -1 unknown): right while the file is open
//     here until a change is learnt (another mount's inode newer than
//     the open file's, noteInode; a recall; a lock's grant, refresh; an
//     open's read no older than the open file's, openHandleRead), each
//     of which drops them all (dropClean);
//  3. read-ahead on its way (openFile.ahead, read.go): tagged with the
//     content's generation when asked (cgen), dropped on arrival if
//     anything of the above changed it since;
//  4. a chunk wholly past the end the mount has stored (the stored size,
//     or what it has sent past it): zeros, without asking, kept as a
//     chunk read absent (version 0), so that the next open checks it as
//     it checks the others; another mount's chunk can land there without
//     the inode changing (its close failed after its chunks landed, it
//     is past its dirty limit);
//  5. the pending batch (writeback.go): the chunks of a file made in
//     memory here, the only copy until the batch lands; no other mount
//     can have the file before then, and such chunks are never kept past
//     the file's last close (their version is unknown);
//  6. the store.
//
// Between two opens, a closed file's chunks are kept (keptFile, with the
// inode's version at the close and each chunk's data version), and the
// kernel may keep its pages (FOPEN_KEEP_CACHE). The next open reads the
// inode and the versions of every kept chunk in one round trip: a chunk
// is kept again only at the version it was kept at, and the kernel keeps
// its pages only if the inode is at the same version too, every chunk
// the kernel was given since it last dropped them is among those checked
// (a chunk dropped to keep the budget, or not checkable, marks them
// stale: kernelStale), and nothing was learnt from elsewhere meanwhile.
// An open that is not the first keeps the kernel's pages never; an open
// the kernel sends while the RELEASE of the file's last close is under
// way (FUSE sends it after close(2) returns) waits for it, in the adapter
// (fs/releaseorder.go), so that a reread right after a close is a first
// open.
//
// Two opens of a file may read it concurrently and be answered in either
// order: the open file takes a read only if it is no older than what it
// holds (by the inode's version, openHandleRead), so that no descriptor
// reads anything older than it already has, nor older than what another
// mount's close or fsync, returned before the open began, wrote (that
// open reads after it). A chunk read with an inode no newer than the open
// file's is not kept: a rewrite may leave the inode as it was, and a
// descriptor may have read the newer bytes since.
//
// Errors are Go errors: store's sentinels, locking's, and syscall.Errno
// values where the call decided the errno itself; the adapter maps them
// (fs.FS.toErrno). A call bounds its own wait (CallContext): no operation
// can hang however the cluster behaves.
package vfs
