package store

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Cond is a condition on path documents or on inode documents that a
// query can test, for esfs find: the documents that meet it are a
// superset of those its caller wants, which it then judges exactly. The
// zero Cond (TrueCond) holds for every document.
type Cond struct {
	op    condOp
	subs  []Cond
	field string
	lo    int64 // condRange: lo <= field <= hi
	hi    int64
	re    string   // condRegexp: the Lucene regular expression of field
	terms []string // condTerms
}

type condOp uint8

const (
	condTrue condOp = iota
	condFalse
	condAll
	condAny
	condNot
	condRange
	condRegexp
	condTerms
)

// TrueCond holds for every document, FalseCond for none.
var (
	TrueCond  = Cond{}
	FalseCond = Cond{op: condFalse}
)

// IsTrue reports whether c holds for every document; IsFalse, for none.
func (c Cond) IsTrue() bool  { return c.op == condTrue }
func (c Cond) IsFalse() bool { return c.op == condFalse }

// AllOf holds where every one of cs holds.
func AllOf(cs ...Cond) Cond {
	var subs []Cond
	for _, c := range cs {
		switch c.op {
		case condTrue:
			continue
		case condFalse:
			return FalseCond
		case condAll:
			subs = append(subs, c.subs...)
		default:
			subs = append(subs, c)
		}
	}
	switch len(subs) {
	case 0:
		return TrueCond
	case 1:
		return subs[0]
	}
	return Cond{op: condAll, subs: subs}
}

// AnyOf holds where one of cs holds.
func AnyOf(cs ...Cond) Cond {
	var subs []Cond
	for _, c := range cs {
		switch c.op {
		case condFalse:
			continue
		case condTrue:
			return TrueCond
		case condAny:
			subs = append(subs, c.subs...)
		default:
			subs = append(subs, c)
		}
	}
	switch len(subs) {
	case 0:
		return FalseCond
	case 1:
		return subs[0]
	}
	return Cond{op: condAny, subs: subs}
}

// NotCond holds where c does not.
func NotCond(c Cond) Cond {
	switch c.op {
	case condTrue:
		return FalseCond
	case condFalse:
		return TrueCond
	case condNot:
		return c.subs[0]
	}
	return Cond{op: condNot, subs: []Cond{c}}
}

// InodeField is a number of an inode document that a Cond can test.
type InodeField string

// The inode documents' numbers (times in nanoseconds since 1970).
const (
	FieldIno   InodeField = "ino"
	FieldSize  InodeField = "size"
	FieldMode  InodeField = "mode"
	FieldUid   InodeField = "uid"
	FieldGid   InodeField = "gid"
	FieldNlink InodeField = "nlink"
	FieldAtime InodeField = "atime"
	FieldMtime InodeField = "mtime"
	FieldCtime InodeField = "ctime"
)

// InodeRange holds for the inodes whose field f is in [lo, hi].
func InodeRange(f InodeField, lo, hi int64) Cond {
	if lo > hi {
		return FalseCond
	}
	return Cond{op: condRange, field: string(f), lo: lo, hi: hi}
}

// TypeIs holds for the documents of one of types ts: path documents
// and inode documents alike name their type.
func TypeIs(ts ...FileType) Cond {
	if len(ts) == 0 {
		return FalseCond
	}
	c := Cond{op: condTerms, field: "type"}
	for _, t := range ts {
		c.terms = append(c.terms, t.String())
	}
	return c
}

// NameIs holds for the path documents of the name name.
func NameIs(name string) Cond {
	return Cond{op: condTerms, field: "name", terms: []string{encodeText(name)}}
}

