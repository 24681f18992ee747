package store

// A filesystem's life after mkfs: what its indices are (Inspect), whether
// this esfs may use them (their format), changing their settings, and
// destroying them.
//
// FORMAT VERSIONS. Every index carries _meta.esfs_format. The format is
// bumped only by a change an older esfs would misread or damage (a field
// whose meaning changes, a document layout it cannot decode). Changes an
// older esfs can live with do not bump it: new mapping fields and settings
// are added in place by Open and mkfs. So:
//   - a newer format is refused by every command, destroy included
//     (ErrFormat: "upgrade esfs"), since this esfs could misread it;
//   - an older format is upgraded in place by mkfs, when an upgrade step
//     from it exists (from format 1: the write aliases, see
//     Upgradable), and otherwise refused with what to do (ErrFormat);
//   - an index without an esfs format was made by something else, and is
//     never touched (ErrMapping).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"strconv"
	"strings"
)

// Sentinels of a filesystem esfs cannot use as it is.
var (
	// ErrFormat: the indices were made by an esfs of another format.
	ErrFormat = errors.New("filesystem format not readable by this esfs")
	// ErrIncomplete: some of the filesystem's indices exist, not all.
	ErrIncomplete = errors.New("filesystem incomplete")
	// ErrDestroying: esfs destroy blocked new mounts (and is running, or
	// was interrupted).
	ErrDestroying = errors.New("filesystem being destroyed")
)

// IndexInfo is what one of a filesystem's indices is.
type IndexInfo struct {
	Name string
	// Role is which of the filesystem's indices it is: path, inode,
	// data, lock or session (as in the request metrics).
	Role   string
	Exists bool
	// Format is _meta.esfs_format; Foreign when the index has none.
	Format  int
	Foreign bool
	// RawFormat is _meta.esfs_format as found, for messages.
	RawFormat any
	// Settings, as Elasticsearch reports them.
	Shards, Replicas, AutoExpand, RefreshInterval string
	// WriteBlocked: index.blocks.write is set (destroy sets it on the
	// sessions index while it judges the mounts).
	WriteBlocked bool
	// WriteAlias: the index has its write alias (WriteAliasSuffix).
	WriteAlias bool
	ChunkSize  int64 // the data index's, from _meta
	mapping    indexMapping
}

// ReplicasSetting is the replica setting as mkfs and config take it: the
// auto_expand_replicas range if set, else number_of_replicas.
func (i IndexInfo) ReplicasSetting() string {
	if i.AutoExpand != "" && i.AutoExpand != "false" {
		return i.AutoExpand
	}
	return i.Replicas
}

// Indices are the names of the filesystem's indices.
func (a Admin) Indices() []string { s := a.s; return s.allIndices() }

// Inspect reads what each of the filesystem's indices is, in one request,
// without judging it (see Check).
func (a Admin) Inspect(ctx context.Context) ([]IndexInfo, error) {
	s := a.s
	names := s.allIndices()
	what := "reading the indices of filesystem " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "GET", path: "/" + strings.Join(names, ","),
		query: url.Values{"ignore_unavailable": {"true"}, "allow_no_indices": {"true"}, "expand_wildcards": {"none"},
			"filter_path": {"*.aliases,*.mappings,*.settings.index.number_of_shards,*.settings.index.number_of_replicas,*.settings.index.auto_expand_replicas,*.settings.index.refresh_interval,*.settings.index.blocks"}}})
	if err != nil {
		return nil, err
	}
	if res.status != 200 {
		return nil, failure(what, res)
	}
	var body map[string]struct {
		Aliases  map[string]json.RawMessage `json:"aliases"`
		Mappings indexMapping               `json:"mappings"`
		Settings struct {
			Index struct {
				Shards     string `json:"number_of_shards"`
				Replicas   string `json:"number_of_replicas"`
				AutoExpand string `json:"auto_expand_replicas"`
				Refresh    string `json:"refresh_interval"`
				Blocks     struct {
					Write string `json:"write"`
				} `json:"blocks"`
			} `json:"index"`
		} `json:"settings"`
	}
	if len(res.body) > 0 {
		if err := json.Unmarshal(res.body, &body); err != nil {
			return nil, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
		}
	}
	out := make([]IndexInfo, len(names))
	for i, name := range names {
		info := IndexInfo{Name: name, Role: s.idx.roleName("/" + name)}
		b, ok := body[name]
		if ok {
			info.Exists = true
			info.mapping = b.Mappings
			info.RawFormat = b.Mappings.Meta["esfs_format"]
			info.Format, info.Foreign = formatNumber(info.RawFormat)
			ix := b.Settings.Index
			info.Shards, info.Replicas, info.AutoExpand, info.RefreshInterval = ix.Shards, ix.Replicas, ix.AutoExpand, ix.Refresh
			info.WriteBlocked = ix.Blocks.Write == "true"
			_, info.WriteAlias = b.Aliases[name+WriteAliasSuffix]
			if cs, ok := b.Mappings.Meta["chunk_size"].(float64); ok {
				info.ChunkSize = int64(cs)
			}
		}
		out[i] = info
	}
	return out, nil
}

