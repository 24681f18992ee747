package cmd

import (
	"reflect"
	"strings"
	"testing"
)

func TestHelperArgs(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		name   string
		args   []string
		helper bool
		want   []string // nil with helper: a fake mount
		err    string
	}{
		{"a plain command is no helper call", []string{"esfs", "mount", "--index", "x", dir}, false, nil, ""},
		{"a typo stays a typo", []string{"esfs", "mout", dir}, false, nil, ""},
		{"convention needs -o", []string{"esfs", "myfs", dir, "extra"}, false, nil, ""},
		{"mount.fuse.esfs with fstab options",
			[]string{"/sbin/mount.fuse.esfs", "myfs", dir, "-o", "rw,_netdev,nofail,noatime,x-systemd.automount,es_url=https://es:9200,es-ca-cert=/etc/esfs/ca.pem,allow_other,lease=20s,log_file=/var/log/esfs.log"}, true,
			[]string{"/sbin/mount.fuse.esfs", "mount", "--daemon", "--index", "myfs", "--es-url=https://es:9200", "--es-ca-cert=/etc/esfs/ca.pem", "--allow-other", "--lease=20s", "--log-file=/var/log/esfs.log", dir}, ""},
		{"esfs: prefix and ro, as mount(8) passes them", []string{"mount.esfs", "esfs:myfs", dir, "-n", "-v", "-oro", "-t", "fuse.esfs"}, true,
			[]string{"mount.esfs", "mount", "--daemon", "--index", "myfs", "--read-only", dir}, ""},
		{"a subdirectory in the source, as the mount table shows it", []string{"mount.fuse.esfs", "esfs:myfs:/projects/a", dir, "-o", "ro"}, true,
			[]string{"mount.fuse.esfs", "mount", "--daemon", "--index", "myfs", "--subdir=/projects/a", "--read-only", dir}, ""},
		{"a subdirectory in the source and in -o", []string{"mount.fuse.esfs", "esfs:myfs:/a", dir, "-o", "subdir=/b"}, true, nil, "give one"},
		{"mount.fuse3 convention", []string{"esfs", "myfs", dir, "-o", "es_url=http://h:9200,dev,suid"}, true,
			[]string{"esfs", "mount", "--daemon", "--index", "myfs", "--es-url=http://h:9200", dir}, ""},
		{"nonempty, as FUSE spells it", []string{"mount.fuse.esfs", "myfs", dir, "-o", "nonempty"}, true,
			[]string{"mount.fuse.esfs", "mount", "--daemon", "--index", "myfs", "--nonempty", dir}, ""},
		{"fake mount", []string{"mount.fuse.esfs", "myfs", dir, "-f"}, true, nil, ""},
		{"unknown option", []string{"mount.fuse.esfs", "myfs", dir, "-o", "colour=blue"}, true, nil, `"colour" is not an esfs option (see`},
		{"misspelled option", []string{"mount.fuse.esfs", "myfs", dir, "-o", "read_onyl"}, true, nil, `"read_onyl" is not an esfs option: did you mean read_only?`},
		{"sloppy ignores unknown options", []string{"mount.fuse.esfs", "myfs", dir, "-s", "-o", "colour=blue"}, true,
			[]string{"mount.fuse.esfs", "mount", "--daemon", "--index", "myfs", dir}, ""},
		{"value missing", []string{"mount.fuse.esfs", "myfs", dir, "-o", "lease"}, true, nil, "needs a value"},
		{"value on a switch", []string{"mount.fuse.esfs", "myfs", dir, "-o", "allow_other=1"}, true, nil, "takes no value"},
		{"a switch that is on by default turned off", []string{"mount.fuse.esfs", "myfs", dir, "-o", "delegations=false,allow_other=true"}, true,
			[]string{"mount.fuse.esfs", "mount", "--daemon", "--index", "myfs", "--delegations=false", "--allow-other=true", dir}, ""},
		{"daemon is ours to set", []string{"mount.fuse.esfs", "myfs", dir, "-o", "daemon"}, true, nil, "not an esfs option"},
		{"missing mount point", []string{"mount.fuse.esfs", "myfs"}, true, nil, "want SOURCE MOUNTPOINT"},
		{"the helper's help is mount's", []string{"mount.fuse.esfs", "--help"}, true, []string{"mount.fuse.esfs", "help", "mount"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			call, helper, err := helperArgs(c.args)
			if helper != c.helper {
				t.Fatalf("helper = %v, want %v", helper, c.helper)
			}
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				if ExitCode(err) != 2 {
					t.Errorf("exit status %d for a bad mount command line, want 2", ExitCode(err))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if call.remount != nil || !reflect.DeepEqual(call.args, c.want) {
				t.Errorf("got  %q (remount %v)\nwant %q", call.args, call.remount, c.want)
			}
		})
	}
}

