package store

import (
	"context"
	"encoding/json"
	"fmt"
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
	// Nor may it name an inode no entry can: 0, a number NewIno never
	// makes, or the root's (a second name of the root, inside itself).
	if dir, name := Split(d.Path); CheckPath(d.Path) != nil || dir != d.Parent || name != d.Name || !validIno(d.Ino) || (d.Ino == RootIno) != (d.Path == "/") {
		return Dentry{}, fmt.Errorf("path document %q (parent %q, name %q, ino %d) is inconsistent: %w", d.Path, d.Parent, d.Name, d.Ino, ErrCorrupt)
	}
	switch d.Intent.Role {
	case RoleNone, RoleSrc, RoleDst:
	case RoleOvr:
		d.Intent.NewIno = p.NewIno
		if d.Intent.NewType, err = parseFileType(p.NewType); err != nil || !validIno(p.NewIno) || p.NewIno == RootIno {
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

// GetDentry reads the path document of path, in real time.
func (s *Store) GetDentry(ctx context.Context, path string) (Dentry, error) {
	what := fmt.Sprintf("reading path %q", path)
	d, err := getDoc(ctx, s, dentryKind, DocID(path), what)
	if err != nil {
		return Dentry{}, err
	}
	if d.Path != path {
		return Dentry{}, fmt.Errorf("%s: %w", what, s.DamagedPath(path, fmt.Errorf("document holds path %q: %w", d.Path, ErrCorrupt)))
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
	ds, errs, err := getDocs(ctx, s, dentryKind, ids, fmt.Sprintf("reading %d paths", len(paths)))
	if err != nil {
		return nil, err
	}
	out := make([]DentryResult, len(paths))
	for i, d := range ds {
		err := errs[i]
		if err == nil && d.Path != paths[i] {
			err = s.DamagedPath(paths[i], fmt.Errorf("document holds path %q: %w", d.Path, ErrCorrupt))
		}
		if err != nil {
			out[i].Err = fmt.Errorf("reading path %q: %w", paths[i], err)
			continue
		}
		out[i].Dentry = d
	}
	return out, nil
}

// CreateDentry creates the path document of d.Path if the path is free
// (ErrExists otherwise). Parent and Name are derived from Path.
func CreateDentry(d Dentry) BulkOp {
	if err := fillDentry(&d); err != nil {
		return refused(err)
	}
	return newOp("create", pathsIndex, DocID(d.Path), Version{}, encodeDentry(d), fmt.Sprintf("creating path %q", d.Path))
}

// PutDentry overwrites the path document of d.Path if it is still at
// ifVer (ErrConflict otherwise, also when it was deleted meanwhile).
func PutDentry(d Dentry, ifVer Version) BulkOp {
	if err := fillDentry(&d); err != nil {
		return refused(err)
	}
	if !ifVer.Known() {
		return refused(fmt.Errorf("overwriting path %q without a version: %w", d.Path, ErrInvalid))
	}
	return newOp("index", pathsIndex, DocID(d.Path), ifVer, encodeDentry(d), fmt.Sprintf("updating path %q", d.Path))
}

// DeleteDentry deletes the path document of path if it is still at ifVer.
func DeleteDentry(path string, ifVer Version) BulkOp {
	if !ifVer.Known() {
		return refused(fmt.Errorf("deleting path %q without a version: %w", path, ErrInvalid))
	}
	return newOp("delete", pathsIndex, DocID(path), ifVer, nil, fmt.Sprintf("deleting path %q", path))
}

// fillDentry derives Parent and Name from Path and validates them.
func fillDentry(d *Dentry) error {
	if err := CheckPath(d.Path); err != nil {
		return err
	}
	d.Parent, d.Name = Split(d.Path)
	if d.Ino == 0 || d.Type == 0 {
		return fmt.Errorf("path %q without ino or type: %w", d.Path, ErrInvalid)
	}
	return nil
}

// MaxIno is the largest inode number: NewIno makes 63-bit numbers, and
// FUSE keeps ^0 for itself.
const MaxIno = 1<<63 - 1

// validIno reports whether ino is an inode number esfs can have made.
func validIno(ino uint64) bool { return ino != 0 && ino <= MaxIno }
