package vfs

import (
	"fmt"
	"syscall"

	"github.com/esfs/esfs/locking/lockorder"
)

// Write-back errors are reported as Linux reports them (errseq_t, see
// Documentation/filesystems/vfs.rst, "Handling errors during writeback"):
// an error that befalls data or changes a process has been told are done
// (buffered chunks dropped after a failed write, a pending batch that can
// never land) is recorded with a sequence number on every inode it
// touched, and every open file description of such an inode reports it
// once, at its next fsync or close, whichever comes first; a description
// opened later reports it too while nobody has seen it yet. One process's
// fsync does not swallow what another process must hear.
//
// A lost batch (this mount was declared dead while it held it) touches
// every inode it made or changed in memory: the files and directories it
// made, the stored inodes it moved, removed names' inodes, and the
// directories whose entries it changed. It is also recorded for the mount
// as a whole, reported at the next fsync of every description (esfs's
// fsync makes everything this mount made in memory durable, so any fsync
// after the loss would otherwise claim what is not so). An inode made in
// the lost batch exists nowhere: every fsync and close through it fails
// with EIO, and nothing of it is written any more.

// errMark is the last write-back error of an inode, or of the mount.
type errMark struct {
	seq  uint64 // advances with every error; 0: none
	err  error
	seen bool // reported to some description already
	// gone: the inode was made in memory and its batch was lost.
	gone bool
}

// ErrSince is what one open file description has reported (errseq's
// f_wb_err): the sequence numbers of the inode's and the mount's marks.
type ErrSince struct {
	ino, mount uint64
}

// errSeq holds the marks of a mount; the zero value is ready.
type errSeq struct {
	mu     lockorder.Mutex // protects the following, and every ErrSince
	last   uint64
	mount  errMark
	inodes map[uint64]*errMark // made on the first error
}

// sample is what a description opened on ino now starts from: every
// error seen already, and none that nobody has seen.
func (e *errSeq) sample(ino uint64) ErrSince {
	e.mu.Lock()
	defer e.mu.Unlock()
	var s ErrSince
	if e.mount.seen {
		s.mount = e.mount.seq
	}
	if m := e.inodes[ino]; m != nil && m.seen {
		s.ino = m.seq
	}
	return s
}

// fail records err, after which ino's buffered data was dropped.
func (e *errSeq) fail(ino uint64, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last++
	if e.inodes == nil {
		e.inodes = map[uint64]*errMark{}
	}
	m := e.inodes[ino]
	if m == nil {
		m = &errMark{}
		e.inodes[ino] = m
	}
	gone := m.gone
	*m = errMark{seq: e.last, err: err, gone: gone}
}

// lose records a lost batch: made are the inodes it made (now gone),
// touched the stored ones it changed that are open here (one not open
// has no description to tell; the mount's mark tells the next fsync).
// open are the inodes open now: the marks of others that were seen, or
// are gone, are dropped, so that the marks stay few.
func (e *errSeq) lose(err error, made, touched []uint64, open map[uint64]bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for ino, m := range e.inodes {
		if !open[ino] && (m.seen || m.gone) {
			delete(e.inodes, ino)
		}
	}
	e.last++
	if e.inodes == nil {
		e.inodes = map[uint64]*errMark{}
	}
	e.mount = errMark{seq: e.last, err: err}
	for _, ino := range made {
		e.inodes[ino] = &errMark{seq: e.last, err: err, gone: true}
	}
	for _, ino := range touched {
		if m := e.inodes[ino]; open[ino] && (m == nil || !m.gone) {
			e.inodes[ino] = &errMark{seq: e.last, err: err}
		}
	}
}

// forget drops the mark of ino, whose last description was released,
// unless it waits for a description to report it.
func (e *errSeq) forget(ino uint64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := e.inodes[ino]; m != nil && (m.seen || m.gone) {
		delete(e.inodes, ino)
	}
}

// gone returns the loss of ino if it was made in a batch that was lost:
// it exists nowhere, and nothing may be written for it.
func (e *errSeq) gone(ino uint64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if m := e.inodes[ino]; m != nil && m.gone {
		return m.err
	}
	return nil
}

// check reports to the description s on ino what it has not reported
// yet: the inode's error, and at fsync (mount true) the mount's too; a
// gone inode's always. One report covers every error so far, as errseq
// keeps only the latest.
func (e *errSeq) check(ino uint64, s *ErrSince, mount bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var err error
	if m := e.inodes[ino]; m != nil && (m.seq > s.ino || m.gone) {
		err, s.ino, m.seen = m.err, m.seq, true
		if e.mount.seq == m.seq {
			s.mount = m.seq // the same loss, told once
		}
	}
	if mount && e.mount.seq > s.mount {
		if err == nil || e.mount.seq > s.ino {
			err = e.mount.err
		}
		s.mount, e.mount.seen = e.mount.seq, true
	}
	return err
}

// unseen returns the mount's last error if nothing has reported it yet,
// for the log at unmount, which counts as a report (descriptions open
// still report it: they compare sequence numbers).
func (e *errSeq) unseen() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.mount.seq > 0 && !e.mount.seen {
		e.mount.seen = true
		return e.mount.err
	}
	return nil
}

// lostErr is what a lost batch is reported as.
func lostErr(entries int, cause error) error {
	return fmt.Errorf("a pending batch of %d entries was lost (this mount was cut off past its lease): %v: %w", entries, cause, syscall.EIO)
}