// formatNumber is an esfs_format value as a format number; foreign when
// it is none (absent, or not a whole number).
func formatNumber(v any) (n int, foreign bool) {
	switch f := v.(type) {
	case float64:
		if f >= 0 && f < math.MaxInt32 && f == math.Trunc(f) {
			return int(f), false
		}
	case string: // set by hand as a string
		if n, err := strconv.Atoi(f); err == nil && n >= 0 {
			return n, false
		}
	}
	return 0, true
}

// Check judges what Inspect found: nil if this esfs may use the filesystem
// as it is. The error says what the indices are and what to do.
func (a Admin) Check(infos []IndexInfo) error {
	s := a.s
	fs := s.idx.Paths
	var missing []string
	newest, oldest := -1, -1
	for _, i := range infos {
		switch {
		case !i.Exists:
			missing = append(missing, i.Name)
		case i.Foreign:
			return s.foreignError(i)
		default:
			newest = max(newest, i.Format)
			if oldest < 0 || i.Format < oldest {
				oldest = i.Format
			}
		}
	}
	if newest > FormatVersion {
		return fmt.Errorf("filesystem %s was made by a newer esfs (format %d; this esfs reads format %d): upgrade esfs: %w", fs, newest, FormatVersion, ErrFormat)
	}
	if len(missing) == len(infos) {
		return fmt.Errorf("filesystem %s does not exist (make it with: esfs mkfs --index %s): %w", fs, fs, ErrNoIndex)
	}
	if len(missing) > 0 {
		return fmt.Errorf("filesystem %s is incomplete: index %s missing (a mkfs or destroy that did not finish, or indices deleted by hand): complete it with esfs mkfs --index %s, or remove what is left with esfs destroy --index %s: %w",
			fs, strings.Join(missing, ", "), fs, fs, ErrIncomplete)
	}
	if oldest >= 0 && oldest < FormatVersion {
		return s.olderError(oldest)
	}
	var noAlias []string
	for _, i := range infos {
		if !i.WriteAlias {
			noAlias = append(noAlias, i.Name+WriteAliasSuffix)
		}
	}
	if len(noAlias) > 0 {
		// Writes would fail on them: never create an index instead.
		return fmt.Errorf("filesystem %s is incomplete: write alias %s missing (removed by hand?): restore it with esfs mkfs --index %s: %w",
			fs, strings.Join(noAlias, ", "), fs, ErrIncomplete)
	}
	return nil
}

func (s *Store) foreignError(i IndexInfo) error {
	what := "has no esfs format in its mapping"
	if i.RawFormat != nil {
		what = fmt.Sprintf("has esfs_format %v in its mapping, which is no format number", i.RawFormat)
	}
	return fmt.Errorf("index %s exists but %s: it was made by something other than esfs mkfs, and esfs never touches indices it did not make; choose another --index: %w", i.Name, what, ErrMapping)
}

// Upgradable reports whether infos (Inspect's, of a filesystem Check calls
// older) hold a format this esfs upgrades in place, with esfs mkfs: format
// 1, whose indices lack the write aliases. The upgrade, resumable at every
// step since each is idempotent and the format is recorded last:
//  1. AddWriteAliases: harmless to any mount, of any esfs;
//  2. the mounts are judged, as esfs destroy judges them: while one is
//     live (an older esfs, writing without the aliases) it refuses;
//  3. SetFormat on the path index: from then on an older esfs refuses to
//     mount the filesystem (newer format), and this one (older format
//     elsewhere) until the upgrade is done;
//  4. the mounts are judged again, for one that started meanwhile;
//  5. SetFormat on the other indices.
func Upgradable(infos []IndexInfo) bool {
	for _, i := range infos {
		if i.Exists && !i.Foreign && i.Format != 1 && i.Format != FormatVersion {
			return false
		}
	}
	return true
}

