package cmd

import (
	"runtime/debug"
	"testing"
)

// TestReadBuild: the version comes from -X when set, else from the
// module; the revision from the VCS stamp, +dirty when the tree had
// changes; and a build without any of it says so.
func TestReadBuild(t *testing.T) {
	stamped := func(version string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/esfs/esfs", Version: version}, Settings: settings}, true
		}
	}
	vcs := []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "4f25f604395754593f6737e78fae6a116994a437"},
		{Key: "vcs.time", Value: "2026-11-25T22:43:49Z"}}
	dirty := append(append([]debug.BuildSetting{}, vcs...), debug.BuildSetting{Key: "vcs.modified", Value: "true"})
	clean := append(append([]debug.BuildSetting{}, vcs...), debug.BuildSetting{Key: "vcs.modified", Value: "false"})
	for _, c := range []struct {
		name, ld string
		info     func() (*debug.BuildInfo, bool)
		want     string
	}{
		{"checkout, clean", "", stamped("v0.0.0-20261125224349-4f25f6043957", clean...),
			"v0.0.0-20261125224349-4f25f6043957 (revision 4f25f604395754593f6737e78fae6a116994a437 of 2026-11-25T22:43:49Z, go1.99.1)"},
		{"checkout, dirty", "", stamped("(devel)", dirty...),
			"devel (revision 4f25f604395754593f6737e78fae6a116994a437+dirty of 2026-11-25T22:43:49Z, go1.99.1)"},
		{"-X wins", "1.2.3", stamped("v1.2.2", clean...),
			"1.2.3 (revision 4f25f604395754593f6737e78fae6a116994a437 of 2026-11-25T22:43:49Z, go1.99.1)"},
		{"go install @version", "", stamped("v1.2.3"), "v1.2.3 (revision unknown, go1.99.1)"},
		{"no VCS stamp", "", stamped("(devel)"), "devel (revision unknown, go1.99.1)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := readBuild(c.ld, c.info).String(); got != c.want {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
		})
	}
	if b := readBuild("", func() (*debug.BuildInfo, bool) { return nil, false }); b.Version != "devel" || b.Revision != "" {
		t.Errorf("without build information: %+v", b)
	}
}
