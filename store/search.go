package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// SearchFilter narrows esfs search: paths at or below Under, whose name
// matches the shell glob Name (case-insensitively with NameFold), and
// that meet Where (esfs find's conditions on path documents; those that
// carry a rename's intent pass it, as the view may show them otherwise).
type SearchFilter struct {
	Under    string
	Name     string
	NameFold bool
	Where    Cond
}

// textQuery is the query language of esfs search: Elasticsearch's
// simple_query_string, which never fails on syntax (a stray quote is a
// literal), with AND between words as grep users expect.
func textQuery(q string, field string) map[string]any {
	return map[string]any{"simple_query_string": map[string]any{
		"query": q, "fields": []string{field}, "default_operator": "and",
	}}
}

// ContentMatches pages through the data chunks whose text matches query
// and calls each with the inode numbers of a page (an inode may repeat
// across pages, once per matching chunk). Near-realtime: refresh first.
func (s *Store) ContentMatches(ctx context.Context, query string, each func(inos []uint64) error) error {
	var after []any
	const page = 5000
	for {
		req := map[string]any{
			"size": page, "query": textQuery(query, "text"),
			// The sort values carry ino and chunk: no _source, so 1 MiB
			// chunks are not sent back just to learn their inode.
			"_source": false, "sort": []any{map[string]any{"ino": "asc"}, map[string]any{"chunk": "asc"}},
			"track_total_hits": false,
		}
		if after != nil {
			req["search_after"] = after
		}
		what := "searching file contents"
		var out struct {
			Hits struct {
				Hits []struct {
					Sort []json.Number `json:"sort"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := s.search(ctx, what, s.idx.Data, req, &out); err != nil {
			return err
		}
		hits := out.Hits.Hits
		inos := make([]uint64, 0, len(hits))
		for _, h := range hits {
			if len(h.Sort) != 2 {
				return fmt.Errorf("%s: a hit without its sort values: %w", what, ErrCorrupt)
			}
			ino, err := strconv.ParseUint(string(h.Sort[0]), 10, 64)
			if err != nil {
				return fmt.Errorf("%s: inode %q: %w", what, h.Sort[0], ErrCorrupt)
			}
			inos = append(inos, ino)
		}
		if len(inos) > 0 {
			if err := each(inos); err != nil {
				return err
			}
		}
		if len(hits) < page {
			return nil
		}
		last := hits[len(hits)-1].Sort
		after = []any{last[0], last[1]}
	}
}

// SearchPaths scans, in path order over a point-in-time, the path
// documents that pass f and whose name matches query (if not empty) or
// whose inode is one of inos (if any). With neither, every path passing f.
func (s *Store) SearchPaths(query string, inos []uint64, f SearchFilter, pageSize int) (*Scanner, error) {
	var filter, should []any
	if f.Under != "" && f.Under != "/" {
		filter = append(filter, treeQuery(f.Under))
	}
	if f.Name != "" {
		re, err := globRegexp(encodeText(f.Name))
		if err != nil {
			return nil, err
		}
		filter = append(filter, map[string]any{"regexp": map[string]any{"name": map[string]any{
			"value": re, "flags": "NONE", "case_insensitive": f.NameFold, "max_determinized_states": 100000,
		}}})
	}
	if !f.Where.IsTrue() {
		filter = append(filter, orInFlight(f.Where))
	}
	if query != "" {
		should = append(should, textQuery(query, "name.text"))
	}
	if len(inos) > 0 {
		// new_ino: a name that a rename in flight replaces shows its new
		// inode once the rename commits.
		should = append(should, map[string]any{"terms": map[string]any{"ino": inos}},
			map[string]any{"terms": map[string]any{"new_ino": inos}})
	}
	b := map[string]any{"filter": filter}
	if len(should) > 0 {
		b["should"], b["minimum_should_match"] = should, 1
	}
	return &Scanner{s: s, query: map[string]any{"bool": b}, sortKey: "path", pageSize: pageSize, usePIT: true}, nil
}

// globRegexp turns a shell glob (*, ?, [abc], [!a-z], \x) into a Lucene
// regular expression matching the whole name.
func globRegexp(glob string) (string, error) {
	var b strings.Builder
	rs := []rune(glob)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		case '\\':
			if i+1 < len(rs) {
				i++
				writeLiteral(&b, rs[i])
			} else {
				writeLiteral(&b, r)
			}
		case '[':
			j := i + 1
			if j < len(rs) && (rs[j] == '!' || rs[j] == '^') {
				j++
			}
			if j < len(rs) && rs[j] == ']' {
				j++ // a leading ] is a member
			}
			for j < len(rs) && rs[j] != ']' {
				j++
			}
			if j >= len(rs) {
				return "", fmt.Errorf("name pattern %q: unclosed [: %w", glob, ErrInvalid)
			}
			b.WriteByte('[')
			k := i + 1
			if rs[k] == '!' || rs[k] == '^' {
				b.WriteByte('^')
				k++
			}
			start := k
			for ; k < j; k++ {
				if rs[k] == '-' && k > start && k+1 < j {
					b.WriteByte('-')
					continue
				}
				writeLiteral(&b, rs[k])
			}
			b.WriteByte(']')
			i = j
		default:
			writeLiteral(&b, r)
		}
	}
	return b.String(), nil
}

// writeLiteral writes r escaped for Lucene's regexp syntax.
func writeLiteral(b *strings.Builder, r rune) {
	if strings.ContainsRune(`.?+*|{}[]()"\#@&<>~^$-`, r) {
		b.WriteByte('\\')
	}
	b.WriteRune(r)
}
