package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// pathDoc is the JSON of a path document. Text fields hold encodeText values.
type pathDoc struct {
	Path    string `json:"path"`
	Parent  string `json:"parent"`
	Name    string `json:"name"`
	Ino     uint64 `json:"ino"`
	Type    string `json:"type"`
	Op      string `json:"op,omitempty"`
	Role    string `json:"role,omitempty"`
	NewIno  uint64 `json:"new_ino,omitempty"`
	NewType string `json:"new_type,omitempty"`
}

func encodeDentry(d Dentry) pathDoc {
	p := pathDoc{
		Path: encodeText(d.Path), Parent: encodeText(d.Parent), Name: encodeText(d.Name),
		Ino: d.Ino, Type: d.Type.String(), Op: d.Intent.Op, Role: string(d.Intent.Role),
	}
	if d.Intent.Role == RoleOvr {
		p.NewIno, p.NewType = d.Intent.NewIno, d.Intent.NewType.String()
	}
	return p
}

func decodeDentry(src []byte, v Version) (Dentry, error) {
	var p pathDoc
	if err := json.Unmarshal(src, &p); err != nil {
		return Dentry{}, fmt.Errorf("path document: %w: %v", ErrCorrupt, err)
	}
	d := Dentry{Ino: p.Ino, Intent: Intent{Op: p.Op, Role: Role(p.Role)}, Ver: v}
	var err error
	if d.Path, err = decodeText(p.Path); err != nil {
		return Dentry{}, err
	}
	if d.Parent, err = decodeText(p.Parent); err != nil {
		return Dentry{}, err
	}
	if d.Name, err = decodeText(p.Name); err != nil {
		return Dentry{}, err
	}
	if d.Type, err = parseFileType(p.Type); err != nil {
		return Dentry{}, fmt.Errorf("path document %q: %w: %v", d.Path, ErrCorrupt, err)
	}
	// The document must agree with itself, or a corrupt document could put a
	// name in the wrong directory.
	if dir, name := Split(d.Path); CheckPath(d.Path) != nil || dir != d.Parent || name != d.Name || d.Ino == 0 {
		return Dentry{}, fmt.Errorf("path document %q (parent %q, name %q, ino %d) is inconsistent: %w", d.Path, d.Parent, d.Name, d.Ino, ErrCorrupt)
	}
	switch d.Intent.Role {
	case RoleNone, RoleSrc, RoleDst:
	case RoleOvr:
		d.Intent.NewIno = p.NewIno
		if d.Intent.NewType, err = parseFileType(p.NewType); err != nil || p.NewIno == 0 {
			return Dentry{}, fmt.Errorf("path document %q: replacement without inode or type: %w", d.Path, ErrCorrupt)
		}
	default:
		return Dentry{}, fmt.Errorf("path document %q has unknown role %q: %w", d.Path, d.Intent.Role, ErrCorrupt)
	}
	if (d.Intent.Role == RoleNone) != (d.Intent.Op == "") {
		return Dentry{}, fmt.Errorf("path document %q has a half intent (op %q, role %q): %w", d.Path, d.Intent.Op, d.Intent.Role, ErrCorrupt)
	}
	return d, nil
}

// inodeDoc is the JSON of an inode document.
type inodeDoc struct {
	Ino    uint64            `json:"ino"`
	Type   string            `json:"type"`
	Mode   uint32            `json:"mode"`
	Uid    uint32            `json:"uid"`
	Gid    uint32            `json:"gid"`
	Size   int64             `json:"size"`
	Nlink  uint32            `json:"nlink"`
	Rdev   uint32            `json:"rdev,omitempty"`
	Atime  int64             `json:"atime"`
	Mtime  int64             `json:"mtime"`
	Ctime  int64             `json:"ctime"`
	Btime  int64             `json:"btime"`
	Target string            `json:"target,omitempty"`
	Xattrs map[string][]byte `json:"xattrs,omitempty"`
	Dgen   uint64            `json:"dgen,omitempty"`
	Chunks *int64            `json:"chunks,omitempty"`
}

func encodeInode(n Inode) inodeDoc {
	d := inodeDoc{Ino: n.Ino, Type: n.Type.String(), Mode: n.Mode, Uid: n.Uid, Gid: n.Gid,
		Size: n.Size, Nlink: n.Nlink, Rdev: n.Rdev, Atime: n.Atime, Mtime: n.Mtime, Ctime: n.Ctime, Btime: n.Btime,
		Target: encodeText(n.Target), Dgen: n.Dgen}
	if n.Chunks >= 0 && n.Type == TypeFile {
		d.Chunks = &n.Chunks
	}
	if len(n.Xattrs) > 0 {
		d.Xattrs = make(map[string][]byte, len(n.Xattrs))
		for k, v := range n.Xattrs {
			d.Xattrs[encodeText(k)] = v
		}
	}
	return d
}

