package locking

import (
	"fmt"
	"strings"

	"github.com/esfs/esfs/store"
)

// Strategy says which locks an operation takes. All three are correct
// under the same tests; they differ in concurrency and cost.
type Strategy interface {
	Name() string
	// Entry: creating or removing the entry path of directory dir
	// (create, mkdir, symlink, link, unlink, rmdir).
	Entry(dir, path string) []Request
	// Rename of src to dst. subtree lists the paths below src, which only
	// strategies with NeedsSubtree use.
	Rename(src, dst string, subtree []string) []Request
	// NeedsSubtree: a directory rename must list its subtree first (and
	// check after the grant that it did not grow).
	NeedsSubtree() bool
}

// NewStrategy returns the strategy called name.
func NewStrategy(name string) (Strategy, error) {
	switch name {
	case "tree", "":
		return treeStrategy{}, nil
	case "document":
		return documentStrategy{}, nil
	case "global":
		return globalStrategy{}, nil
	}
	return nil, fmt.Errorf("unknown locking strategy %q (want tree, document or global): %w", name, store.ErrInvalid)
}

// ancestors returns the directories above path, without the root: the root
// can never be renamed or removed, so it needs no lock, and leaving it out
// removes the one document every operation would contend on.
func ancestors(path string) []string {
	var out []string
	for dir, _ := store.Split(path); dir != "/" && dir != ""; dir, _ = store.Split(dir) {
		out = append(out, dir)
	}
	return out
}

// treeStrategy: shared locks on every ancestor, exclusive on the names
// operated on. A rename excludes everything below its source and
// destination, since every operation there holds a shared lock on them.
type treeStrategy struct{}

func (treeStrategy) Name() string       { return "tree" }
func (treeStrategy) NeedsSubtree() bool { return false }

func (treeStrategy) Entry(dir, path string) []Request {
	reqs := []Request{PathLock(path, store.Exclusive)}
	for _, a := range ancestors(path) {
		reqs = append(reqs, PathLock(a, store.Shared))
	}
	return reqs
}

func (treeStrategy) Rename(src, dst string, _ []string) []Request {
	reqs := []Request{PathLock(src, store.Exclusive), PathLock(dst, store.Exclusive)}
	for _, a := range append(ancestors(src), ancestors(dst)...) {
		reqs = append(reqs, PathLock(a, store.Shared))
	}
	return reqs
}

// documentStrategy: the guide's document locking. Every document an
// operation touches is locked: an entry change locks its name (exclusive)
// and its directory (shared); a directory rename locks every document of
// its subtree.
type documentStrategy struct{}

func (documentStrategy) Name() string       { return "document" }
func (documentStrategy) NeedsSubtree() bool { return true }

func (documentStrategy) Entry(dir, path string) []Request {
	reqs := []Request{PathLock(path, store.Exclusive)}
	if dir != "/" {
		reqs = append(reqs, PathLock(dir, store.Shared))
	}
	return reqs
}

func (documentStrategy) Rename(src, dst string, subtree []string) []Request {
	reqs := []Request{PathLock(src, store.Exclusive), PathLock(dst, store.Exclusive)}
	for _, p := range subtree {
		if strings.HasPrefix(p, src+"/") {
			reqs = append(reqs, PathLock(p, store.Exclusive))
		}
	}
	for _, p := range []string{src, dst} {
		if dir, _ := store.Split(p); dir != "/" {
			reqs = append(reqs, PathLock(dir, store.Shared))
		}
	}
	return reqs
}

// globalStrategy: one lock for every change, as in the guide.
type globalStrategy struct{}

func (globalStrategy) Name() string                             { return "global" }
func (globalStrategy) NeedsSubtree() bool                       { return false }
func (globalStrategy) Entry(dir, path string) []Request         { return []Request{GlobalLock()} }
func (globalStrategy) Rename(_, _ string, _ []string) []Request { return []Request{GlobalLock()} }
