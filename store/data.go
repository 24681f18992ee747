package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
)

// MaxFileSize is the largest file size (and write end) esfs accepts; the
// kernel lets offsets up to 2^63-1 through, and fs/ answers EFBIG past
// this. 1 PiB: chunk numbers stay below 2^30, and a file of that size
// costs what is stored in it, never what its size says.
const MaxFileSize int64 = 1 << 50

// Data writes are fenced with external versions. Every chunk write and
// delete carries one (version_type=external: Elasticsearch applies it
// only if it is greater than the stored document's, or than a deleted
// one's while its tombstone lives, see DataGCDeletes). A version is a
// writer's data generation shifted left by DataCounterBits, plus a
// counter the writer advances with every request. Generations are
// allocated by compare-and-set on the inode document (Inode.Dgen), so a
// writer that starts later outranks every earlier one, and a request
// that its sender gave up on can never overwrite what was written after
// it, by that writer's retry or by anyone else.
const DataCounterBits = 20

// MaxDataGen is the largest generation a version can carry.
const MaxDataGen uint64 = 1<<(63-DataCounterBits) - 1

// DataVersion is the external version of request counter of a writer of
// generation gen (counter below 1<<DataCounterBits).
func DataVersion(gen, counter uint64) int64 {
	return int64(gen<<DataCounterBits | counter&(1<<DataCounterBits-1))
}

// Stamp is what every chunk written by one request carries: the
// writer's version, and its session, so that fsck tells a dead writer's
// leftovers from the unflushed data of a live one.
type Stamp struct {
	Version int64
	Session string
}

// DataGCDeletes is index.gc_deletes of the data index: how long a
// deleted chunk's version is remembered, so that a late write of an older
// version cannot bring the chunk back (past a truncation, which growing
// the file later would expose). Elasticsearch's default is 60s; every
// tombstone costs a little heap on the data nodes for that long.
const DataGCDeletes = "10m"

// Written is what a WriteChunks did: Refused lists the chunks that a
// write of a higher version already holds (the caller decides whether it
// is the later writer); Created counts the chunks that did not exist
// before (for Inode.Chunks).
type Written struct {
	Refused []int64
	Created int64
}

// ReadChunks reads chunks first..last (inclusive) of ino in one round trip.
// Absent chunks (holes of a sparse file, or never written) are absent from
// data; the caller reads them as zeros up to the file size. vers has the
// data version (DataVersion) each chunk was read at, 0 for an absent one:
// what a reader keeps a chunk by (InodeAndChunkVersions says whether it is
// still that).
func (s *Store) ReadChunks(ctx context.Context, ino uint64, first, last int64) (data map[int64][]byte, vers map[int64]int64, err error) {
	if last < first {
		return map[int64][]byte{}, map[int64]int64{}, nil
	}
	ids := make([]string, 0, last-first+1)
	for n := first; n <= last; n++ {
		ids = append(ids, chunkID(ino, n))
	}
	what := fmt.Sprintf("reading chunks %d-%d of inode %d", first, last, ino)
	docs, err := s.mget(ctx, s.idx.name(dataIndex), ids, what)
	if err != nil {
		return nil, nil, err
	}
	out, vers := make(map[int64][]byte, len(docs)), make(map[int64]int64, len(docs))
	for i, g := range docs {
		n := first + int64(i)
		if !g.Found {
			vers[n] = 0
			continue
		}
		data, err := s.chunkOf(g, ino, n, what)
		if err != nil {
			return nil, nil, err
		}
		out[n], vers[n] = data, g.Ext
	}
	return out, vers, nil
}

// chunkOf decodes chunk n of ino from its document g.
func (s *Store) chunkOf(g getResult, ino uint64, n int64, what string) ([]byte, error) {
	c, err := decodeChunk(g.Source, g.version())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, damaged(g.Index, g.ID, fmt.Errorf("chunk %d: %w: %v", n, ErrCorrupt, err)))
	}
	data := c.bytes()
	if c.Ino != ino || c.Chunk != n || (s.chunkSize > 0 && int64(len(data)) > s.chunkSize) {
		return nil, fmt.Errorf("%s: %w", what, damaged(g.Index, g.ID, fmt.Errorf("chunk %d holds inode %d chunk %d of %d bytes: %w", n, c.Ino, c.Chunk, len(data), ErrCorrupt)))
	}
	return data, nil
}