func decodeInode(src []byte, v Version) (Inode, error) {
	var d inodeDoc
	if err := json.Unmarshal(src, &d); err != nil {
		return Inode{}, fmt.Errorf("inode document: %w: %v", ErrCorrupt, err)
	}
	n := Inode{Ino: d.Ino, Mode: d.Mode, Uid: d.Uid, Gid: d.Gid, Size: d.Size, Nlink: d.Nlink, Rdev: d.Rdev,
		Atime: d.Atime, Mtime: d.Mtime, Ctime: d.Ctime, Btime: d.Btime, Dgen: d.Dgen, Chunks: -1, Ver: v}
	if d.Chunks != nil && *d.Chunks >= 0 {
		n.Chunks = *d.Chunks
	}
	var err error
	if n.Type, err = parseFileType(d.Type); err != nil {
		return Inode{}, fmt.Errorf("inode %d: %w: %v", d.Ino, ErrCorrupt, err)
	}
	if n.Target, err = decodeText(d.Target); err != nil {
		return Inode{}, err
	}
	if d.Size < 0 || d.Size > MaxFileSize || d.Ino == 0 || d.Mode > 0o7777 || d.Dgen > MaxDataGen {
		return Inode{}, fmt.Errorf("inode %d has size %d, mode %o: %w", d.Ino, d.Size, d.Mode, ErrCorrupt)
	}
	if len(d.Xattrs) > 0 {
		n.Xattrs = make(map[string][]byte, len(d.Xattrs))
		for k, val := range d.Xattrs {
			dk, err := decodeText(k)
			if err != nil {
				return Inode{}, err
			}
			n.Xattrs[dk] = val
		}
	}
	return n, nil
}

// getResult is one document of a GET or an mget.
type getResult struct {
	Index       string          `json:"_index"`
	ID          string          `json:"_id"`
	Found       bool            `json:"found"`
	SeqNo       int64           `json:"_seq_no"`
	PrimaryTerm int64           `json:"_primary_term"`
	Source      json.RawMessage `json:"_source"`
	Error       *esError        `json:"error"`
}

func (g getResult) version() Version { return Version{SeqNo: g.SeqNo, PrimaryTerm: g.PrimaryTerm} }

