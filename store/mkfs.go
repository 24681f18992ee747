package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// FormatVersion is written into every index's _meta; Open refuses others
// (see lifecycle.go for what a newer or older format gets). Format 2: every
// index has its write alias (WriteAliasSuffix), which every write goes
// through; format 1 had none, and mkfs upgrades it in place (Upgradable).
const FormatVersion = 2

// DefaultChunkSize is the size of one data chunk. 1 MiB keeps a 256 MiB file to
// 256 documents and each document far below http.max_content_length, while a
// FUSE write (128 KiB to 1 MiB) touches at most two chunks.
const DefaultChunkSize = 1 << 20

// MkfsOptions shape a new filesystem. The zero value is a sensible default.
type MkfsOptions struct {
	Shards          int    // primary shards of the path and inode indices; default 1
	Replicas        string // number_of_replicas or auto_expand_replicas range; default "0-1"
	RefreshInterval string // default "1s"
	ChunkSize       int64  // default DefaultChunkSize
	RootUid         uint32
	RootGid         uint32
	RootMode        uint32 // default 0755
}

type field map[string]any

func kw() field        { return field{"type": "keyword"} }
func long() field      { return field{"type": "long"} }
func opaque() field    { return field{"type": "object", "enabled": false} }
func storedKw() field  { return field{"type": "keyword", "index": false, "doc_values": false} }
func boolean() field   { return field{"type": "boolean"} }
func textField() field { return field{"type": "text"} }

// mappings returns each index's properties. Adding a field here is safe: mkfs
// adds missing fields to an existing index. Changing a field's type is not.
func (s *Store) mappings(chunkSize int64) map[string]map[string]field {
	return map[string]map[string]field{
		s.idx.Paths: {
			// path must have no ignore_above: a subtree scan sorts and filters on it.
			"path":     kw(),
			"parent":   kw(),
			"name":     {"type": "keyword", "fields": map[string]any{"text": textField()}},
			"ino":      long(),
			"type":     kw(),
			"op":       kw(),
			"role":     kw(),
			"new_ino":  long(),
			"new_type": kw(),
		},
		s.idx.Inodes: {
			"ino": long(), "type": kw(), "mode": long(), "uid": long(), "gid": long(),
			"size": long(), "nlink": long(), "rdev": long(),
			"atime": long(), "mtime": long(), "ctime": long(), "btime": long(),
			"target":  storedKw(),
			"xattrs":  opaque(),
			"content": textField(),
			"op":      kw(),
			"dgen":    long(),
			"chunks":  long(),
			"parents": long(),
			"keeper":  kw(),
			"lseq":    long(),
			"lops":    storedKw(),
			// st_blocks, for esfs du (see withBlocks).
			"blocks": long(),
		},
		s.idx.Data: {
			"ino":   long(),
			"chunk": long(),
			"data":  {"type": "binary"},
			// Text chunks, for esfs search (see chunkDoc).
			"text": textField(),
			// The writer's session, for fsck (see Stamp).
			"sess": kw(),
		},
		s.idx.Locks: {
			"kind":    kw(), // "lock" or "op"
			"path":    kw(),
			"holders": opaque(),
			"waiters": opaque(),
			"op":      kw(),
			"state":   kw(),
			"owner":   kw(),
			"epoch":   long(),
			"body":    opaque(),
		},
		s.idx.Sessions: {
			"session": kw(),
			"counter": long(),
			"host":    kw(),
			"pid":     long(),
			"started": long(),
			"lease":   long(),
			"fenced":  boolean(),
			"body":    opaque(),
		},
	}
}

func (s *Store) allIndices() []string {
	return []string{s.idx.Paths, s.idx.Inodes, s.idx.Data, s.idx.Locks, s.idx.Sessions}
}