// NameGlob holds for at least the path documents whose name matches the
// shell pattern glob as fnmatch(3) matches it, case-insensitively with
// fold, whether it matches characters (a UTF-8 locale) or bytes (the C
// locale, or a name that is not UTF-8): a wildcard of one character may
// then stand for up to four bytes, so it stands for up to two stored
// characters (see encodeText). A pattern that is not UTF-8 holds for
// every name (its bytes may match parts of stored characters).
func NameGlob(glob string, fold bool) Cond {
	if !utf8.ValidString(glob) || strings.Count(glob, "?")+strings.Count(glob, "[")+strings.Count(glob, "*") > maxGlobWildcards {
		return TrueCond
	}
	var b strings.Builder
	rs := []rune(glob)
	for i := 0; i < len(rs); i++ {
		switch r := rs[i]; r {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".{0,2}")
		case '[':
			// A bracket matches one character or byte; an unclosed one is a
			// literal [, which .{0,2} also covers.
			if end := bracketEnd(rs, i); end > 0 {
				i = end
			}
			b.WriteString(".{0,2}")
		case '\\':
			if i+1 == len(rs) {
				return FalseCond // a trailing backslash matches nothing
			}
			i++
			writeGlobLiteral(&b, rs[i], fold)
		default:
			writeGlobLiteral(&b, r, fold)
		}
	}
	if b.Len() > maxRegexp {
		return TrueCond
	}
	return Cond{op: condRegexp, field: "name", re: b.String()}
}

// Bounds on the name patterns pushed down: Elasticsearch refuses a
// regular expression longer than index.max_regex_length (1,000), and one
// whose automaton grows too large; longer patterns are matched on the
// client alone.
const (
	maxRegexp        = 900
	maxGlobWildcards = 20
)

// bracketEnd is the index of the ] that closes the bracket expression
// opening at rs[i], or 0 if none does (the [ is then a literal).
func bracketEnd(rs []rune, i int) int {
	j := i + 1
	if j < len(rs) && (rs[j] == '!' || rs[j] == '^') {
		j++
	}
	if j < len(rs) && rs[j] == ']' {
		j++
	}
	for ; j < len(rs); j++ {
		switch {
		case rs[j] == ']':
			return j
		case rs[j] == '\\' && j+1 < len(rs):
			j++
		case rs[j] == '[' && j+1 < len(rs) && strings.ContainsRune(":=.", rs[j+1]):
			// [:class:], [=c=], [.c.]: up to the closing pair.
			end := -1
			for k := j + 2; k+1 < len(rs); k++ {
				if rs[k] == rs[j+1] && rs[k+1] == ']' {
					end = k + 1
					break
				}
			}
			if end > 0 {
				j = end
			}
		}
	}
	return 0
}

// writeGlobLiteral writes the stored form of r, or with fold every
// character whose lower case is r's (as towlower folds them).
func writeGlobLiteral(b *strings.Builder, r rune, fold bool) {
	if !fold {
		for _, x := range encodeText(string(r)) {
			writeLiteral(b, x)
		}
		return
	}
	same := foldClass(r)
	if len(same) == 1 {
		writeGlobLiteral(b, r, false)
		return
	}
	b.WriteByte('(')
	for i, x := range same {
		if i > 0 {
			b.WriteByte('|')
		}
		writeGlobLiteral(b, x, false)
	}
	b.WriteByte(')')
}

// foldClass is r and every character with the same lower case.
func foldClass(r rune) []rune {
	lower := unicode.ToLower(r)
	out := []rune{lower}
	for x := unicode.SimpleFold(lower); x != lower; x = unicode.SimpleFold(x) {
		if unicode.ToLower(x) == lower {
			out = append(out, x)
		}
	}
	// Characters whose lower case is r's outside its fold orbit (U+0130,
	// whose lower case is i).
	for _, x := range lowersTo[lower] {
		out = append(out, x)
	}
	return out
}

// lowersTo maps a lower case letter to the upper case characters that
// lower to it without being in its simple case fold orbit.
var lowersTo = func() map[rune][]rune {
	m := map[rune][]rune{}
	for _, rt := range []*unicode.RangeTable{unicode.Lu, unicode.Lt} {
		for _, rg := range rt.R16 {
			for x := rune(rg.Lo); x <= rune(rg.Hi); x += rune(rg.Stride) {
				addLowersTo(m, x)
			}
		}
		for _, rg := range rt.R32 {
			for x := rune(rg.Lo); x <= rune(rg.Hi); x += rune(rg.Stride) {
				addLowersTo(m, x)
			}
		}
	}
	return m
}()

