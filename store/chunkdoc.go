package store

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// chunkDoc is the JSON of one data chunk. encoding/json writes []byte as
// base64, which is what a "binary" field takes.
//
// A chunk that is text (valid UTF-8 without NUL bytes) is stored as a
// string in "text" instead, which Elasticsearch analyses: that is what
// `esfs search` finds, at no cost in space (base64 would be a third
// larger). Either way the bytes read back are the bytes written.
type chunkDoc struct {
	Ino   uint64  `json:"ino"`
	Chunk int64   `json:"chunk"`
	Sess  string  `json:"sess,omitempty"`
	Data  []byte  `json:"data,omitempty"`
	Text  *string `json:"text,omitempty"`
}

func (c chunkDoc) bytes() []byte {
	if c.Text != nil {
		return []byte(*c.Text)
	}
	return c.Data
}

// isText: bytes that can travel as a JSON string unchanged and are worth
// indexing. A text file whose chunk boundary splits a multi-byte character
// has that chunk stored as binary (and not searchable).
func isText(b []byte) bool {
	return len(b) > 0 && bytes.IndexByte(b, 0) < 0 && utf8.Valid(b)
}

// decodeChunk decodes a chunk document, by decodeChunkFast when it can.
func decodeChunk(src []byte, _ Version) (chunkDoc, error) {
	c, ok := decodeChunkFast(src)
	if !ok {
		if err := json.Unmarshal(src, &c); err != nil {
			return chunkDoc{}, err
		}
	}
	return c, nil
}

// decodeChunkFast decodes a chunk document in the exact form OpWriteChunk
// writes ({"ino":N,"chunk":N,"sess":"ID","data":"BASE64"}, sess optional), which Elasticsearch returns
// byte for byte: one base64 pass instead of encoding/json's validation and
// decoding passes over a megabyte. Anything else (a text chunk with
// escapes, a document written otherwise) is left to encoding/json (ok false).
func decodeChunkFast(src []byte) (chunkDoc, bool) {
	var c chunkDoc
	rest, ok := bytes.CutPrefix(src, []byte(`{"ino":`))
	if !ok {
		return c, false
	}
	num := func(b []byte, end byte) (uint64, []byte, bool) {
		i := bytes.IndexByte(b, end)
		if i <= 0 {
			return 0, nil, false
		}
		v, err := strconv.ParseUint(string(b[:i]), 10, 64)
		return v, b[i+1:], err == nil
	}
	ino, rest, ok := num(rest, ',')
	if !ok {
		return c, false
	}
	if rest, ok = bytes.CutPrefix(rest, []byte(`"chunk":`)); !ok {
		return c, false
	}
	chunk, rest, ok := num(rest, ',')
	if !ok || chunk > 1<<62 {
		return c, false
	}
	if r, hasSess := bytes.CutPrefix(rest, []byte(`"sess":"`)); hasSess {
		i := bytes.IndexByte(r, '"')
		if i < 0 || bytes.IndexByte(r[:i], '\\') >= 0 || !bytes.HasPrefix(r[i:], []byte(`",`)) {
			return c, false
		}
		c.Sess, rest = string(r[:i]), r[i+2:]
	}
	field := "data"
	if r, isText := bytes.CutPrefix(rest, []byte(`"text":"`)); isText {
		rest, field = r, "text"
	} else if rest, ok = bytes.CutPrefix(rest, []byte(`"data":"`)); !ok {
		return c, false
	}
	body, ok := bytes.CutSuffix(rest, []byte(`"}`))
	if !ok || bytes.IndexByte(body, '"') >= 0 || bytes.IndexByte(body, '\\') >= 0 {
		return c, false // escapes (text), or not our form
	}
	c.Ino, c.Chunk = ino, int64(chunk)
	if field == "text" {
		if !utf8.Valid(body) {
			return c, false
		}
		t := string(body)
		c.Text = &t
		return c, true
	}
	c.Data = make([]byte, base64.StdEncoding.DecodedLen(len(body)))
	n, err := base64.StdEncoding.Decode(c.Data, body)
	if err != nil {
		return c, false
	}
	c.Data = c.Data[:n]
	return c, true
}
