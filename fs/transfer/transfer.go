// Package transfer moves whole trees between a local directory and the
// filesystem without a mount: import writes documents with _bulk, many at a
// time, instead of paying a FUSE request and the locking protocol for each
// file; export reads them with scans and multi-gets. Both run in an admin
// session (`esfs import`, `esfs export`), which takes the locks and reads
// through the protocol's view as a mount does.
package transfer

import (
	"io"
	"os"
)

// Progress is told how far a transfer is, for display.
type Progress interface {
	Start()
	// Total sets what the whole transfer is (unknown when never called).
	Total(entries, bytes int64)
	Add(entries, bytes int64)
	// Stop ends the display, before the transfer prints its problems.
	Stop()
}

// Options is what a transfer reports to, besides its progress.
type Options struct {
	Progress Progress
	// Warn receives the warnings and the problems found, one per line
	// (os.Stderr when nil).
	Warn io.Writer
	// Explain turns an error of a request to Elasticsearch into what the
	// user reads (nil leaves it as it is); errors of the local filesystem
	// and of the transfer's own checks do not go through it.
	Explain func(error) error
	// AllXattrs copies the extended attributes of every namespace; by
	// default only user.* and trusted.* are (see xattrCopied), and the
	// others are counted in one warning.
	AllXattrs bool
}

func (o Options) warn() io.Writer {
	if o.Warn == nil {
		return os.Stderr
	}
	return o.Warn
}

func (o Options) explain(err error) error {
	if o.Explain == nil {
		return err
	}
	return o.Explain(err)
}
