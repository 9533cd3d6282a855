package version

import (
	"runtime/debug"
	"testing"
)

// TestLine: the values set at link time win; without them, what Go
// recorded of the build (a module version, vcs.revision, vcs.modified,
// vcs.time); without either, dev and unknown.
func TestLine(t *testing.T) {
	vcs := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "2c9f358aa2f0e4d3c1b0a9f8e7d6c5b4a3f2e1d0"},
		{Key: "vcs.time", Value: "2026-01-31T12:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		name                   string
		version, commit, built string
		info                   *debug.BuildInfo
		want                   string
	}{
		{"linked", "0.1.0", "2c9f358", "1769860800", vcs, "api 0.1.0 (commit 2c9f358, built 2026-01-31T12:00:00Z)"},
		{"go's vcs stamp", "", "", "", vcs, "api dev (commit 2c9f358-dirty, built 2026-01-31T12:00:00Z)"},
		{"a module version", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.2.0"}}, "api v0.2.0 (commit unknown)"},
		{"nothing", "", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "api dev (commit unknown)"},
		{"no build info", "", "", "", nil, "api dev (commit unknown)"},
	} {
		if got := get(tc.version, tc.commit, tc.built, tc.info).line("api"); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
