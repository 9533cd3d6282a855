package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/telemetry"
)

// TestHelpListsEverySetting: api --help names every variable the
// configuration reads, with its default and what it is, and every command.
// Each default shown is the value the program uses unset: a boolean shows
// false or true, never (empty). The OTEL_* variables of tracing are listed
// with the SDK's defaults.
func TestHelpListsEverySetting(t *testing.T) {
	if n := len(envconfig.Settings(daemon.Config{})); n < 30 {
		t.Fatalf("%d settings: the walk missed fields", n)
	}
	if err := envconfig.CheckUsage(usage, daemon.Config{}, []envconfig.Section{telemetry.Settings(daemon.TracingService)},
		"api migrate", "api rls check", "api keys create", "api keys generate", "api config check", "api --version"); err != nil {
		t.Error(err)
	}
	var b strings.Builder
	help(&b)
	text := b.String()
	for _, want := range []string{
		`UNKEY_RLS_SHADOW_MODE +false `,
		`UNKEY_RLS_COUNT_OVER_LIMIT +true `,
		`UNKEY_RLS_RESPONSE_DYNAMIC_METADATA +false `,
		`UNKEY_RLS_RESPONSE_HEADERS +false `,
		`UNKEY_BATCH_ENTRIES_IN_FLIGHT_PER_WORKSPACE +0 `,
		`OTEL_TRACES_EXPORTER +\(empty\) +otlp, console`,
		`OTEL_EXPORTER_OTLP_ENDPOINT +https://localhost:4318 `,
		`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT `,
		`OTEL_EXPORTER_OTLP_PROTOCOL +http/protobuf `,
		`OTEL_TRACES_SAMPLER +parentbased_always_on `,
		`OTEL_BSP_SCHEDULE_DELAY +5000 `,
		`OTEL_SERVICE_NAME +unkey-ratelimit-api `,
		`OTEL_RESOURCE_ATTRIBUTES `,
	} {
		if !regexp.MustCompile(`(?m)^  ` + want).MatchString(text) {
			t.Errorf("--help has no line matching %q:\n%s", want, text)
		}
	}
	for _, line := range strings.Split(text, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == "(empty)" {
			for _, s := range envconfig.Settings(daemon.Config{}) {
				if s.Name == f[0] && s.Default != "" {
					t.Errorf("--help shows %s as (empty); the program uses %q", s.Name, s.Default)
				}
			}
		}
	}
}
