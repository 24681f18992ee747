package cmd

import (
	"runtime"
	"runtime/debug"
	"strings"
)

// build is what this binary is: the version of esfs, the commit it was
// built from and the Go that built it. `esfs --version` prints it, the
// mount logs it and publishes it (esfs_build_info, and its session
// document for `esfs status`).
type build struct {
	// Version is the -ldflags -X value of Version when set (a packager's
	// name for the release); else the module's version, as `go install
	// ...@v1.2.3` or a build in a git checkout stamps it (v1.2.3, or a
	// pseudo-version); else "devel".
	Version string
	// Revision is the commit, with "+dirty" when the tree had changes not
	// committed; Time the commit's time. Empty when the build recorded no
	// VCS information (go build -buildvcs=false, a git worktree, whose
	// .git is a file Go does not look into, a go test binary).
	Revision, Time string
	GoVersion      string
}

// thisBuild reads the build of the running binary.
func thisBuild() build { return readBuild(Version, debug.ReadBuildInfo) }

// readBuild is thisBuild from its sources: the -X value (empty when not
// set) and the build information.
func readBuild(ldVersion string, info func() (*debug.BuildInfo, bool)) build {
	b := build{Version: ldVersion, GoVersion: runtime.Version()}
	bi, ok := info()
	if !ok {
		if b.Version == "" {
			b.Version = "devel"
		}
		return b
	}
	if bi.GoVersion != "" {
		b.GoVersion = bi.GoVersion
	}
	if b.Version == "" {
		b.Version = bi.Main.Version
	}
	if b.Version == "" || b.Version == "(devel)" {
		b.Version = "devel"
	}
	dirty := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if b.Revision != "" && dirty {
		b.Revision += "+dirty"
	}
	return b
}

// String is the one line `esfs --version` prints after "esfs version ":
// "v1.2.3 (revision 4f25f60...+dirty of 2026-11-25T22:43:49Z, go1.26.8)".
func (b build) String() string {
	var detail []string
	if b.Revision != "" {
		r := "revision " + b.Revision
		if b.Time != "" {
			r += " of " + b.Time
		}
		detail = append(detail, r)
	} else {
		detail = append(detail, "revision unknown")
	}
	detail = append(detail, b.GoVersion)
	return b.Version + " (" + strings.Join(detail, ", ") + ")"
}
