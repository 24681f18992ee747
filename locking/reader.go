// The protocol as seen by commands that only read: esfs status, locks,
// search, export and fsck without --repair.

package locking

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/esfs/esfs/locking/lockorder"
	"github.com/esfs/esfs/store"
)

// Reader reads the tree as a mount's readers see it, and judges sessions,
// without a session of its own and without writing anything: a command
// that only reads then works with read-only credentials, registers nothing
// and waits for nothing. What a session would write it leaves undone:
//
//   - a missing operation record is read as aborted (as a session would
//     make it), not created: a reader only needs to know that the rename
//     has not committed, which is true of a record not yet written;
//   - a session is dead when its document says so, when it has none, or
//     when this reader watched its counter stand still for its lease plus
//     grace, on this machine's clock; the verdict is not written (that is
//     the sweepers' and fsck --repair's to do), so the owner is not fenced
//     by it;
//   - the one write it may make is RecallWriters', which asks mounts that
//     write directories in memory to flush; a refusal is ErrForbidden, and
//     the caller says what that costs.
type Reader struct {
	b   Backend
	obs *Observer
	// View reads the tree as readers see it.
	View *View
}

// NewReader returns a reader of the filesystem b; grace is added to each
// watched session's lease, as a mount's Config.Grace (0: half the lease).
func NewReader(b Backend, grace time.Duration, log *slog.Logger) *Reader {
	if log == nil {
		log = slog.Default()
	}
	obs := NewObserver(b, "", grace, log)
	obs.judgeOnly = true
	j := &Journal{b: b, log: log, readOnly: true, done: map[string]store.OpRecord{},
		unfinished: map[string]*unfinished{}, recovering: map[string]bool{}}
	return &Reader{b: b, obs: obs, View: NewView(b, j)}
}

// Dead reports whether session id is dead (see Reader).
func (r *Reader) Dead(ctx context.Context, id string) (bool, error) { return r.obs.Dead(ctx, id) }

// JudgeSessions watches every session long enough to tell live from dead,
// as Coordinator.JudgeSessions does, writing nothing.
func (r *Reader) JudgeSessions(ctx context.Context, wait bool) error {
	_, err := r.obs.Judge(ctx, wait)
	return err
}

// recallPollReader is how often RecallWriters reads the lock documents of
// the writers it recalled; a holder answers within its recallPoll (or
// idlePoll) plus its flush.
const recallPollReader = 25 * time.Millisecond

// RecallWriters asks every mount that writes a directory in memory to
// flush it, and returns once each has (its write delegation's entry is
// gone from the lock document) or is dead, with how many directories
// there were: the store then holds everything that calls which returned
// before RecallWriters began had made. It writes only the recall documents
// of those mounts (store.RecallDeleg, in one bulk), and nothing when no
// mount writes in memory; when the credentials may not write, the error is
// store.ErrForbidden, n is how many directories were not asked for, and
// nobody was asked.
//
// Unlike a mount's recall (Delegations.RecallWriter) it leaves no waiting
// marker: the holder may be granted a new write delegation once it has
// flushed, and what it writes under that one is after this reader began.
func (r *Reader) RecallWriters(ctx context.Context) (int, error) {
	locks, err := r.b.SearchLocks(ctx)
	if err != nil {
		return 0, err
	}
	type writer struct {
		lock string
		path string
		h    store.Holder
	}
	var writers []writer
	for _, l := range locks {
		if !store.IsDelegLock(l.ID) {
			continue
		}
		if _, err := strconv.ParseUint(strings.TrimPrefix(l.ID, "D"), 10, 64); err != nil {
			continue // not a delegation of this format: nothing writes it
		}
		for _, h := range l.Holders {
			if h.Mode == store.Exclusive {
				writers = append(writers, writer{lock: l.ID, path: l.Path, h: h})
			}
		}
	}
	if len(writers) == 0 {
		return 0, nil
	}
	// Ask every writer in one round trip (a refusal means these
	// credentials may not write: nobody is asked), then wait for each.
	asks := make([]store.BulkOp, len(writers))
	now := time.Now().UnixNano()
	for i, w := range writers {
		asks[i] = store.RecallDeleg(w.h.Session, w.lock, now)
	}
	res, err := r.b.Bulk(ctx, asks)
	if err != nil {
		return len(writers), fmt.Errorf("asking the mounts that write in memory to flush: %w", err)
	}
	for i, x := range res {
		if x.Err != nil {
			return len(writers), fmt.Errorf("asking the mount that writes %s to flush: %w", writers[i].path, x.Err)
		}
	}
	var (
		wg    sync.WaitGroup
		mu    lockorder.Mutex
		first error
	)
	for _, w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.waitGiven(ctx, w.lock, w.h); err != nil {
				mu.Lock()
				if first == nil {
					first = fmt.Errorf("waiting for the mount that writes %s to flush: %w", w.path, err)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return len(writers), first
}

// waitGiven returns once holder h's entry is gone from lock document id,
// or h's session is dead (what it did not flush is lost with it).
func (r *Reader) waitGiven(ctx context.Context, id string, h store.Holder) error {
	t := time.NewTicker(recallPollReader)
	defer t.Stop()
	for {
		docs, err := r.b.GetLocks(ctx, []string{id})
		if err != nil {
			return err
		}
		held := false
		for _, x := range docs[0].Holders {
			if x.Session == h.Session && x.Op == h.Op {
				held = true
			}
		}
		if !held {
			return nil
		}
		if dead, err := r.obs.Dead(ctx, h.Session); err != nil {
			return err
		} else if dead {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
