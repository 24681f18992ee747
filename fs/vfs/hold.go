package vfs

// hold is what this mount holds of a directory. It is read once, at the
// start of a call made in the directory, and decides how the call runs:
//
//   - holdNothing: a change takes the protocol's locks (a create, a shared
//     lease on the directory when it can), after what is pending here is
//     flushed; a read is made in real time (with delegations) or from the
//     daemon's cache (without);
//   - holdRead: a read delegation; lookups, listings and attributes are
//     answered from what it knows (deleg.go), changes run as with nothing;
//   - holdWrite: a write delegation; names are made, removed and renamed in
//     memory (writeback*.go) when every name they touch is known there,
//     and otherwise as with nothing.
type hold int

const (
	holdNothing hold = iota
	holdRead
	holdWrite
)

// holdOf returns what this mount holds of directory dir, and the
// delegation's state (nil with holdNothing).
func (f *Mount) holdOf(dir uint64) (*dirState, hold) {
	st := f.delegs.state(dir)
	switch {
	case st == nil:
		return nil, holdNothing
	case f.wb != nil && st.d.Writable():
		return st, holdWrite
	}
	return st, holdRead
}
