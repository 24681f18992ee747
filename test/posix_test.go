package test

// go-fuse's POSIX checks through a real mount, and the package's TestMain:
// every test of this package mounts the esfs binary for real and needs
// ELASTICSEARCH_URL and root.

import (
	"os"
	"sort"
	"testing"

	"github.com/esfs/esfs/test/mounttest"
	"github.com/esfs/esfs/test/testenv"
	"github.com/hanwen/go-fuse/v2/posixtest"
)

func TestMain(m *testing.M) {
	testenv.PrintVersion("test")
	removeLogs := mounttest.PrivateDaemonLogs()
	code := m.Run()
	removeLogs()
	mounttest.RemoveBinary()
	os.Exit(code)
}

// unsupported lists go-fuse posixtest checks of features esfs does not
// offer, each with the reason; every other check must pass.
var unsupported = map[string]string{
	"DirectIO":          "O_DIRECT is not supported (like most FUSE filesystems without direct_io)",
	"Fallocate":         "fallocate is not implemented (EOPNOTSUPP): esfs files are sparse by nature",
	"FallocateKeepSize": "fallocate is not implemented (EOPNOTSUPP)",
	// This check expects two fcntl locks of one process to conflict, which
	// POSIX record locks never do on a local filesystem either: they belong
	// to the process, as esfs's do (test/filelock_test.go checks conflicts
	// between processes and mounts).
	"FcntlFlockLocksFile": "one process's record locks never conflict with each other (POSIX)",
}

// TestPosix runs go-fuse's POSIX checks on a real mount, each on a fresh
// directory of one mount.
func TestPosix(t *testing.T) {
	f := mounttest.NewFS(t)
	m := f.Mount(t)
	names := make([]string, 0, len(posixtest.All))
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fn := posixtest.All[name]
		t.Run(name, func(t *testing.T) {
			if why, ok := unsupported[name]; ok {
				t.Skip(why)
			}
			dir := m.Path(name)
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			fn(t, dir)
		})
	}
}
