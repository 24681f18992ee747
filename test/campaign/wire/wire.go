// Package wire is what the campaign (test/campaign) and its worker
// processes (test/campaign/worker) say to each other: one JSON request per
// line on the worker's standard input, one JSON answer per line on its
// standard output, matched by ID. The worker answers each request as soon
// as its system calls return, in any order, so a call that blocks (on a
// frozen mount) holds up no other.
package wire

import (
	"crypto/sha256"
	"encoding/hex"
)

// Req is one operation: the system calls the worker makes for it are in
// test/campaign/worker. Paths are relative to the worker's root.
type Req struct {
	ID    int64  `json:"id"`
	Op    string `json:"op"`
	Path  string `json:"path,omitempty"`
	Path2 string `json:"path2,omitempty"`
	FD    int    `json:"fd,omitempty"`
	Off   int64  `json:"off,omitempty"`
	Len   int64  `json:"len,omitempty"`
	// Seq seeds the bytes a write writes (Pattern), so that the checker
	// knows them without their being sent.
	Seq   int64  `json:"seq,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
	Name  string `json:"name,omitempty"`
	Value string `json:"value,omitempty"`
	// Lock is the type of a flock or fcntl lock: "sh", "ex" or "un".
	Lock string `json:"lock,omitempty"`
	// Full asks a read for the bytes themselves, not only their digest.
	Full bool `json:"full,omitempty"`
	// ReadOnly opens a file for reading only (O_RDONLY; else O_RDWR).
	ReadOnly bool `json:"rdonly,omitempty"`
}

// Stat is what lstat (or fstat) and the calls around it tell of a file.
type Stat struct {
	Mode   uint32            `json:"mode"` // st_mode, type bits included
	Size   int64             `json:"size"`
	Nlink  uint64            `json:"nlink"`
	Ino    uint64            `json:"ino"`
	Mtime  int64             `json:"mtime"` // ns
	Target string            `json:"target,omitempty"`
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Resp is the outcome of a Req: Errno 0 or the errno of the call that
// failed (Failed says which, for the history).
type Resp struct {
	ID     int64    `json:"id"`
	Errno  int      `json:"errno"`
	Failed string   `json:"failed,omitempty"`
	FD     int      `json:"fd,omitempty"`
	Stat   *Stat    `json:"stat,omitempty"`
	Names  []string `json:"names,omitempty"`
	Size   int64    `json:"size,omitempty"`
	Sum    string   `json:"sum,omitempty"`
	Data   []byte   `json:"data,omitempty"`
	Value  string   `json:"value,omitempty"`
	// Tree is what a tree request saw.
	Tree []Entry `json:"tree,omitempty"`
	// Err is a failure of the worker itself (a malformed request), not of
	// a system call.
	Err string `json:"err,omitempty"`
}

// Pattern is the n bytes a write with sequence number seq writes at
// offset off: different for every write and every offset, so that a
// byte read back says which write put it there.
func Pattern(seq, off, n int64) []byte {
	b := make([]byte, n)
	for i := range b {
		x := uint64(seq)*0x9E3779B97F4A7C15 + uint64(off+int64(i))*0xBF58476D1CE4E5B9
		x ^= x >> 29
		b[i] = byte(x>>24) | 1 // never 0: a byte read as zero was never written
	}
	return b
}

// Sum is the digest a read reports of the bytes it read.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:12])
}

// Entry is one file a tree request saw: lstat and, for a regular file, the
// digest and size of its bytes. Errno is set when the path is missing (or
// could not be read).
type Entry struct {
	Path  string `json:"path"`
	Errno int    `json:"errno,omitempty"`
	Stat  *Stat  `json:"stat,omitempty"`
	Size  int64  `json:"size,omitempty"`
	Sum   string `json:"sum,omitempty"`
}
