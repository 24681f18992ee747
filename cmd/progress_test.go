package cmd

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestProgress: plain lines where stderr is no terminal, a bar redrawn in
// place on one, left with the final state and a newline at the end; a
// warning clears the bar's line first; nothing with --quiet.
func TestProgress(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var buf bytes.Buffer
		p := newProgress("import", false)
		p.tty, p.w, p.cols = tty, &buf, func() int { return 80 }
		p.Total(10, 4<<20)
		p.Start()
		p.Add(5, 2<<20)
		p.draw()
		p.Write([]byte("esfs import: a warning\n"))
		p.Add(5, 2<<20)
		p.Stop()
		out := buf.String()
		if !strings.Contains(out, "import: 5/10 entries, 2.0/4.0 MiB") {
			t.Errorf("tty %v: %q lacks the counts", tty, out)
		}
		bar := strings.Contains(out, "\r\033[K[###########............]  50% import:")
		if bar != tty {
			t.Errorf("tty %v: bar drawn %v: %q", tty, bar, out)
		}
		if tty {
			if !strings.Contains(out, "\r\033[Kesfs import: a warning\n") {
				t.Errorf("the warning does not replace the bar's line: %q", out)
			}
			last := out[strings.LastIndex(out, "\r\033[K")+4:]
			if !strings.HasPrefix(last, "[#######################] 100% import: 10/10 entries, 4.0/4.0 MiB, ") || !strings.HasSuffix(last, "/s\n") {
				t.Errorf("the final state is not 100%% on a line of its own: %q", last)
			}
		} else if strings.Contains(out, "\033") || strings.Contains(out, "\r") {
			t.Errorf("escape sequences where stderr is no terminal: %q", out)
		}
	}
	var buf bytes.Buffer
	p := newProgress("export", true)
	p.w = &buf
	p.Start()
	p.Add(1, 1)
	p.Stop()
	if buf.Len() != 0 {
		t.Errorf("--quiet printed %q", buf.String())
	}
}

// TestProgressWidth: the drawn line fits terminals of 20 to 200 columns,
// one column to spare, with as much of the counts as fits; and it says
// 100% only when every entry and byte is done.
func TestProgressWidth(t *testing.T) {
	now := time.Now()
	imp := &progress{verb: "import", tty: true, began: now.Add(-2 * time.Second)}
	imp.Total(123456, 5<<40)
	imp.Add(61728, 5<<39)
	exp := &progress{verb: "export", tty: true, began: now.Add(-2 * time.Second)}
	exp.Add(123456, 3<<30)
	for _, tc := range []struct {
		p     *progress
		cols  int
		want  []string // in the line
		unwan []string // not in it
	}{
		{imp, 20, []string{"50% 2.5/5.0 TiB"}, []string{"[", "entries"}},
		{imp, 40, []string{"[#####.....]  50% import: 2.5/5.0 TiB"}, []string{"entries"}},
		{imp, 80, []string{"[###########............]  50% import: 61728/123456 entries, 2.5/5.0 TiB"}, []string{"/s"}},
		{imp, 200, []string{"[###############...............]  50% import: 61728/123456 entries, 2.5/5.0 TiB, 1.2 TiB/s"}, nil},
		{exp, 20, []string{"3.0 GiB"}, []string{"%", "entries"}},
		{exp, 40, []string{"export: 123456 entries, 3.0 GiB"}, []string{"%", "/s"}},
		{exp, 80, []string{"export: 123456 entries, 3.0 GiB, 1.5 GiB/s"}, []string{"%", "["}},
		{exp, 200, []string{"export: 123456 entries, 3.0 GiB, 1.5 GiB/s"}, []string{"%", "["}},
	} {
		line := tc.p.line(tc.cols, now)
		t.Logf("%d columns: %q", tc.cols, line)
		if len(line) >= tc.cols {
			t.Errorf("%s at %d columns: %d wide: %q", tc.p.verb, tc.cols, len(line), line)
		}
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s at %d columns: %q lacks %q", tc.p.verb, tc.cols, line, w)
			}
		}
		for _, u := range tc.unwan {
			if strings.Contains(line, u) {
				t.Errorf("%s at %d columns: %q has %q", tc.p.verb, tc.cols, line, u)
			}
		}
	}
	for cols := 1; cols <= 300; cols++ {
		for _, p := range []*progress{imp, exp} {
			if line := p.line(cols, now); len(line) >= max(cols, 1) && line != "" {
				t.Errorf("%s at %d columns: %q", p.verb, cols, line)
			}
		}
	}

	// 100% is all of it: the last byte, and the entries after it.
	p := &progress{verb: "import", began: now}
	p.Total(3, 1000)
	for _, tc := range []struct {
		e, b int64
		pct  int
	}{{0, 0, 0}, {1, 999, 99}, {2, 1000, 99}, {3, 1000, 100}, {4, 1001, 100}} {
		p.entries.Store(tc.e)
		p.bytes.Store(tc.b)
		if _, pct := p.fraction(); pct != tc.pct {
			t.Errorf("%d/3 entries, %d/1000 bytes: %d%%, want %d%%", tc.e, tc.b, pct, tc.pct)
		}
	}
}
