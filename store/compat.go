package store

import (
	"context"
	"fmt"
)

// The methods below are the write API before builders: each is a builder
// and a sender. They go once their callers use the builders.

// CreateDentry writes a new path document; ErrExists if the path is taken.
func (s *Store) CreateDentry(ctx context.Context, d Dentry) (Version, error) {
	return s.Write(ctx, CreateDentry(d))
}

// PutDentry overwrites a path document if it is still at version ifVer.
func (s *Store) PutDentry(ctx context.Context, d Dentry, ifVer Version) (Version, error) {
	return s.Write(ctx, PutDentry(d, ifVer))
}

// DeleteDentry removes a path document if it is still at version ifVer.
func (s *Store) DeleteDentry(ctx context.Context, path string, ifVer Version) (Version, error) {
	return s.Write(ctx, DeleteDentry(path, ifVer))
}

// CreateInode writes a new inode document; ErrExists if the number is taken.
func (s *Store) CreateInode(ctx context.Context, n Inode) (Version, error) {
	return s.Write(ctx, CreateInode(n))
}

// PutInode overwrites an inode document if it is still at version ifVer.
func (s *Store) PutInode(ctx context.Context, n Inode, ifVer Version) (Version, error) {
	return s.Write(ctx, PutInode(n, ifVer))
}

// DeleteInode removes an inode document if it is still at version ifVer.
func (s *Store) DeleteInode(ctx context.Context, ino uint64, ifVer Version) (Version, error) {
	return s.Write(ctx, DeleteInode(ino, ifVer))
}

// CreateOp writes a new operation record (op_type=create).
func (s *Store) CreateOp(ctx context.Context, r OpRecord) (Version, error) {
	return s.Write(ctx, CreateOp(r))
}

// PutOp overwrites an operation record if it is still at ifVer.
func (s *Store) PutOp(ctx context.Context, r OpRecord, ifVer Version) (Version, error) {
	return s.Write(ctx, PutOp(r, ifVer))
}

// DeleteOp removes a finished operation record if it is still at ifVer.
func (s *Store) DeleteOp(ctx context.Context, id string, ifVer Version) error {
	_, err := s.Write(ctx, DeleteOp(id, ifVer))
	return err
}

// CreateSession registers a new session (op_type=create).
func (s *Store) CreateSession(ctx context.Context, d SessionDoc) (Version, error) {
	return s.Write(ctx, CreateSession(d))
}

// PutSession overwrites a session if it is still at ifVer.
func (s *Store) PutSession(ctx context.Context, d SessionDoc, ifVer Version) (Version, error) {
	return s.Write(ctx, PutSession(d, ifVer))
}

// DeleteSession removes a session document at ifVer.
func (s *Store) DeleteSession(ctx context.Context, id string, ifVer Version) error {
	_, err := s.Write(ctx, DeleteSession(id, ifVer))
	return err
}

// GetSessions reads several sessions in one round trip; missing ones are
// absent from the map.
func (s *Store) GetSessions(ctx context.Context, ids []string) (map[string]SessionDoc, error) {
	docs, errs, err := getDocs(ctx, s, sessionKind, ids, fmt.Sprintf("reading %d sessions", len(ids)))
	if err != nil {
		return nil, err
	}
	out := make(map[string]SessionDoc, len(docs))
	for i, d := range docs {
		if isNotFound(errs[i]) {
			continue
		}
		if errs[i] != nil {
			return nil, fmt.Errorf("session %s: %w", ids[i], errs[i])
		}
		out[ids[i]] = d
	}
	return out, nil
}

// WriteLocks applies lock writes in one bulk.
func (s *Store) WriteLocks(ctx context.Context, ws []LockWrite) ([]BulkResult, error) {
	return s.Bulk(ctx, WriteLocks(ws))
}

// OpsWriteLocks are the bulk items of WriteLocks.
func (s *Store) OpsWriteLocks(ws []LockWrite) ([]BulkOp, error) {
	ops := WriteLocks(ws)
	for _, o := range ops {
		if o.err != nil {
			return nil, o.err
		}
	}
	return ops, nil
}

func (s *Store) checked(o BulkOp) (BulkOp, error) {
	if o.err != nil {
		return BulkOp{}, o.err
	}
	return o, nil
}

// OpCreateDentry: create the path document if the path is free.
func (s *Store) OpCreateDentry(d Dentry) (BulkOp, error) { return s.checked(CreateDentry(d)) }

// OpPutDentry: overwrite the path document if it is still at ifVer.
func (s *Store) OpPutDentry(d Dentry, ifVer Version) (BulkOp, error) {
	return s.checked(PutDentry(d, ifVer))
}

// OpDeleteDentry: delete the path document if it is still at ifVer.
func (s *Store) OpDeleteDentry(path string, ifVer Version) (BulkOp, error) {
	return s.checked(DeleteDentry(path, ifVer))
}

// OpCreateInode: create the inode document if the number is free.
func (s *Store) OpCreateInode(n Inode) (BulkOp, error) { return s.checked(CreateInode(n)) }

// OpPutInode: overwrite the inode document if it is still at ifVer.
func (s *Store) OpPutInode(n Inode, ifVer Version) (BulkOp, error) {
	return s.checked(PutInode(n, ifVer))
}

// OpDeleteInode: delete the inode document if it is still at ifVer.
func (s *Store) OpDeleteInode(ino uint64, ifVer Version) (BulkOp, error) {
	return s.checked(DeleteInode(ino, ifVer))
}

// OpPutOp is PutOp as a bulk item.
func (s *Store) OpPutOp(r OpRecord, ifVer Version) (BulkOp, error) { return s.checked(PutOp(r, ifVer)) }

// OpTouchInode sets the mtime and ctime of an inode with a partial update.
func (s *Store) OpTouchInode(ino uint64, mtime, ctime int64) BulkOp {
	return TouchInode(ino, mtime, ctime)
}

// OpSetCtime sets an inode's ctime with a partial update.
func (s *Store) OpSetCtime(ino uint64, ctime int64) BulkOp { return SetCtime(ino, ctime) }

// OpWriteChunk stores chunk n of ino with stamp st.
func (s *Store) OpWriteChunk(ino uint64, n int64, data []byte, st Stamp) (BulkOp, error) {
	o := WriteChunk(ino, n, data, st)
	if err := s.check(o); err != nil {
		return BulkOp{}, err
	}
	return o, nil
}

// DeleteChunkRefs deletes the chunks refs names, each only if it is still
// as listed. errs holds each chunk's outcome (ErrConflict: changed since).
func (s *Store) DeleteChunkRefs(ctx context.Context, refs []ChunkRef) (errs []error, err error) {
	ops := make([]BulkOp, len(refs))
	for i, r := range refs {
		ops[i] = DeleteChunkRef(r)
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return nil, err
	}
	errs = make([]error, len(res))
	for i, r := range res {
		errs[i] = r.Err
	}
	return errs, nil
}