// TestHelperRemount: -o remount, wherever it stands among the options,
// is a remount with every option as mount(8) gave them, for run to judge.
func TestHelperRemount(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"/sbin/mount.fuse.esfs", "esfs:myfs", dir, "-v", "-o", "ro,nosuid,nodev,relatime,remount,user_id=0,group_id=0,default_permissions,max_read=1048576", "-t", "fuse.esfs"},
		{"esfs", "esfs:myfs", dir, "-o", "remount,ro,nosuid,nodev,relatime,user_id=0,group_id=0,default_permissions,max_read=1048576"}, // through mount.fuse3
	} {
		call, helper, err := helperArgs(args)
		if err != nil || !helper || call.remount == nil {
			t.Fatalf("helperArgs(%q) = %+v, %v, %v; want a remount", args, call, helper, err)
		}
		r := call.remount
		if r.source != "esfs:myfs" || r.dir != dir || len(r.opts) != 9 || r.sloppy {
			t.Errorf("helperArgs(%q): remount %+v", args, *r)
		}
	}
}

func TestPermuteFlags(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"esfs", "search", "foo", "--under", "/x", "--debug"}, []string{"esfs", "search", "--under", "/x", "--debug", "foo"}},
		{[]string{"esfs", "search", "--name=*.go", "foo"}, []string{"esfs", "search", "--name=*.go", "foo"}},
		{[]string{"esfs", "import", "src", "/dst", "-q"}, []string{"esfs", "import", "-q", "src", "/dst"}},
		{[]string{"esfs", "search", "--", "-draft"}, []string{"esfs", "search", "--", "-draft"}},
		{[]string{"esfs", "nosuch", "a", "--b"}, []string{"esfs", "nosuch", "a", "--b"}},
		{[]string{"esfs", "mount", "/mnt", "-o", "ro", "--index", "x"}, []string{"esfs", "mount", "-o", "ro", "--index", "x", "/mnt"}},
		// The completion scripts' question stays last, where urfave/cli looks.
		{[]string{"esfs", "search", "foo", "--un", "--generate-bash-completion"}, []string{"esfs", "search", "--un", "foo", "--generate-bash-completion"}},
		{[]string{"esfs", "search", "--", "-x", "--generate-bash-completion"}, []string{"esfs", "search", "--", "-x", "--generate-bash-completion"}},
	} {
		if got := permuteFlags(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("permuteFlags(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEscapePath(t *testing.T) {
	for in, want := range map[string]string{
		"/":            "-",
		"/mnt/esfs":    "mnt-esfs",
		"/mnt/esfs/":   "mnt-esfs",
		"/mnt/a-b":     `mnt-a\x2db`, // not mnt-a/b's name
		"/mnt/a/b":     "mnt-a-b",
		"/.x/y.z":      `\x2ex-y.z`,
		"/mnt/with sp": `mnt-with\x20sp`,
	} {
		if got := escapePath(in); got != want {
			t.Errorf("escapePath(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHelpFlag(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{[]string{"esfs", "--help"}, []string{"esfs", "help"}},
		{[]string{"esfs", "-h", "mount"}, []string{"esfs", "help", "mount"}},
		{[]string{"esfs", "-help", "frob"}, []string{"esfs", "help"}},
		{[]string{"esfs", "mount", "-h", "/mnt"}, []string{"esfs", "help", "mount"}},
		{[]string{"esfs", "search", "--under", "/x", "--help", "foo"}, []string{"esfs", "help", "search"}},
		{[]string{"esfs", "umount", "--help=true", "/mnt"}, []string{"esfs", "help", "umount"}},
		// Not a help flag: a value, after "--", or turned off.
		{[]string{"esfs", "mount", "--index", "-h", "/mnt"}, []string{"esfs", "mount", "--index", "-h", "/mnt"}},
		{[]string{"esfs", "search", "--", "-h"}, []string{"esfs", "search", "--", "-h"}},
		{[]string{"esfs", "mount", "--help=false", "/mnt"}, []string{"esfs", "mount", "--help=false", "/mnt"}},
		{[]string{"esfs", "nosuch", "-h"}, []string{"esfs", "nosuch", "-h"}},
		// A mistake before it is said first; after it, the help wins.
		{[]string{"esfs", "mount", "--frob", "--help"}, []string{"esfs", "mount", "--frob", "--help"}},
		{[]string{"esfs", "mount", "--help", "--frob"}, []string{"esfs", "help", "mount"}},
	} {
		if got := helpFlag(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("helpFlag(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"ro", "read-only", "attr-timeout", "entry-timeout", "lazy", "mount", "search", "fsck"}
	for typed, want := range map[string]string{
		"mout":        "mount",
		"serach":      "search", // a transposition: two edits in six characters
		"atr-timeout": "attr-timeout",
		"lazzy":       "lazy",
		"frob":        "", // two edits from ro, one allowed in four characters
		"frobnicate":  "",
		"x":           "",
	} {
		if got := closest(typed, names); got != want {
			t.Errorf("closest(%q) = %q, want %q", typed, got, want)
		}
	}
}
