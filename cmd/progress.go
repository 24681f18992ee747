package cmd

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// progress reports a long transfer on stderr. On a terminal it is one
// line redrawn in place five times a second, never wider than the
// terminal (whose width is read at every redraw, so a resized terminal
// gets a line that fits within 200 ms, without a SIGWINCH handler), and
// left showing the final counts when the transfer ends. Elsewhere (logs,
// pipes, CI) nothing is drawn: no bar, no escape sequences, a plain line
// every five seconds.
//
// Written by hand rather than with a progress bar library: one line of
// ASCII needs no measure of wide characters, and the libraries that fit
// (vbauerster/mpb, schollz/progressbar) bring five to eight modules each
// for it.
type progress struct {
	verb  string
	quiet bool
	tty   bool
	w     io.Writer
	// cols returns the terminal's width in columns.
	cols func() int

	entries, bytes   atomic.Int64
	totalE, totalB   int64
	began            time.Time
	stopCh, finished chan struct{}
	once             sync.Once

	mu    sync.Mutex // serializes the redraws and the warnings written through Write
	drawn bool       // the cursor is on a drawn line, which a warning must clear first
}

func newProgress(verb string, quiet bool) *progress {
	fd := int(os.Stderr.Fd())
	return &progress{verb: verb, quiet: quiet, tty: isTerminal(os.Stderr), w: os.Stderr, cols: func() int { return terminalCols(fd) },
		stopCh: make(chan struct{}), finished: make(chan struct{})}
}

// terminalCols is the width of terminal fd, or 80 when it has none (a
// pseudo-terminal nobody gave a size).
func terminalCols(fd int) int {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 80
	}
	return int(ws.Col)
}

// Total sets what 100% is (unknown when never called).
func (p *progress) Total(entries, bytes int64) { p.totalE, p.totalB = entries, bytes }

func (p *progress) Add(entries, bytes int64) {
	p.entries.Add(entries)
	p.bytes.Add(bytes)
}

func (p *progress) bytesDone() int64       { return p.bytes.Load() }
func (p *progress) elapsed() time.Duration { return time.Since(p.began) }

func (p *progress) Start() {
	p.began = time.Now()
	if p.quiet {
		close(p.finished)
		return
	}
	every := 5 * time.Second
	if p.tty {
		every = 200 * time.Millisecond
	}
	go func() {
		defer close(p.finished)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-p.stopCh:
				if p.tty {
					// The last state stays on screen, on a line of its own.
					p.draw()
					p.mu.Lock()
					fmt.Fprintln(p.w)
					p.drawn = false
					p.mu.Unlock()
				}
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
}

func (p *progress) Stop() {
	p.once.Do(func() { close(p.stopCh) })
	<-p.finished
}

// Write prints a warning. On a terminal it replaces the drawn line, which
// the next redraw puts back below it, instead of running on after it.
func (p *progress) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drawn {
		if _, err := io.WriteString(p.w, "\r\033[K"); err != nil {
			return 0, err
		}
		p.drawn = false
	}
	return p.w.Write(b)
}

func (p *progress) draw() {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.tty {
		fmt.Fprintln(p.w, p.texts(now)[0])
		return
	}
	// Carriage return, erase the line, draw: the line is narrower than the
	// terminal, so the erase reaches all of what was drawn before.
	fmt.Fprintf(p.w, "\r\033[K%s", p.line(p.cols(), now))
	p.drawn = true
}

// The bar between its brackets: a third of the line, up to barCells, and
// left out when there is not room for minBarCells. Its width depends on
// the terminal's alone, so that it stays put from one redraw to the next.
const (
	barCells    = 30
	minBarCells = 10
)

// line is what a terminal of cols columns shows at time now: the bar, the
// percentage and the counts, shortened to fit (the rate, then the
// entries, then the verb left out). It is at most cols-1 columns wide: a
// character in the last column leaves the cursor waiting to wrap, which
// terminals handle differently. Everything in it is ASCII, so a byte is
// a column.
func (p *progress) line(cols int, now time.Time) string {
	limit := cols - 1
	texts := p.texts(now)
	if p.totalE <= 0 && p.totalB <= 0 {
		return fit(limit, "", texts)
	}
	frac, pct := p.fraction()
	percent := fmt.Sprintf("%3d%%", pct)
	if cells := min(barCells, (limit-len(percent)-4)/3); cells >= minBarCells {
		filled := int(frac * float64(cells))
		return fit(limit, "["+strings.Repeat("#", filled)+strings.Repeat(".", cells-filled)+"] "+percent, texts)
	}
	return fit(limit, strings.TrimLeft(percent, " "), texts)
}

// fit is head followed by the longest of texts that fits in limit
// columns, or as much of head as does.
func fit(limit int, head string, texts []string) string {
	sep := ""
	if head != "" {
		sep = " "
	}
	for _, t := range texts {
		if len(head)+len(sep)+len(t) <= limit {
			return head + sep + t
		}
	}
	if head == "" {
		head = texts[len(texts)-1]
	}
	return head[:min(len(head), max(limit, 0))]
}

// texts are the counts, longest first, each shorter than the one before.
func (p *progress) texts(now time.Time) []string {
	e, b := p.entries.Load(), p.bytes.Load()
	rate := size(int64(float64(b)/max(now.Sub(p.began).Seconds(), 1e-3)), 0) + "/s"
	entries, data := fmt.Sprintf("%d entries", e), size(b, 0)
	if p.totalE > 0 || p.totalB > 0 {
		entries, data = fmt.Sprintf("%d/%d entries", e, p.totalE), size(b, p.totalB)
	}
	return []string{
		p.verb + ": " + entries + ", " + data + ", " + rate,
		p.verb + ": " + entries + ", " + data,
		p.verb + ": " + data,
		data,
	}
}

// fraction is how much of the total is done, for the bar, and as a
// percentage that says 100 only once every entry and every byte is.
func (p *progress) fraction() (float64, int) {
	e, b := p.entries.Load(), p.bytes.Load()
	frac := 1.0
	switch {
	case p.totalB > 0:
		frac = float64(b) / float64(p.totalB)
	case p.totalE > 0:
		frac = float64(e) / float64(p.totalE)
	}
	frac = min(max(frac, 0), 1)
	pct := int(math.Floor(100 * frac))
	if pct == 100 && (e < p.totalE || b < p.totalB) {
		pct = 99
	}
	return frac, pct
}

// size formats done bytes, and "done/total" in the total's unit when there
// is a total, with one decimal: "1.5 MiB", "0.7/2.0 GiB".
func size(done, total int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB"}
	i, scale := 0, float64(1<<10)
	for i < len(units)-1 && float64(max(done, total)) >= scale*(1<<10) {
		i, scale = i+1, scale*(1<<10)
	}
	if total > 0 {
		return fmt.Sprintf("%.1f/%.1f %s", float64(done)/scale, float64(total)/scale, units[i])
	}
	return fmt.Sprintf("%.1f %s", float64(done)/scale, units[i])
}