func addLowersTo(m map[rune][]rune, x rune) {
	l := unicode.ToLower(x)
	if l == x {
		return
	}
	for y := unicode.SimpleFold(l); y != l; y = unicode.SimpleFold(y) {
		if y == x {
			return
		}
	}
	m[l] = append(m[l], x)
}

// PathDepth holds for the paths from min to max components below root
// (max < 0: any number).
func PathDepth(root string, min, max int) Cond {
	if max >= 0 && min > max {
		return FalseCond
	}
	var b strings.Builder
	if root != "/" {
		for _, r := range encodeText(root) {
			writeLiteral(&b, r)
		}
	}
	b.WriteString("(/[^/]+)")
	switch {
	case max < 0:
		fmt.Fprintf(&b, "{%d,}", min)
	default:
		fmt.Fprintf(&b, "{%d,%d}", min, max)
	}
	return Cond{op: condRegexp, field: "path", re: b.String()}
}

// query is c as an Elasticsearch query.
func (c Cond) query() map[string]any {
	switch c.op {
	case condTrue:
		return map[string]any{"match_all": map[string]any{}}
	case condFalse:
		return map[string]any{"match_none": map[string]any{}}
	case condAll, condAny:
		subs := make([]any, len(c.subs))
		for i, s := range c.subs {
			subs[i] = s.query()
		}
		if c.op == condAll {
			return map[string]any{"bool": map[string]any{"filter": subs}}
		}
		return map[string]any{"bool": map[string]any{"should": subs, "minimum_should_match": 1}}
	case condNot:
		return map[string]any{"bool": map[string]any{"must_not": []any{c.subs[0].query()}}}
	case condRange:
		return map[string]any{"range": map[string]any{c.field: map[string]any{"gte": c.lo, "lte": c.hi}}}
	case condRegexp:
		return map[string]any{"regexp": map[string]any{c.field: map[string]any{
			"value": c.re, "flags": "NONE", "max_determinized_states": 100000,
		}}}
	case condTerms:
		return map[string]any{"terms": map[string]any{c.field: c.terms}}
	}
	panic(fmt.Sprintf("store: condition of unknown kind %d", c.op))
}

// String is c as a query, for debugging.
func (c Cond) String() string {
	b, _ := json.Marshal(c.query())
	return string(b)
}

// orInFlight is the query of the path documents that meet c, or that
// carry a rename's intent: the view may show those with another inode
// and type than they hold.
func orInFlight(c Cond) map[string]any {
	return map[string]any{"bool": map[string]any{"should": []any{
		c.query(), map[string]any{"exists": map[string]any{"field": "op"}},
	}, "minimum_should_match": 1}}
}

// count is the number of documents of index that match query.
func (s *Store) count(ctx context.Context, what, index string, query map[string]any) (int64, error) {
	body, _ := json.Marshal(map[string]any{"query": query})
	res, err := s.do(ctx, what, request{method: "POST", path: "/" + url.PathEscape(index) + "/_count", body: body})
	if err != nil {
		return 0, err
	}
	if res.status != 200 {
		return 0, failure(what, res)
	}
	var out struct {
		Count int64 `json:"count"`
	}
	if err := json.Unmarshal(res.body, &out); err != nil {
		return 0, fmt.Errorf("%s: %w: %v", what, ErrCorrupt, err)
	}
	return out.Count, nil
}

// CountInodes is the number of inodes that meet c. Near-realtime:
// refresh first (SearchedInodes).
func (s *Store) CountInodes(ctx context.Context, c Cond) (int64, error) {
	return s.count(ctx, "counting inodes", s.idx.Inodes, c.query())
}

// CountPaths is the number of path documents at or below root that meet
// c (or carry an intent). Near-realtime: refresh first (SearchedPaths).
func (s *Store) CountPaths(ctx context.Context, root string, c Cond) (int64, error) {
	q := map[string]any{"bool": map[string]any{"filter": []any{treeQuery(root), orInFlight(c)}}}
	return s.count(ctx, "counting paths", s.idx.Paths, q)
}

