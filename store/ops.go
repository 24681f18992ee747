package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
)

// A write is built first, as a BulkOp, by the builder of its document's kind
// (CreateDentry, PutInode, PutOp, WriteLocks, WriteChunk, ...), and sent
// afterwards: alone with Store.Write, or with others in one request with
// Store.Bulk. Builders are functions of the document alone and never contact
// the cluster, so the code that decides what to write needs no Store for it,
// and whoever wraps a Store (to count or to fail requests) wraps the two
// senders and sees every write.

// indexRole names one of a filesystem's indices. An op carries the role,
// and the Store that sends it puts the name of its own index in its place.
type indexRole uint8

const (
	pathsIndex indexRole = iota + 1
	inodesIndex
	dataIndex
	locksIndex
	sessionsIndex
)

// WriteAliasSuffix ends the name of the alias every write of a document
// goes through: index fs-data is written as fs-data-W. An alias may hold a
// capital letter where an index name may not, so a write that finds the
// alias gone (the filesystem destroyed while a mount was frozen, a request
// retried late) fails with an invalid index name: Elasticsearch can never
// create an index for it, whatever the cluster's settings
// (action.auto_create_index, templates) and whatever the write (a delete
// with an external version creates the index it names, require_alias or
// not).
const WriteAliasSuffix = "-W"

// alias is the write alias of index role r.
func (i indices) alias(r indexRole) string { return i.name(r) + WriteAliasSuffix }

func (i indices) name(r indexRole) string {
	switch r {
	case pathsIndex:
		return i.Paths
	case inodesIndex:
		return i.Inodes
	case dataIndex:
		return i.Data
	case locksIndex:
		return i.Locks
	case sessionsIndex:
		return i.Sessions
	}
	return ""
}

// BulkOp is one write of one document, made by a builder. A builder that
// refuses its arguments (a path that is not clean, a compare-and-set
// without a version) returns an op that carries the refusal: Err reports
// it, and Write and Bulk return it without sending anything.
type BulkOp struct {
	action string // "create", "index", "update" or "delete"
	index  indexRole
	id     string
	ifVer  Version
	// extVersion, if set, makes the item apply only if it is greater
	// than the stored document's version (version_type=external): data
	// chunks, see DataVersion.
	extVersion int64
	doc        []byte // the source, nil for delete
	// chunk, if set, is the source instead of doc: a data chunk is
	// encoded straight into the request body, not kept as a second,
	// base64 copy until its batch is sent.
	chunk *chunkSource
	// blocksOf, if set, is the type, size and chunk count of the inode
	// that doc holds, from which its "blocks" field is added when the
	// op is sent: st_blocks depends on the chunk size, a setting of the
	// filesystem that builders do not know.
	blocksOf *Inode
	what     string // names the write in errors
	// retryOnConflict lets Elasticsearch re-apply a partial update itself.
	retryOnConflict int
	err             error
}

// Err is the builder's refusal of the op, or nil.
func (o BulkOp) Err() error { return o.err }

// encoding is what a Store knows of how its documents are stored, and
// builders do not: an op's source is completed with it when sent.
type encoding struct {
	// textChunks: the data index maps "text", and text chunks are
	// stored as strings (see chunkDoc).
	textChunks bool
	// blocksChunkSize, if not 0, is the chunk size inode documents'
	// "blocks" field is computed with (0: the inode index does not map
	// the field, or the chunk size is not known).
	blocksChunkSize int64
}

// size is the length of the op's source once encoded.
func (o BulkOp) size(e encoding) int {
	if o.chunk != nil {
		return o.chunk.size(e.textChunks)
	}
	if o.blocksOf != nil {
		return len(o.doc) + len(`,"blocks":`) + 20
	}
	return len(o.doc)
}

// hasSource: the op's request carries a document.
func (o BulkOp) hasSource() bool { return o.chunk != nil || o.doc != nil }

// writeSource appends the op's source to buf.
func (o BulkOp) writeSource(buf *bytes.Buffer, e encoding) {
	switch {
	case o.chunk != nil:
		o.chunk.encode(buf, e.textChunks)
	case o.blocksOf != nil && e.blocksChunkSize > 0 && len(o.doc) > 2:
		buf.Write(o.doc[:len(o.doc)-1]) // the object without its '}'
		buf.WriteString(`,"blocks":`)
		buf.WriteString(strconv.FormatInt(o.blocksOf.Blocks(e.blocksChunkSize), 10))
		buf.WriteByte('}')
	default:
		buf.Write(o.doc)
	}
}

func newOp(action string, index indexRole, id string, ifVer Version, doc any, what string) BulkOp {
	o := BulkOp{action: action, index: index, id: id, ifVer: ifVer, what: what}
	if doc != nil {
		b, err := json.Marshal(doc)
		if err != nil {
			return refused(fmt.Errorf("%s: %w: %v", what, ErrInvalid, err))
		}
		o.doc = b
	}
	return o
}

func refused(err error) BulkOp { return BulkOp{err: err} }

// chunkSource is the source of a chunk write: head is its JSON up to the
// bytes, text whether the bytes may be stored as a string.
type chunkSource struct {
	ino   uint64
	chunk int64
	head  string
	data  []byte
	text  bool
}

func (c *chunkSource) size(textChunks bool) int {
	if textChunks && c.text {
		return len(c.head) + len(c.data)*6/5 + 16 // escapes are rare in text
	}
	return len(c.head) + base64.StdEncoding.EncodedLen(len(c.data)) + 16
}

func (c *chunkSource) encode(b *bytes.Buffer, textChunks bool) {
	b.WriteString(c.head)
	if textChunks && c.text {
		b.WriteString(`,"text":`)
		writeJSONString(b, string(c.data))
		b.WriteByte('}')
		return
	}
	b.WriteString(`,"data":"`)
	enc := base64.NewEncoder(base64.StdEncoding, b)
	_, _ = enc.Write(c.data)
	_ = enc.Close()
	b.WriteString(`"}`)
}

func writeJSONString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s)
	buf.Write(b)
}