// olderError refuses a format older than this esfs reads: one it can
// upgrade in place (Upgradable) with what to run, any other with how to
// copy it.
func (s *Store) olderError(format int) error {
	fs := s.idx.Paths
	if format == 1 {
		return fmt.Errorf("filesystem %s was made by an older esfs (format 1; this esfs reads format %d): upgrade it in place with esfs mkfs --index %s once it is unmounted everywhere (it gets its write aliases, and esfs older than this one refuse it then): %w",
			fs, FormatVersion, fs, ErrFormat)
	}
	return fmt.Errorf("filesystem %s was made by an older esfs (format %d; this esfs reads format %d and cannot upgrade format %d in place): copy it with an esfs that reads format %d (esfs export) into a new filesystem made by this one (esfs mkfs, esfs import), then esfs destroy --index %s: %w",
		fs, format, FormatVersion, format, format, fs, ErrFormat)
}

// Settings returns what Inspect finds, after checking that this esfs reads
// the filesystem (a newer one may keep its settings elsewhere).
func (a Admin) Settings(ctx context.Context) ([]IndexInfo, error) {
	infos, err := a.Inspect(ctx)
	if err != nil {
		return nil, err
	}
	return infos, a.Check(infos)
}

// ChangeSettings sets the replicas (a number, or an auto_expand_replicas
// range "A-B") and the refresh interval of every index of the filesystem;
// empty leaves a setting as it is. Both are dynamic: live mounts go on.
func (a Admin) ChangeSettings(ctx context.Context, replicas, refresh string) error {
	s := a.s
	set := map[string]any{}
	if replicas != "" {
		if strings.Contains(replicas, "-") {
			set["auto_expand_replicas"] = replicas
		} else {
			// A fixed number: auto expansion would override it.
			set["auto_expand_replicas"] = "false"
			set["number_of_replicas"] = replicas
		}
	}
	if refresh != "" {
		set["refresh_interval"] = refresh
	}
	if len(set) == 0 {
		return nil
	}
	body, _ := json.Marshal(map[string]any{"index": set})
	what := "changing the settings of filesystem " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + strings.Join(s.allIndices(), ",") + "/_settings", body: body})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}

// BlockSessions stops new sessions (mounts) from registering, and existing
// ones from heartbeating: a write block on the sessions index, in place
// on every shard when it returns.
func (a Admin) BlockSessions(ctx context.Context) error {
	s := a.s
	what := "blocking writes to index " + s.idx.Sessions
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(s.idx.Sessions) + "/_block/write"})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}

// UnblockSessions undoes BlockSessions.
func (a Admin) UnblockSessions(ctx context.Context) error {
	s := a.s
	what := "removing the write block of index " + s.idx.Sessions
	body, _ := json.Marshal(map[string]any{"index.blocks.write": nil})
	res, err := s.do(ctx, what, request{method: "PUT", path: "/" + url.PathEscape(s.idx.Sessions) + "/_settings", body: body})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}

// DeleteIndices deletes some of the filesystem's indices (esfs destroy
// names those it found and judged, never a name it did not look at).
func (a Admin) DeleteIndices(ctx context.Context, names []string) error {
	s := a.s
	mine := map[string]bool{}
	for _, n := range s.allIndices() {
		mine[n] = true
	}
	for _, n := range names {
		if !mine[n] {
			return fmt.Errorf("index %s is not one of filesystem %s: %w", n, s.idx.Paths, ErrInvalid)
		}
	}
	if len(names) == 0 {
		return nil
	}
	what := "deleting filesystem " + s.idx.Paths
	res, err := s.do(ctx, what, request{method: "DELETE", path: "/" + strings.Join(names, ","), query: url.Values{"ignore_unavailable": {"true"}}})
	if err != nil {
		return err
	}
	if res.status != 200 {
		return failure(what, res)
	}
	return nil
}
