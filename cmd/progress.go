package cmd

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// progress reports a long transfer on stderr: a bar redrawn in place on a
// terminal, a plain line every few seconds otherwise (logs, pipes, CI).
type progress struct {
	verb  string
	quiet bool
	tty   bool
	w     io.Writer

	entries, bytes   atomic.Int64
	totalE, totalB   int64
	began            time.Time
	stopCh, finished chan struct{}
	once             sync.Once
}

func newProgress(verb string, quiet bool) *progress {
	_, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS)
	return &progress{verb: verb, quiet: quiet, tty: err == nil, w: os.Stderr, stopCh: make(chan struct{}), finished: make(chan struct{})}
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
					p.draw()
					fmt.Fprintln(p.w)
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

func (p *progress) draw() {
	e, b := p.entries.Load(), p.bytes.Load()
	rate := float64(b) / max(time.Since(p.began).Seconds(), 1e-3)
	counts := fmt.Sprintf("%d entries, %s", e, mib(b))
	if p.totalE > 0 {
		counts = fmt.Sprintf("%d/%d entries, %s/%s", e, p.totalE, mib(b), mib(p.totalB))
	}
	line := fmt.Sprintf("%s: %s, %s/s", p.verb, counts, mib(int64(rate)))
	if !p.tty {
		fmt.Fprintln(p.w, line)
		return
	}
	frac := 0.0
	switch {
	case p.totalB > 0:
		frac = float64(b) / float64(p.totalB)
	case p.totalE > 0:
		frac = float64(e) / float64(p.totalE)
	}
	frac = min(max(frac, 0), 1)
	const width = 30
	filled := int(frac * width)
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %3.0f%% %s", strings.Repeat("#", filled), strings.Repeat(".", width-filled), 100*frac, line)
}