// get reads one document in real time (GET by _id sees every acknowledged
// write, unlike search).
func (s *Store) get(ctx context.Context, index, id, what string) (getResult, error) {
	res, err := s.do(ctx, what, request{method: "GET", path: "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(id)})
	if err != nil {
		return getResult{}, err
	}
	if res.status != 200 {
		return getResult{}, failure(what, res)
	}
	var g getResult
	if err := json.Unmarshal(res.body, &g); err != nil {
		return getResult{}, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	if !g.Found {
		return getResult{}, fmt.Errorf("%s: %w", what, ErrNotFound)
	}
	return g, nil
}

// mget reads many documents of one index in one round trip, in order.
// A missing document has Found == false.
func (s *Store) mget(ctx context.Context, index string, ids []string, what string) ([]getResult, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	body, _ := json.Marshal(map[string]any{"ids": ids})
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(index) + "/_mget", body: body})
	if err != nil {
		return nil, err
	}
	if res.status != 200 {
		return nil, failure(what, res)
	}
	var out struct {
		Docs []getResult `json:"docs"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	if len(out.Docs) != len(ids) {
		return nil, fmt.Errorf("%s: asked %d documents, got %d: %w", what, len(ids), len(out.Docs), ErrCorrupt)
	}
	for _, d := range out.Docs {
		if d.Error != nil {
			return nil, statusError(503, what, d.Error)
		}
	}
	return out.Docs, nil
}

// writeResult is the answer to an index, create or delete.
type writeResult struct {
	SeqNo       int64    `json:"_seq_no"`
	PrimaryTerm int64    `json:"_primary_term"`
	Result      string   `json:"result"`
	Status      int      `json:"status"`
	Error       *esError `json:"error"`
}

// write indexes one document: create-if-absent when create is set,
// otherwise conditional on ifVer when it is known, otherwise unconditional.
func (s *Store) write(ctx context.Context, index, id string, doc any, create bool, ifVer Version, what string) (Version, error) {
	body, err := json.Marshal(doc)
	if err != nil {
		return Version{}, fmt.Errorf("%s: %w: %v", what, ErrInvalid, err)
	}
	q := url.Values{}
	if create {
		q.Set("op_type", "create")
	} else if ifVer.Known() {
		q.Set("if_seq_no", strconv.FormatInt(ifVer.SeqNo, 10))
		q.Set("if_primary_term", strconv.FormatInt(ifVer.PrimaryTerm, 10))
	}
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(id), query: q, body: body})
	if err != nil {
		return Version{}, err
	}
	if res.status != 200 && res.status != 201 {
		return Version{}, failure(what, res)
	}
	var w writeResult
	if err := json.Unmarshal(res.body, &w); err != nil {
		return Version{}, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	return Version{SeqNo: w.SeqNo, PrimaryTerm: w.PrimaryTerm}, nil
}

// remove deletes one document, conditional on ifVer when it is known.
func (s *Store) remove(ctx context.Context, index, id string, ifVer Version, what string) (Version, error) {
	q := url.Values{}
	if ifVer.Known() {
		q.Set("if_seq_no", strconv.FormatInt(ifVer.SeqNo, 10))
		q.Set("if_primary_term", strconv.FormatInt(ifVer.PrimaryTerm, 10))
	}
	res, err := s.do(ctx, what, request{method: "DELETE", path: "/" + url.PathEscape(index) + "/_doc/" + url.PathEscape(id), query: q})
	if err != nil {
		return Version{}, err
	}
	if res.status != 200 {
		return Version{}, failure(what, res)
	}
	var w writeResult
	if err := json.Unmarshal(res.body, &w); err != nil {
		return Version{}, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	return Version{SeqNo: w.SeqNo, PrimaryTerm: w.PrimaryTerm}, nil
}

// GetDentry reads the path document of path, in real time.
func (s *Store) GetDentry(ctx context.Context, path string) (Dentry, error) {
	what := fmt.Sprintf("reading path %q", path)
	g, err := s.get(ctx, s.idx.Paths, DocID(path), what)
	if err != nil {
		return Dentry{}, err
	}
	d, err := decodeDentry(g.Source, g.version())
	if err != nil {
		return Dentry{}, fmt.Errorf("%s: %w", what, err)
	}
	if d.Path != path {
		return Dentry{}, fmt.Errorf("%s: document holds path %q: %w", what, d.Path, ErrCorrupt)
	}
	return d, nil
}

// DentryResult is one answer of GetDentries: a Dentry, or Err (ErrNotFound,
// ErrCorrupt) for that path alone.
type DentryResult struct {
	Dentry Dentry
	Err    error
}

// GetDentries reads many path documents in one round trip, in order.
func (s *Store) GetDentries(ctx context.Context, paths []string) ([]DentryResult, error) {
	ids := make([]string, len(paths))
	for i, p := range paths {
		ids[i] = DocID(p)
	}
	docs, err := s.mget(ctx, s.idx.Paths, ids, fmt.Sprintf("reading %d paths", len(paths)))
	if err != nil {
		return nil, err
	}
	out := make([]DentryResult, len(paths))
	for i, g := range docs {
		what := fmt.Sprintf("reading path %q", paths[i])
		if !g.Found {
			out[i].Err = fmt.Errorf("%s: %w", what, ErrNotFound)
			continue
		}
		d, err := decodeDentry(g.Source, g.version())
		if err == nil && d.Path != paths[i] {
			err = fmt.Errorf("document holds path %q: %w", d.Path, ErrCorrupt)
		}
		if err != nil {
			out[i].Err = fmt.Errorf("%s: %w", what, err)
			continue
		}
		out[i].Dentry = d
	}
	return out, nil
}

// CreateDentry writes a new path document; ErrExists if the path is taken.
func (s *Store) CreateDentry(ctx context.Context, d Dentry) (Version, error) {
	if err := s.fillDentry(&d); err != nil {
		return Version{}, err
	}
	return s.write(ctx, s.idx.Paths, DocID(d.Path), encodeDentry(d), true, Version{}, fmt.Sprintf("creating path %q", d.Path))
}

// PutDentry overwrites a path document if it is still at version ifVer
// (ErrConflict otherwise, ErrNotFound... as ErrConflict if it was deleted).
func (s *Store) PutDentry(ctx context.Context, d Dentry, ifVer Version) (Version, error) {
	if err := s.fillDentry(&d); err != nil {
		return Version{}, err
	}
	if !ifVer.Known() {
		return Version{}, fmt.Errorf("overwriting path %q without a version: %w", d.Path, ErrInvalid)
	}
	return s.write(ctx, s.idx.Paths, DocID(d.Path), encodeDentry(d), false, ifVer, fmt.Sprintf("updating path %q", d.Path))
}

// DeleteDentry removes a path document if it is still at version ifVer.
func (s *Store) DeleteDentry(ctx context.Context, path string, ifVer Version) (Version, error) {
	if !ifVer.Known() {
		return Version{}, fmt.Errorf("deleting path %q without a version: %w", path, ErrInvalid)
	}
	return s.remove(ctx, s.idx.Paths, DocID(path), ifVer, fmt.Sprintf("deleting path %q", path))
}

// fillDentry derives Parent and Name from Path and validates them.
func (s *Store) fillDentry(d *Dentry) error {
	if err := CheckPath(d.Path); err != nil {
		return err
	}
	d.Parent, d.Name = Split(d.Path)
	if d.Ino == 0 || d.Type == 0 {
		return fmt.Errorf("path %q without ino or type: %w", d.Path, ErrInvalid)
	}
	return nil
}

// GetInode reads the attributes of ino, in real time.
func (s *Store) GetInode(ctx context.Context, ino uint64) (Inode, error) {
	what := fmt.Sprintf("reading inode %d", ino)
	g, err := s.get(ctx, s.idx.Inodes, inodeID(ino), what)
	if err != nil {
		return Inode{}, err
	}
	n, err := decodeInode(g.Source, g.version())
	if err == nil && n.Ino != ino {
		err = fmt.Errorf("document holds inode %d: %w", n.Ino, ErrCorrupt)
	}
	if err != nil {
		return Inode{}, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

// InodeResult is one answer of GetInodes.
type InodeResult struct {
	Inode Inode
	Err   error
}

// GetInodes reads many inodes in one round trip, in order.
func (s *Store) GetInodes(ctx context.Context, inos []uint64) ([]InodeResult, error) {
	ids := make([]string, len(inos))
	for i, ino := range inos {
		ids[i] = inodeID(ino)
	}
	docs, err := s.mget(ctx, s.idx.Inodes, ids, fmt.Sprintf("reading %d inodes", len(inos)))
	if err != nil {
		return nil, err
	}
	out := make([]InodeResult, len(inos))
	for i, g := range docs {
		what := fmt.Sprintf("reading inode %d", inos[i])
		if !g.Found {
			out[i].Err = fmt.Errorf("%s: %w", what, ErrNotFound)
			continue
		}
		n, err := decodeInode(g.Source, g.version())
		if err == nil && n.Ino != inos[i] {
			err = fmt.Errorf("document holds inode %d: %w", n.Ino, ErrCorrupt)
		}
		if err != nil {
			out[i].Err = fmt.Errorf("%s: %w", what, err)
			continue
		}
		out[i].Inode = n
	}
	return out, nil
}

// CreateInode writes a new inode document; ErrExists if the number is taken.
func (s *Store) CreateInode(ctx context.Context, n Inode) (Version, error) {
	if n.Ino == 0 || n.Type == 0 {
		return Version{}, fmt.Errorf("inode without number or type: %w", ErrInvalid)
	}
	return s.write(ctx, s.idx.Inodes, inodeID(n.Ino), encodeInode(n), true, Version{}, fmt.Sprintf("creating inode %d", n.Ino))
}

// PutInode overwrites an inode document if it is still at version ifVer.
func (s *Store) PutInode(ctx context.Context, n Inode, ifVer Version) (Version, error) {
	if !ifVer.Known() {
		return Version{}, fmt.Errorf("overwriting inode %d without a version: %w", n.Ino, ErrInvalid)
	}
	return s.write(ctx, s.idx.Inodes, inodeID(n.Ino), encodeInode(n), false, ifVer, fmt.Sprintf("updating inode %d", n.Ino))
}

// DeleteInode removes an inode document if it is still at version ifVer.
func (s *Store) DeleteInode(ctx context.Context, ino uint64, ifVer Version) (Version, error) {
	if !ifVer.Known() {
		return Version{}, fmt.Errorf("deleting inode %d without a version: %w", ino, ErrInvalid)
	}
	return s.remove(ctx, s.idx.Inodes, inodeID(ino), ifVer, fmt.Sprintf("deleting inode %d", ino))
}

// Refresh makes every acknowledged write to the path index visible to search.
// Callers refresh before a search that must be complete, never per write.
func (s *Store) Refresh(ctx context.Context) error {
	return s.refresh(ctx, "refreshing "+s.idx.Paths, s.idx.Paths)
}

// refresh makes every acknowledged write to indices visible to search.
func (s *Store) refresh(ctx context.Context, what string, indices ...string) error {
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + strings.Join(indices, ",") + "/_refresh"})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}