// FindInodes scans the inodes that meet c, in inode number order.
// Near-realtime: refresh first (SearchedInodes).
func (s *Store) FindInodes(c Cond, pageSize int) *InodeScanner {
	return &InodeScanner{s: s, query: c.query(), size: pageSize}
}

// EntryCounts counts the entries of each directory of dirs: those that
// carry no intent (which readers see), and those that carry one (which
// they may or may not see: the view tells). A directory without entries
// is absent from both. Near-realtime: refresh first (SearchedPaths).
func (s *Store) EntryCounts(ctx context.Context, dirs []string) (plain, inFlight map[string]int64, err error) {
	plain, inFlight = map[string]int64{}, map[string]int64{}
	if len(dirs) == 0 {
		return plain, inFlight, nil
	}
	enc := make([]string, len(dirs))
	for i, d := range dirs {
		enc[i] = encodeText(d)
	}
	req := map[string]any{
		"size": 0, "track_total_hits": false,
		"query": map[string]any{"terms": map[string]any{"parent": enc}},
		"aggs": map[string]any{"dirs": map[string]any{
			"terms": map[string]any{"field": "parent", "size": len(dirs)},
			"aggs": map[string]any{"intents": map[string]any{
				"filter": map[string]any{"exists": map[string]any{"field": "op"}},
			}},
		}},
	}
	what := fmt.Sprintf("counting the entries of %d directories", len(dirs))
	var out struct {
		Aggregations struct {
			Dirs struct {
				Buckets []struct {
					Key     string `json:"key"`
					Count   int64  `json:"doc_count"`
					Intents struct {
						Count int64 `json:"doc_count"`
					} `json:"intents"`
				} `json:"buckets"`
			} `json:"dirs"`
		} `json:"aggregations"`
	}
	if err := s.search(ctx, what, s.idx.Paths, req, &out); err != nil {
		return nil, nil, err
	}
	for _, b := range out.Aggregations.Dirs.Buckets {
		dir, err := decodeText(b.Key)
		if err != nil {
			return nil, nil, err
		}
		if n := b.Count - b.Intents.Count; n > 0 {
			plain[dir] = n
		}
		if b.Intents.Count > 0 {
			inFlight[dir] = b.Intents.Count
		}
	}
	return plain, inFlight, nil
}

// Holds reports whether c holds for path document d, or with n not nil
// for inode document n, as Elasticsearch would judge it (for tests of
// what is pushed down).
func (c Cond) Holds(d Dentry, n *Inode) bool {
	switch c.op {
	case condTrue:
		return true
	case condFalse:
		return false
	case condAll:
		for _, s := range c.subs {
			if !s.Holds(d, n) {
				return false
			}
		}
		return true
	case condAny:
		for _, s := range c.subs {
			if s.Holds(d, n) {
				return true
			}
		}
		return false
	case condNot:
		return !c.subs[0].Holds(d, n)
	case condRange:
		if n == nil {
			return false
		}
		v := map[string]int64{"ino": int64(n.Ino), "size": n.Size, "mode": int64(n.Mode), "uid": int64(n.Uid), "gid": int64(n.Gid),
			"nlink": int64(n.Nlink), "atime": n.Atime, "mtime": n.Mtime, "ctime": n.Ctime}[c.field]
		return c.lo <= v && v <= c.hi
	case condRegexp:
		v := d.Name
		if c.field == "path" {
			v = d.Path
		}
		re, err := regexp.Compile(`(?s)^(?:` + c.re + `)$`)
		return err == nil && re.MatchString(encodeText(v))
	case condTerms:
		v := encodeText(d.Name)
		if c.field == "type" {
			v = d.Type.String()
			if n != nil {
				v = n.Type.String()
			}
		}
		for _, t := range c.terms {
			if t == v {
				return true
			}
		}
		return false
	}
	return false
}