// Mkfs creates the filesystem's indices and its root directory. It is
// idempotent: existing indices are checked (and missing fields added), an
// existing root is kept. A mapping esfs cannot use is refused with ErrMapping.
func (a Admin) Mkfs(ctx context.Context, o MkfsOptions) error {
	s := a.s
	if o.Shards <= 0 {
		o.Shards = 1
	}
	if o.Replicas == "" {
		o.Replicas = "0-1"
	}
	if o.RefreshInterval == "" {
		o.RefreshInterval = "1s"
	}
	if o.ChunkSize <= 0 {
		o.ChunkSize = DefaultChunkSize
	}
	if o.RootMode == 0 {
		o.RootMode = 0o755
	}
	// Refuse before creating anything next to an index esfs did not make
	// or cannot read; missing indices (a half-made filesystem) are made.
	infos, err := a.Inspect(ctx)
	if err != nil {
		return err
	}
	if err := a.Check(infos); err != nil && !errors.Is(err, ErrNoIndex) && !errors.Is(err, ErrIncomplete) {
		return err
	}
	maps := s.mappings(o.ChunkSize)
	zstd := s.hasZstdCodec(ctx)
	for _, name := range s.allIndices() {
		if err := s.ensureIndex(ctx, name, maps[name], o, zstd); err != nil {
			return err
		}
	}
	// Before anything is written: the root goes through them too.
	if err := a.AddWriteAliases(ctx); err != nil {
		return err
	}
	if err := s.Open(ctx); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	root := Inode{Ino: RootIno, Type: TypeDir, Mode: o.RootMode, Uid: o.RootUid, Gid: o.RootGid,
		Nlink: 2, Atime: now, Mtime: now, Ctime: now, Btime: now}
	if _, err := s.Write(ctx, CreateInode(root)); err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("creating the root inode: %w", err)
	}
	if _, err := s.Write(ctx, CreateDentry(Dentry{Path: "/", Ino: RootIno, Type: TypeDir})); err != nil && !errors.Is(err, ErrExists) {
		return fmt.Errorf("creating the root directory: %w", err)
	}
	return nil
}

// hasZstdCodec reports whether the cluster's best_compression codec is
// zstd (Elasticsearch 8.14 and later; DEFLATE before, which costs writes
// dearly). Unknown (an answer without a version) counts as not.
func (s *Store) hasZstdCodec(ctx context.Context) bool {
	major, minor, ok := s.clusterVersion(ctx)
	return ok && (major > 8 || major == 8 && minor >= 14)
}

// clusterVersion is the lowest version among the cluster's nodes (any of
// them may hold the data index's shards).
func (s *Store) clusterVersion(ctx context.Context) (major, minor int, ok bool) {
	res, err := s.do(ctx, "reading the cluster's version", request{method: "GET", path: "/_nodes",
		query: url.Values{"filter_path": {"nodes.*.version"}}})
	if err != nil || res.status != 200 {
		return 0, 0, false
	}
	var nodes struct {
		Nodes map[string]struct {
			Version string `json:"version"`
		} `json:"nodes"`
	}
	if json.Unmarshal(res.body, &nodes) != nil || len(nodes.Nodes) == 0 {
		return 0, 0, false
	}
	for _, n := range nodes.Nodes {
		var ma, mi int
		if _, err := fmt.Sscanf(n.Version, "%d.%d", &ma, &mi); err != nil {
			return 0, 0, false
		}
		if !ok || ma < major || ma == major && mi < minor {
			major, minor, ok = ma, mi, true
		}
	}
	return major, minor, ok
}

func (s *Store) ensureIndex(ctx context.Context, name string, props map[string]field, o MkfsOptions, zstd bool) error {
	settings := map[string]any{
		"number_of_shards": o.Shards,
		// An explicit interval: without one, a shard that saw no search for
		// 30s stops refreshing and the next search waits for a refresh.
		"refresh_interval": o.RefreshInterval,
	}
	if strings.Contains(o.Replicas, "-") {
		settings["auto_expand_replicas"] = o.Replicas
	} else {
		settings["number_of_replicas"] = o.Replicas
	}
	meta := map[string]any{"esfs_format": FormatVersion}
	if name == s.idx.Data {
		meta["chunk_size"] = o.ChunkSize
		settings["gc_deletes"] = DataGCDeletes
		if zstd {
			// Chunks are base64 or text: zstd's entropy coding takes back
			// base64's third, so the cluster writes, merges and keeps a
			// quarter fewer bytes. Measured (the data_floor bench rows):
			// raw writes 100 -> 180 MiB/s, raw reads 360 -> 285 MiB/s;
			// through a mount, writes 1.5x faster, reads the same.
			settings["codec"] = "best_compression"
		}
	}
	body, _ := json.Marshal(map[string]any{
		"settings": map[string]any{"index": settings},
		"mappings": map[string]any{"dynamic": "strict", "_meta": meta, "properties": props},
	})
	what := "creating index " + name
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(name), body: body})
	if err != nil {
		return err
	}
	if res.status == 200 {
		return nil
	}
	if res.status != 400 || !strings.Contains(string(res.body), "resource_already_exists_exception") {
		return failure(what, res)
	}
	return s.checkMapping(ctx, name, props)
}

