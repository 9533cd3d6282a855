// Package version is what the commands say of their build with --version:
// the release, the commit and when it was made. The Makefile's builds
// (make binaries, make image) set them at link time:
//
//	go build -ldflags "-X github.com/unkeyed/ratelimit/internal/version.version=0.1.0
//	  -X github.com/unkeyed/ratelimit/internal/version.commit=2c9f358
//	  -X github.com/unkeyed/ratelimit/internal/version.built=1795317000"
//
// A build without them (go build, go run) falls back to what Go recorded
// of the build: the module's version, and the commit and its time where
// Go stamped them (-buildvcs, on by default in a git checkout; off where
// GOFLAGS=-buildvcs=false); else dev and unknown.
package version

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"time"
)

// Set with -ldflags -X; empty when the build did not set them.
var (
	// version is the release, such as 0.1.0.
	version string
	// commit is the commit built, such as 2c9f358.
	commit string
	// built is when, in seconds since the Unix epoch (SOURCE_DATE_EPOCH:
	// the commit's time, so that a build is reproducible).
	built string
)

// build is what a binary knows of its build.
type build struct {
	// version is the release: set at link time, else the module's
	// version as Go recorded it, else "dev".
	version string
	// commit is the commit built, abbreviated, with "-dirty" when the
	// tree had changes Go saw: set at link time, else Go's vcs.revision,
	// else "unknown".
	commit string
	// built is when: set at link time, else the commit's time as Go
	// recorded it (vcs.time); zero if neither.
	built time.Time
}

// String returns the line --version prints for program, such as
// "api 0.1.0 (commit 2c9f358, built 2026-01-31T12:00:00Z)".
func String(program string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		info = nil
	}
	return get(version, commit, built, info).line(program)
}

// line returns the line --version prints for program.
func (b build) line(program string) string {
	s := fmt.Sprintf("%s %s (commit %s", program, b.version, b.commit)
	if !b.built.IsZero() {
		s += ", built " + b.built.UTC().Format(time.RFC3339)
	}
	return s + ")"
}

// get returns the build of the values set at link time, falling back to
// what info (nil if none) recorded.
func get(version, commit, built string, info *debug.BuildInfo) build {
	b := build{version: version, commit: commit}
	if sec, err := strconv.ParseInt(built, 10, 64); err == nil && sec > 0 {
		b.built = time.Unix(sec, 0).UTC()
	}
	var revision, modified, vcsTime string
	if info != nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value
			case "vcs.time":
				vcsTime = s.Value
			}
		}
		if b.version == "" && info.Main.Version != "" && info.Main.Version != "(devel)" {
			b.version = info.Main.Version
		}
	}
	if b.version == "" {
		b.version = "dev"
	}
	if b.commit == "" && revision != "" {
		b.commit = revision[:min(len(revision), 7)]
		if modified == "true" {
			b.commit += "-dirty"
		}
	}
	if b.commit == "" {
		b.commit = "unknown"
	}
	if t, err := time.Parse(time.RFC3339, vcsTime); err == nil && b.built.IsZero() {
		b.built = t.UTC()
	}
	return b
}
