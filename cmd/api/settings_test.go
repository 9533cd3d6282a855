package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
	"github.com/unkeyed/ratelimit/internal/testkit/golden"
)

// TestSettingsReference: docs/settings.md lists the API's settings as
// its --help does, from the tags it parses its environment with, and the
// OpenTelemetry SDK's variables it reads; UPDATE_DOCS=1 (make docs)
// rewrites it.
func TestSettingsReference(t *testing.T) {
	var b strings.Builder
	envconfig.Markdown(&b, envconfig.Settings(daemon.Config{}))
	sec := telemetry.Settings(daemon.TracingService)
	b.WriteString("\n" + sec.Title + "\n\n")
	envconfig.Markdown(&b, sec.Settings)
	golden.Region(t, filepath.Join(charttest.Root(), "docs", "settings.md"), "api", b.String())
}
