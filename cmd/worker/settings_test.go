package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
	"github.com/unkeyed/ratelimit/internal/testkit/golden"
)

// TestSettingsReference: docs/settings.md lists the worker's settings as
// its --help does, from the tags it parses its environment with;
// UPDATE_DOCS=1 (make docs) rewrites it.
func TestSettingsReference(t *testing.T) {
	var b strings.Builder
	envconfig.Markdown(&b, envconfig.Settings(config{}))
	golden.Region(t, filepath.Join(charttest.Root(), "docs", "settings.md"), "worker", b.String())
}
