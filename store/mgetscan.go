package store

import (
	"bytes"
	"encoding/json"
)

// An _mget of data chunks answers megabytes of base64 in JSON strings, and
// encoding/json goes over each of them three times (it validates the whole
// answer, then scans it again to decode, and once more to copy each
// _source as a RawMessage) with a byte-at-a-time state machine: reading a
// file through a mount spent three quarters of the daemon's CPU there, at
// 57 MiB/s. decodeMget walks the answer once, jumping over strings with
// bytes.IndexByte, and keeps each _source as a slice of the answer; the
// small fields around it go through encoding/json. The sources are
// decoded (and so checked) by their kinds' decoders after. An answer of
// another shape than Elasticsearch's gives ok false, and the caller
// decodes it with encoding/json, which says what is wrong with it.

// decodeMget decodes the answer of an _mget: {"docs":[{...}, ...]}.
func decodeMget(b []byte) (docs []getResult, ok bool) {
	i, ok := skipSpace(b, 0)
	if !ok || b[i] != '{' {
		return nil, false
	}
	seen := false
	ok = eachMember(b, i, func(key []byte, from, to int) bool {
		if string(key) != "docs" {
			return true
		}
		seen = true
		if b[from] != '[' {
			return false
		}
		return eachElement(b, from, func(from, to int) bool {
			d, ok := decodeMgetDoc(b, from)
			docs = append(docs, d)
			return ok
		})
	})
	return docs, ok && seen
}

// decodeMgetDoc decodes one document of an _mget answer, at b[i] ('{').
func decodeMgetDoc(b []byte, i int) (d getResult, ok bool) {
	if b[i] != '{' {
		return d, false
	}
	ok = eachMember(b, i, func(key []byte, from, to int) bool {
		var v any
		switch string(key) {
		case "_source":
			d.Source = json.RawMessage(b[from:to:to])
			return true
		case "_index":
			v = &d.Index
		case "_id":
			v = &d.ID
		case "found":
			v = &d.Found
		case "_seq_no":
			v = &d.SeqNo
		case "_primary_term":
			v = &d.PrimaryTerm
		case "_version":
			v = &d.Ext
		case "error":
			v = &d.Error
		default:
			return true
		}
		return json.Unmarshal(b[from:to], v) == nil
	})
	return d, ok
}

// eachMember calls fn with each member of the object at b[i] ('{'): its
// key (as written, which must need no unescaping) and where its value
// lies, b[from:to]; it stops at the first false.
func eachMember(b []byte, i int, fn func(key []byte, from, to int) bool) bool {
	return eachItem(b, i, '}', func(i int) (int, bool) {
		if b[i] != '"' {
			return 0, false
		}
		end, ok := skipString(b, i)
		if !ok {
			return 0, false
		}
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return 0, false
		}
		if i, ok = skipSpace(b, end); !ok || b[i] != ':' {
			return 0, false
		}
		from, ok := skipSpace(b, i+1)
		if !ok {
			return 0, false
		}
		to, ok := skipValue(b, from)
		return to, ok && fn(key, from, to)
	})
}

// eachElement calls fn with where each element of the array at b[i] ('[')
// lies, b[from:to]; it stops at the first false.
func eachElement(b []byte, i int, fn func(from, to int) bool) bool {
	return eachItem(b, i, ']', func(i int) (int, bool) {
		to, ok := skipValue(b, i)
		return to, ok && fn(i, to)
	})
}

// eachItem walks the items of the object or array opening at b[i], which
// closes with end: item reads the one at its index and says where it
// ends; the walk stops at the first false.
func eachItem(b []byte, i int, end byte, item func(i int) (to int, ok bool)) bool {
	i, ok := skipSpace(b, i+1)
	if !ok {
		return false
	}
	if b[i] == end {
		return true
	}
	for {
		to, ok := item(i)
		if !ok {
			return false
		}
		if i, ok = skipSpace(b, to); !ok {
			return false
		}
		switch b[i] {
		case ',':
			if i, ok = skipSpace(b, i+1); !ok {
				return false
			}
		case end:
			return true
		default:
			return false
		}
	}
}

// skipSpace returns the index of the first byte from i on that is not
// JSON white space; ok false if there is none.
func skipSpace(b []byte, i int) (int, bool) {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i, true
		}
	}
	return i, false
}

// skipString returns the index just past the string at b[i] ('"').
func skipString(b []byte, i int) (int, bool) {
	j := i + 1
	for {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, false
		}
		j += q
		// Escaped if an odd number of backslashes comes before it.
		n := 0
		for k := j - 1; k > i && b[k] == '\\'; k-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j, true
		}
	}
}

// skipValue returns the index just past the value at b[i]. Only its
// structure is checked: strings end, brackets match; what lies between is
// for the decoder of the part that is used.
func skipValue(b []byte, i int) (int, bool) {
	if i >= len(b) {
		return 0, false
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		var stack []byte
		for i < len(b) {
			switch c := b[i]; c {
			case '"':
				end, ok := skipString(b, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				stack = append(stack, c)
			case '}', ']':
				if len(stack) == 0 || stack[len(stack)-1] != c-2 { // '{'+2 == '}', '['+2 == ']'
					return 0, false
				}
				stack = stack[:len(stack)-1]
				if len(stack) == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	default:
		j := i
		for j < len(b) {
			switch b[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j, j > i
			}
			j++
		}
		return j, j > i
	}
}