// InodeAndChunkVersions reads inode ino, and the data versions of its
// chunks (0: absent) without their bytes, in one round trip: what an open
// checks kept chunks against.
func (s *Store) InodeAndChunkVersions(ctx context.Context, ino uint64, chunks []int64) (Inode, map[int64]int64, error) {
	what := fmt.Sprintf("reading inode %d and the versions of %d of its chunks", ino, len(chunks))
	refs := make([]docRef, 0, 1+len(chunks))
	refs = append(refs, docRef{index: s.idx.name(inodesIndex), id: inodeID(ino)})
	for _, c := range chunks {
		refs = append(refs, docRef{index: s.idx.name(dataIndex), id: chunkID(ino, c), noSource: true})
	}
	docs, err := s.mgetMixed(ctx, refs, what)
	if err != nil {
		return Inode{}, nil, err
	}
	if !docs[0].Found {
		return Inode{}, nil, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	n, err := inodeOf(docs[0], ino)
	if err != nil {
		return Inode{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	vers := make(map[int64]int64, len(chunks))
	for i, c := range chunks {
		if d := docs[1+i]; d.Found {
			vers[c] = d.Ext
		} else {
			vers[c] = 0
		}
	}
	return n, vers, nil
}

// GetInodeAndChunk reads inode ino and its chunk c in one round trip (an
// appender's look at the file's end, and at the chunk it then writes
// into; an open's first chunk), with the chunk's data version. data is nil
// and ver 0 for a chunk not stored.
func (s *Store) GetInodeAndChunk(ctx context.Context, ino uint64, c int64) (n Inode, data []byte, ver int64, err error) {
	what := fmt.Sprintf("reading inode %d and its chunk %d", ino, c)
	docs, err := s.mgetMixed(ctx, []docRef{{index: s.idx.name(inodesIndex), id: inodeID(ino)}, {index: s.idx.name(dataIndex), id: chunkID(ino, c)}}, what)
	if err != nil {
		return Inode{}, nil, 0, err
	}
	if !docs[0].Found {
		return Inode{}, nil, 0, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	if n, err = inodeOf(docs[0], ino); err != nil {
		return Inode{}, nil, 0, fmt.Errorf("%s: %w", what, err)
	}
	if !docs[1].Found {
		return n, nil, 0, nil
	}
	if data, err = s.chunkOf(docs[1], ino, c, what); err != nil {
		return Inode{}, nil, 0, err
	}
	return n, data, docs[1].Ext, nil
}

// WriteChunks stores whole chunks of ino (each at most ChunkSize bytes; a
// shorter chunk reads as zeros beyond its end), all with stamp st. Writes
// of different chunks are independent: a failure leaves the others
// written. err is a failure other than a refusal, after which the outcome
// of every chunk is unknown.
func (s *Store) WriteChunks(ctx context.Context, ino uint64, chunks map[int64][]byte, st Stamp) (w Written, err error) {
	if len(chunks) == 0 {
		return w, nil
	}
	ops := make([]BulkOp, 0, len(chunks))
	nums := make([]int64, 0, len(chunks))
	for n, data := range chunks {
		o := WriteChunk(ino, n, data, st)
		if err := s.check(o); err != nil {
			return w, err
		}
		ops = append(ops, o)
		nums = append(nums, n)
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return w, err
	}
	for i, r := range res {
		switch {
		case r.Err == nil:
			if r.Created {
				w.Created++
			}
		case errors.Is(r.Err, ErrConflict):
			w.Refused = append(w.Refused, nums[i])
		default:
			return Written{}, r.Err
		}
	}
	return w, nil
}

// WriteChunk stores chunk n of ino (at most the filesystem's chunk size,
// which the Store that sends it checks) with stamp st.
func WriteChunk(ino uint64, n int64, data []byte, st Stamp) BulkOp {
	if st.Version <= 0 {
		return refused(fmt.Errorf("writing chunk %d of inode %d without a data version: %w", n, ino, ErrInvalid))
	}
	var hb bytes.Buffer
	hb.WriteString(`{"ino":` + strconv.FormatUint(ino, 10) + `,"chunk":` + strconv.FormatInt(n, 10))
	if st.Session != "" {
		hb.WriteString(`,"sess":`)
		writeJSONString(&hb, st.Session)
	}
	return BulkOp{action: "index", index: dataIndex, id: chunkID(ino, n), extVersion: st.Version,
		chunk: &chunkSource{ino: ino, chunk: n, head: hb.String(), data: data, text: isText(data)},
		what:  fmt.Sprintf("writing chunk %d of inode %d", n, ino)}
}

// deleteByIDLimit: a range of at most this many chunks is deleted by id,
// one bulk item each whether stored or not (which also leaves a
// tombstone against late writes of every one of them); a larger range is
// deleted by finding the stored chunks, so that its cost follows what is
// stored and not the size.
const deleteByIDLimit = 256

// DeleteChunks removes chunks first..last of ino with data version
// version, and returns how many it removed; absent ones are fine, and so
// are chunks a write of a higher version holds (for a caller to whom that
// write is later, and stays: see TryDeleteChunks for one that decides).
// A range of more than deleteByIDLimit chunks is found by search after a
// refresh of the data index, and then every stored chunk from first on
// goes, past last too.
func (s *Store) DeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (deleted int64, err error) {
	d, err := s.TryDeleteChunks(ctx, ino, first, last, version)
	return d.Count, err
}

// Deleted is what a TryDeleteChunks did: Count chunks removed; Refused,
// the chunks that a write or delete of a version at least as high holds
// (as Written.Refused, the caller decides whether it is the later one).
type Deleted struct {
	Count   int64
	Refused []int64
}

// TryDeleteChunks is DeleteChunks, reporting the chunks it was refused.
func (s *Store) TryDeleteChunks(ctx context.Context, ino uint64, first, last int64, version int64) (d Deleted, err error) {
	if last < first {
		return d, nil
	}
	if version <= 0 {
		return d, fmt.Errorf("deleting chunks of inode %d without a data version: %w", ino, ErrInvalid)
	}
	if last-first < deleteByIDLimit {
		nums := make([]int64, 0, last-first+1)
		for n := first; n <= last; n++ {
			nums = append(nums, n)
		}
		err := s.deleteChunkNums(ctx, ino, nums, version, &d)
		return d, err
	}
	if err := s.Refresh(ctx, SearchedData); err != nil {
		return d, err
	}
	from := first
	for {
		nums, err := s.storedChunks(ctx, ino, from, DefaultPageSize)
		if err != nil {
			return d, err
		}
		if len(nums) == 0 {
			return d, nil
		}
		err = s.deleteChunkNums(ctx, ino, nums, version, &d)
		if err != nil || len(nums) < DefaultPageSize {
			return d, err
		}
		from = nums[len(nums)-1] + 1
	}
}

// DeleteChunkOps are the deletes of chunks first to last of ino at data
// version version, to send in a bulk with others: for a few chunks (at
// most MaxChunkOps), where DeleteChunks would spend a request on them
// alone. A chunk already gone answers not found, which is no error here.
func DeleteChunkOps(ino uint64, first, last int64, version int64) []BulkOp {
	ops := make([]BulkOp, 0, max(0, last-first+1))
	for n := first; n <= last; n++ {
		ops = append(ops, deleteChunkOp(ino, n, version))
	}
	return ops
}

// MaxChunkOps bounds DeleteChunkOps: past it, DeleteChunks is the way.
const MaxChunkOps = deleteByIDLimit

func deleteChunkOp(ino uint64, n int64, version int64) BulkOp {
	return BulkOp{action: "delete", index: dataIndex, id: chunkID(ino, n), extVersion: version,
		what: fmt.Sprintf("deleting chunk %d of inode %d", n, ino)}
}

// deleteChunkNums deletes chunks nums of ino at version, adding what it
// did to d.
func (s *Store) deleteChunkNums(ctx context.Context, ino uint64, nums []int64, version int64, d *Deleted) error {
	ops := make([]BulkOp, 0, len(nums))
	for _, n := range nums {
		ops = append(ops, deleteChunkOp(ino, n, version))
	}
	res, err := s.Bulk(ctx, ops)
	if err != nil {
		return err
	}
	for i, r := range res {
		switch {
		case r.Deleted:
			d.Count++
		case errors.Is(r.Err, ErrConflict):
			d.Refused = append(d.Refused, nums[i])
		case r.Err != nil && !isNotFound(r.Err):
			return r.Err
		}
	}
	return nil
}
