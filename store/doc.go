// Package store is esfs's only door to Elasticsearch: it owns the document model
// (indices, mappings, ids, JSON) and turns Elasticsearch's answers into plain Go
// values and sentinel errors. No other package imports go-elasticsearch or sees
// Elasticsearch JSON.
//
// The model, per index (prefix P, default "fs"):
//
//	P           one path document (a Dentry) per path: {path, parent, name, ino,
//	            type}, plus an intent {op, role} while a rename is in flight.
//	            _id = base64url(sha256(path)), so paths up to 4096 bytes fit in
//	            the 512-byte _id limit; the full path is a keyword field.
//	P-inodes    one attribute document (an Inode) per inode number: mode, owner,
//	            size, times, link count, symlink target, xattrs. Attributes live
//	            apart from paths so that writes and setattr never race a rename
//	            that is rewriting the path documents (an upsert would revive the old path), and
//	            so that hard links are possible.
//	P-data      file contents in fixed-size chunks, _id = "<ino>.<chunk>", so a
//	            rename never moves bytes and no request carries a whole file.
//	P-locks     lock documents and operation records (locking/ gives them meaning).
//	P-sessions  one document per mount with its heartbeat counter.
//
// Every read that decides something is a realtime GET or mget; searches (listing,
// subtree scans) are near-realtime and callers refresh first when they must be
// complete. Every write that decides something is conditional: op_type=create,
// or if_seq_no + if_primary_term. The client's own retries are off: a request is
// retried only by code that knows it is safe to repeat.
//
// Every write is built as a BulkOp by the builder of its kind (CreateDentry,
// PutInode, PutOp, WriteLocks, WriteChunk, ...) and sent by one of two
// senders: Store.Write, one op as a single-document request, or Store.Bulk,
// many ops in _bulk requests. Both report an op's failure the same way.
package store
