package store

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDecodeRefusesDamage: documents that break the model, as a bad
// write may leave them, decode to ErrCorrupt, never to a value a mount
// would act on.
func TestDecodeRefusesDamage(t *testing.T) {
	paths := map[string]string{
		"root's inode elsewhere": `{"path":"/loop","parent":"/","name":"loop","ino":1,"type":"dir"}`,
		"another inode at /":     `{"path":"/","parent":"","name":"","ino":5,"type":"dir"}`,
		"ino past 63 bits":       `{"path":"/a","parent":"/","name":"a","ino":18446744073709551615,"type":"file"}`,
		"negative ino":           `{"path":"/a","parent":"/","name":"a","ino":-5,"type":"file"}`,
		"ino as a string":        `{"path":"/a","parent":"/","name":"a","ino":"5","type":"file"}`,
		"no type":                `{"path":"/a","parent":"/","name":"a","ino":5}`,
		"wrong parent":           `{"path":"/a","parent":"/b","name":"a","ino":5,"type":"file"}`,
		"replaced by the root":   `{"path":"/a","parent":"/","name":"a","ino":5,"type":"file","op":"x","role":"ovr","new_ino":1,"new_type":"dir"}`,
	}
	for what, doc := range paths {
		if d, err := decodeDentry([]byte(doc), Version{}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("path document with %s: %+v, %v; want ErrCorrupt", what, d, err)
		}
	}
	if _, err := decodeDentry([]byte(`{"path":"/","parent":"","name":"","ino":1,"type":"dir"}`), Version{}); err != nil {
		t.Errorf("the root's path document: %v", err)
	}
	many := strings.TrimSuffix(strings.Repeat("7,", MaxLinks+1), ",")
	inodes := map[string]string{
		"negative size":      `{"ino":5,"type":"file","mode":420,"size":-1,"nlink":1}`,
		"nlink past 32 bit":  `{"ino":5,"type":"file","mode":420,"size":1,"nlink":1099511627776}`,
		"ino past 63 bits":   `{"ino":18446744073709551615,"type":"file","mode":420,"size":1,"nlink":1}`,
		"parents past links": `{"ino":5,"type":"file","mode":420,"size":1,"nlink":1,"parents":[` + many + `]}`,
		"mode as a string":   `{"ino":5,"type":"file","mode":"rw","size":1,"nlink":1}`,
	}
	for what, doc := range inodes {
		if n, err := decodeInode([]byte(doc), Version{}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("inode document with %s: %+v, %v; want ErrCorrupt", what, n.Ino, err)
		}
	}
	if _, err := decodeOp([]byte(`{"kind":"op","op":"x","state":"committed","body":{"src":"relative","dst":"/b","src_type":"file"}}`), Version{}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("operation record naming a relative path: %v; want ErrCorrupt", err)
	}
}

// TestDocErrorNamesTheDocument: a decoding error becomes a DocError that
// names its index and id, and still matches ErrCorrupt and its cause.
func TestDocErrorNamesTheDocument(t *testing.T) {
	cause := fmt.Errorf("holds nonsense: %w", ErrCorrupt)
	err := fmt.Errorf("reading: %w", damaged("fs", "abc", cause))
	var de *DocError
	if !errors.As(err, &de) || de.Index != "fs" || de.ID != "abc" || !errors.Is(err, ErrCorrupt) || !errors.Is(err, cause) {
		t.Fatalf("%v: not a DocError of fs/abc matching ErrCorrupt", err)
	}
	if again := damaged("other", "x", err); again != err {
		t.Errorf("a DocError wrapped again: %v", again)
	}
	if nf := damaged("fs", "abc", ErrNotFound); nf != ErrNotFound {
		t.Errorf("a missing document became %v", nf)
	}
}

// TestAnswerBounded: an answer past its bound is not read, whether its
// length is announced or not.
func TestAnswerBounded(t *testing.T) {
	const limit = 1 << 20
	for _, announced := range []bool{true, false} {
		res := &http.Response{Body: io.NopCloser(io.LimitReader(zeros{}, limit+10)), ContentLength: -1}
		if announced {
			res.ContentLength = limit + 10
		}
		data, err := readBodyUpTo(res, limit)
		if !errors.Is(err, ErrCorrupt) || data != nil {
			t.Errorf("announced %v: %d bytes, %v; want nothing and ErrCorrupt", announced, len(data), err)
		}
	}
	res := &http.Response{Body: io.NopCloser(io.LimitReader(zeros{}, limit)), ContentLength: -1}
	if data, err := readBodyUpTo(res, limit); err != nil || len(data) != limit {
		t.Errorf("an answer of the bound itself: %d bytes, %v", len(data), err)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }
