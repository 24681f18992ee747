package vfs

import "context"

// Caller is the process a call is made for, as the kernel names it: its
// owner decides what it may do where the kernel's permission checks do not
// (the trusted.* extended attributes; which set-id bits a write clears).
type Caller struct {
	Uid, Gid uint32
}

type callerKey struct{}

// WithCaller is ctx for a call made for c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// caller returns the uid and gid of the process making the call (root's
// when none was given: the daemon's own calls).
func caller(ctx context.Context) (uint32, uint32) {
	c, _ := ctx.Value(callerKey{}).(Caller)
	return c.Uid, c.Gid
}