// AddWriteAliases gives indices of the filesystem (names, all five if
// none) their write aliases (WriteAliasSuffix), in one request; an alias
// that is there already stays as it is. The indices must exist.
func (a Admin) AddWriteAliases(ctx context.Context, names ...string) error {
	s := a.s
	if len(names) == 0 {
		names = s.allIndices()
	}
	var actions []any
	for _, name := range names {
		actions = append(actions, map[string]any{"add": map[string]any{"index": name, "alias": name + WriteAliasSuffix, "is_write_index": true}})
	}
	body, _ := json.Marshal(map[string]any{"actions": actions})
	what := "adding the write aliases of filesystem " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "POST", path: "/_aliases", body: body})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}

// SetFormat records this esfs's format in the _meta of the index info
// describes (the last step of an upgrade, see Upgradable), keeping the
// rest of its _meta.
func (a Admin) SetFormat(ctx context.Context, info IndexInfo) error {
	s := a.s
	meta := map[string]any{}
	for k, v := range info.mapping.Meta {
		meta[k] = v
	}
	meta["esfs_format"] = FormatVersion
	body, _ := json.Marshal(map[string]any{"_meta": meta})
	what := "recording format " + strconv.Itoa(FormatVersion) + " in index " + info.Name
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(info.Name) + "/_mapping", body: body})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}

// checkMapping compares an existing index's mapping with the wanted one.
func (s *Store) checkMapping(ctx context.Context, name string, want map[string]field) error {
	got, err := s.getMapping(ctx, name)
	if err != nil {
		return err
	}
	if got.Dynamic != "strict" {
		return fmt.Errorf("index %s exists with dynamic=%q, esfs needs \"strict\": %w", name, got.Dynamic, ErrMapping)
	}
	if f, foreign := formatNumber(got.Meta["esfs_format"]); foreign || f != FormatVersion {
		// Made meanwhile (Mkfs checked the formats first): judge it alone.
		return s.Admin().Check([]IndexInfo{{Name: name, Exists: true, Format: f, Foreign: foreign, RawFormat: got.Meta["esfs_format"]}})
	}
	missing := map[string]field{}
	var conflicts []string
	for fname, f := range want {
		have, ok := got.Properties[fname]
		if !ok {
			missing[fname] = f
			continue
		}
		wantType, _ := f["type"].(string)
		haveType, _ := have["type"].(string)
		if haveType == "" {
			haveType = "object"
		}
		if wantType != haveType {
			conflicts = append(conflicts, fmt.Sprintf("%s is %s, want %s", fname, haveType, wantType))
		}
		if e, ok := f["enabled"]; ok && fmt.Sprint(have["enabled"]) != fmt.Sprint(e) {
			conflicts = append(conflicts, fmt.Sprintf("%s has enabled=%v, want %v", fname, have["enabled"], e))
		}
		if _, ok := have["ignore_above"]; ok {
			conflicts = append(conflicts, fmt.Sprintf("%s has ignore_above, which would hide long paths", fname))
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return fmt.Errorf("index %s exists with a mapping esfs cannot use (%s): %w", name, strings.Join(conflicts, "; "), ErrMapping)
	}
	if len(missing) == 0 {
		return nil
	}
	body, _ := json.Marshal(map[string]any{"properties": missing})
	what := "adding fields to index " + name
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(name) + "/_mapping", body: body})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	if _, ok := missing["rdev"]; ok && name == s.idx.Inodes {
		return s.uncountRoot(ctx)
	}
	return nil
}

