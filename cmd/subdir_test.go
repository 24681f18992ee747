package cmd

import (
	"reflect"
	"strings"
	"testing"
)

func TestSubdirPath(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"", "/", ""},
		{"/", "/", ""},
		{"/projects/a", "/projects/a", ""},
		{"/projects/a/", "/projects/a", ""},
		{"//projects/./a", "/projects/a", ""},
		{"projects/a", "", "from the filesystem's root"},
		{"./a", "", "from the filesystem's root"},
		{"/projects/../a", "", `no ".."`},
		{"/..", "", `no ".."`},
		{"/" + strings.Repeat("n", 300), "", "too long"},
	} {
		got, err := subdirPath(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || ExitCode(err) != 2 {
				t.Errorf("subdirPath(%q) = %q, %v; want a usage error containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("subdirPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func TestSubdirOfSource(t *testing.T) {
	for _, c := range []struct {
		source, prefix, want string
		ok                   bool
	}{
		{"esfs:fs", "fs", "/", true},
		{"esfs:fs:/projects/a", "fs", "/projects/a", true},
		{"esfs:fs2", "fs", "", false},
		{"esfs:fs2:/a", "fs", "", false},
		{"esfs:other", "fs", "", false},
		{"tmpfs", "fs", "", false},
	} {
		if got, ok := subdirOfSource(c.source, c.prefix); got != c.want || ok != c.ok {
			t.Errorf("subdirOfSource(%q, %q) = %q, %v; want %q, %v", c.source, c.prefix, got, ok, c.want, c.ok)
		}
	}
	if s := fsName("fs", "/projects/a"); s != "esfs:fs:/projects/a" {
		t.Errorf("fsName = %q", s)
	}
	if s := fsName("fs", "/"); s != "esfs:fs" {
		t.Errorf("fsName of the whole filesystem = %q", s)
	}
}

// TestHelperSubdir: -o subdir=DIR (fstab, mount -t fuse.esfs) becomes
// --subdir.
func TestHelperSubdir(t *testing.T) {
	dir := t.TempDir()
	call, helper, err := helperArgs([]string{"/sbin/mount.fuse.esfs", "esfs:myfs", dir, "-o", "rw,subdir=/projects/a,_netdev"})
	want := []string{"/sbin/mount.fuse.esfs", "mount", "--daemon", "--index", "myfs", "--subdir=/projects/a", dir}
	if err != nil || !helper || !reflect.DeepEqual(call.args, want) {
		t.Errorf("got %q, %v, %v; want %q", call.args, helper, err, want)
	}
	if _, _, err := helperArgs([]string{"/sbin/mount.fuse.esfs", "myfs", dir, "-o", "subdir"}); err == nil || !strings.Contains(err.Error(), "needs a value") {
		t.Errorf("-o subdir without a value: %v", err)
	}
}
