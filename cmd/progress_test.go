package cmd

import (
	"bytes"
	"strings"
	"testing"
)

// TestProgress: plain lines where stderr is no terminal, a bar redrawn in
// place on one.
func TestProgress(t *testing.T) {
	for _, tty := range []bool{false, true} {
		var buf bytes.Buffer
		p := newProgress("import", false)
		p.tty, p.w = tty, &buf
		p.Total(10, 4<<20)
		p.Start()
		p.Add(5, 2<<20)
		p.draw()
		p.Stop()
		out := buf.String()
		if !strings.Contains(out, "import: 5/10 entries, 2.0 MiB/4.0 MiB") {
			t.Errorf("tty %v: %q lacks the counts", tty, out)
		}
		bar := strings.Contains(out, "\r\033[K[###############...............]  50%")
		if bar != tty {
			t.Errorf("tty %v: bar drawn %v: %q", tty, bar, out)
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