// uncountRoot marks the root of a filesystem made before directories
// counted their subdirectories (the esfs that added the rdev field also
// started counting) as not counted: that mkfs stored 2 for the root
// whatever it held, which would now be taken for an exact count.
func (s *Store) uncountRoot(ctx context.Context) error {
	for attempt := 0; ; attempt++ {
		root, err := s.GetInode(ctx, RootIno)
		if errors.Is(err, ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if root.Nlink < 2 {
			return nil
		}
		root.Nlink = 1
		_, err = s.Write(ctx, PutInode(root, root.Ver))
		if errors.Is(err, ErrConflict) && attempt < 10 {
			continue // a mount of this version touched it meanwhile
		}
		if err != nil {
			return fmt.Errorf("marking the root's link count as not counted: %w", err)
		}
		return nil
	}
}

// missingFields lists the fields of want that the mapping m lacks.
func missingFields(m indexMapping, want map[string]field) []string {
	var out []string
	for name := range want {
		if _, ok := m.Properties[name]; !ok {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

type indexMapping struct {
	Dynamic    string           `json:"dynamic"`
	Meta       map[string]any   `json:"_meta"`
	Properties map[string]field `json:"properties"`
}

func (s *Store) getMapping(ctx context.Context, name string) (indexMapping, error) {
	what := "reading the mapping of index " + name
	res, err := s.do(ctx, what, request{method: "GET", path: "/" + url.PathEscape(name) + "/_mapping"})
	if err != nil {
		return indexMapping{}, err
	}
	if res.status != 200 {
		return indexMapping{}, failure(what, res)
	}
	var body map[string]struct {
		Mappings indexMapping `json:"mappings"`
	}
	if err := json.Unmarshal(res.body, &body); err != nil {
		return indexMapping{}, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	m, ok := body[name]
	if !ok {
		return indexMapping{}, fmt.Errorf("%s: %w", what, ErrNoIndex)
	}
	return m.Mappings, nil
}

// Open checks that the filesystem exists and was made by a compatible esfs,
// and reads the settings fixed at mkfs time. Every other method needs it.
func (s *Store) Open(ctx context.Context) error {
	infos, err := s.Admin().Inspect(ctx)
	if err != nil {
		return err
	}
	if err := s.Admin().Check(infos); err != nil {
		return err
	}
	for _, info := range infos {
		if info.Role == "session" && info.WriteBlocked {
			return fmt.Errorf("filesystem %s is being destroyed: esfs destroy blocked new mounts (if no destroy is running, one was interrupted: run esfs destroy --index %s again, or keep the filesystem with esfs config --index %s --unblock): %w",
				s.idx.Paths, s.idx.Paths, s.idx.Paths, ErrDestroying)
		}
	}
	for _, info := range infos {
		name, m := info.Name, info.mapping
		if missing := missingFields(m, s.mappings(0)[name]); len(missing) > 0 && !s.readOnly {
			// A filesystem made by an older esfs: add the fields this
			// version writes (safe on a live index). Without the right to,
			// the mount still reads everything; writes of the new fields
			// then fail with the cluster's mapping error.
			if err := s.checkMapping(ctx, name, s.mappings(0)[name]); err != nil {
				s.log.Warn("cannot add new fields to the index (run esfs mkfs with a user allowed to)", "index", name, "fields", missing, "err", err)
			} else {
				if m.Properties == nil {
					m.Properties = map[string]field{}
				}
				for _, f := range missing {
					m.Properties[f] = field{}
				}
			}
		}
		if name == s.idx.Inodes {
			// Without the field (an older filesystem, and credentials
			// that may not add it), inodes are written without it.
			s.blocksField = m.Properties["blocks"] != nil
		}
		if name == s.idx.Data {
			cs, ok := m.Meta["chunk_size"].(float64)
			if !ok || cs < 4096 || cs > 64<<20 {
				return fmt.Errorf("index %s has no valid chunk_size in its _meta: %w", name, ErrMapping)
			}
			s.chunkSize = int64(cs)
			// Without the text field (see above), text chunks are written
			// as binary, which every esfs reads.
			s.textChunks = m.Properties["text"] != nil
			if !s.readOnly {
				s.ensureGCDeletes(ctx)
			}
		}
	}
	return nil
}

// ensureGCDeletes sets the data index's gc_deletes to DataGCDeletes if it
// is not (an index made by an older esfs, or changed by hand). Without the
// right to, the mount still works; late writes are then fenced only for
// the shorter time the index keeps tombstones.
func (s *Store) ensureGCDeletes(ctx context.Context) {
	what := "reading the settings of index " + s.idx.Data
	res, err := s.do(ctx, what, request{method: "GET", path: "/" + url.PathEscape(s.idx.Data) + "/_settings/index.gc_deletes"})
	if err == nil && res.status == 200 {
		var body map[string]struct {
			Settings struct {
				Index struct {
					GCDeletes string `json:"gc_deletes"`
				} `json:"index"`
			} `json:"settings"`
		}
		if json.Unmarshal(res.body, &body) == nil && body[s.idx.Data].Settings.Index.GCDeletes == DataGCDeletes {
			return
		}
	}
	what = "setting gc_deletes of index " + s.idx.Data
	b, _ := json.Marshal(map[string]any{"index": map[string]any{"gc_deletes": DataGCDeletes}})
	res, err = s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(s.idx.Data) + "/_settings", body: b})
	if err == nil && res.status != 200 {
		err = failure(what, res)
	}
	if err != nil {
		s.log.Warn("cannot keep deleted chunks' versions for "+DataGCDeletes+" (run esfs mkfs with a user allowed to)", "index", s.idx.Data, "err", err)
	}
}

// ChunkSize is the data chunk size of the opened filesystem.
func (s *Store) ChunkSize() int64 { return s.chunkSize }

// DeleteFilesystem deletes every index of the filesystem (tests, esfs rmfs).
func (a Admin) DeleteFilesystem(ctx context.Context) error {
	s := a.s
	what := "deleting filesystem " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "DELETE", path: "/" + strings.Join(s.allIndices(), ","), query: url.Values{"ignore_unavailable": {"true"}}})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}
