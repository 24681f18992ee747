package store

// Admin is what the operator's commands and the tests do to a
// filesystem as a whole: make it (Mkfs), read and change its indices'
// settings and format, block new mounts while it is destroyed, delete
// it. A mount never needs any of it; keeping it apart keeps Store the
// interface of a mount.
type Admin struct{ s *Store }

// Admin returns the filesystem's administration on this store's
// connection.
func (s *Store) Admin() Admin { return Admin{s} }
