package store

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels. Callers test with errors.Is; the wrapped error carries the cause
// (Elasticsearch's error type and reason, never credentials).
var (
	// ErrNotFound: the document does not exist.
	ErrNotFound = errors.New("not found")
	// ErrExists: a create-if-absent met an existing document.
	ErrExists = errors.New("already exists")
	// ErrConflict: a conditional write met a document whose sequence number
	// changed since it was read (or that was deleted meanwhile).
	ErrConflict = errors.New("version conflict")
	// ErrUnavailable: the cluster could not be reached or did not answer in time,
	// or answered 5xx/429. The outcome of a write that failed this way is unknown.
	ErrUnavailable = errors.New("elasticsearch unavailable")
	// ErrAuth: the cluster refused our credentials (401) or permissions (403,
	// which is also ErrForbidden).
	ErrAuth = errors.New("elasticsearch refused the credentials")
	// ErrForbidden: the cluster knows who we are but denies the request (403):
	// the user or API key lacks privileges. It matches ErrAuth too.
	ErrForbidden error = forbidden{}
	// ErrNoSuchHost: the host name of a node's URL does not resolve. It
	// matches ErrUnavailable too: a name that stops resolving while mounted
	// (a DNS server down, a service being replaced) is retried like any
	// unreachable node; only the message differs, naming the host.
	ErrNoSuchHost error = noSuchHost{}
	// ErrTLS: the cluster's TLS certificate failed verification (unknown CA,
	// wrong host name, expired, not the configured fingerprint). A matter of
	// configuration, never worth a retry, so it is not ErrUnavailable.
	ErrTLS = errors.New("TLS certificate not trusted")
	// ErrScheme: the URL says http:// and the node speaks HTTPS, or the reverse.
	ErrScheme = errors.New("wrong URL scheme")
	// ErrNoIndex: an esfs index is missing: the filesystem was never made
	// (esfs mkfs), or it was destroyed while this process used it.
	ErrNoIndex = errors.New("index missing")
	// ErrMapping: an index exists with a mapping esfs cannot use.
	ErrMapping = errors.New("index mapping conflicts with esfs")
	// ErrBlocked: the index refuses writes (index.blocks.write, which esfs
	// destroy sets on the sessions index while it judges the mounts).
	ErrBlocked = errors.New("index blocked from writes")
	// ErrCorrupt: a document could not be decoded or breaks the model.
	ErrCorrupt = errors.New("corrupt document")
	// ErrInvalid: a request esfs refuses before sending (bad path, bad name).
	ErrInvalid = errors.New("invalid argument")
	// ErrRejected: Elasticsearch refused the request as malformed (400); a bug
	// or a cluster setting, never a condition to retry.
	ErrRejected = errors.New("elasticsearch rejected the request")
)

type forbidden struct{}

func (forbidden) Error() string        { return "elasticsearch denied the request (missing privileges)" }
func (forbidden) Is(target error) bool { return target == ErrAuth }

type noSuchHost struct{}

func (noSuchHost) Error() string        { return "host name does not resolve" }
func (noSuchHost) Is(target error) bool { return target == ErrUnavailable }

// esError is Elasticsearch's error object, as found in responses and bulk items.
type esError struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
	// Additional is security's word on credentials it could not use, e.g.
	// "API key: unable to find apikey with id ..." (ids only, never secrets).
	Additional string `json:"additional_unsuccessful_credentials"`
}

func (e *esError) String() string {
	if e == nil {
		return ""
	}
	s := e.Type
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	if e.Additional != "" {
		s += " (" + e.Additional + ")"
	}
	return s
}

// statusError maps an HTTP status (of a response or of one bulk item) to a
// sentinel wrapped with what Elasticsearch said.
func statusError(status int, what string, cause *esError) error {
	var base error
	switch {
	case status == 404 && cause != nil && cause.Type == "index_not_found_exception":
		base = ErrNoIndex
	case status == 400 && cause != nil && cause.Type == "invalid_index_name_exception":
		// esfs names no index but its own, and writes through their
		// aliases (WriteAliasSuffix): this is a write to an alias that is
		// gone with its index.
		base = ErrNoIndex
		cause = &esError{Type: cause.Type, Reason: "no index behind the write alias: the filesystem was destroyed (or its index deleted by hand), and esfs never lets a write create it"}
	case status == 404:
		base = ErrNotFound
	case status == 409 && cause != nil && cause.Type == "version_conflict_engine_exception" && isCreateConflict(cause.Reason):
		base = ErrExists
	case status == 409:
		base = ErrConflict
	case status == 401:
		base = ErrAuth
	case status == 403 && cause != nil && cause.Type == "cluster_block_exception":
		base = ErrBlocked // not a matter of privileges
	case status == 403:
		base = ErrForbidden
	case status == 429 || status >= 500:
		base = ErrUnavailable
	case status == 400:
		base = ErrRejected
	default:
		base = fmt.Errorf("unexpected HTTP status %d", status)
	}
	if c := cause.String(); c != "" {
		return fmt.Errorf("%s: %w (%d %s)", what, base, status, c)
	}
	return fmt.Errorf("%s: %w (%d)", what, base, status)
}

// isCreateConflict tells a create that met an existing document from a
// conditional write that met a changed one: both are 409 version conflicts,
// and only the reason text tells them apart ("document already exists").
func isCreateConflict(reason string) bool {
	return strings.Contains(reason, "document already exists")
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// DocError is a document that breaks the model (it matches ErrCorrupt):
// the index that holds it and its id, which the log names (once per
// document, see fs) so that it can be found, and mended or removed (esfs
// fsck --repair). Only the paths it touches fail; Err says why.
type DocError struct {
	Index string
	ID    string
	Err   error
	// Ver is the version a scan read it at (unknown elsewhere), for a
	// repair that deletes it (DeleteDamaged).
	Ver Version
}

func (e *DocError) Error() string {
	return fmt.Sprintf("damaged document %s of index %s: %v", e.ID, e.Index, e.Err)
}

func (e *DocError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// damaged is err, an error of decoding document id of index, as a
// DocError (err as it is if it already is one, or is not ErrCorrupt).
func damaged(index, id string, err error) error {
	var de *DocError
	if err == nil || !errors.Is(err, ErrCorrupt) || errors.As(err, &de) {
		return err
	}
	return &DocError{Index: index, ID: id, Err: err}
}

// damagedAt is damaged for a document a scan read at version v.
func damagedAt(index, id string, v Version, err error) error {
	err = damaged(index, id, err)
	if de, ok := err.(*DocError); ok && de.ID == id && !de.Ver.Known() {
		de.Ver = v
	}
	return err
}

// DamagedPath is the DocError of the path document of path, which is
// damaged as why says (the mount found it breaks the model: a second
// name of a directory above it, say).
func (s *Store) DamagedPath(path string, why error) error {
	return &DocError{Index: s.idx.name(pathsIndex), ID: DocID(path), Err: why}
}

// NoteDamaged reports whether err is a damaged document's (a DocError),
// and logs it the first time this process meets that document, op saying
// what met it: what it touches fails (or skips it) as long as it stays,
// and a line per request, or per sweep, would flood the log.
func (s *Store) NoteDamaged(op string, err error) bool {
	var de *DocError
	if !errors.As(err, &de) {
		return false
	}
	if _, seen := s.damaged.LoadOrStore(de.Index+"/"+de.ID, true); !seen {
		s.log.Error("damaged document: what it touches fails or skips it until it is mended (esfs fsck --repair) or removed",
			"op", op, "index", de.Index, "id", de.ID, "err", err)
	}
	return true
}
