package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// TestHelp: each binary's --help names every command it takes and shows
// settings with their defaults (a boolean as false or true, never (empty);
// that every default shown is the one used, each program's config test
// holds). The API lists the OTEL_* variables of tracing with the SDK's
// defaults; the worker says it reads none.
func TestHelp(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		bin      string
		commands []string
		lines    []string
	}{
		{"api", []string{"api migrate", "api rls check", "api keys create", "api keys generate", "api config check", "api --version"},
			[]string{
				`UNKEY_RLS_SHADOW_MODE +false `,
				`UNKEY_RLS_COUNT_OVER_LIMIT +true `,
				`UNKEY_RLS_RESPONSE_DYNAMIC_METADATA +false `,
				`UNKEY_RLS_RESPONSE_HEADERS +false `,
				`UNKEY_BATCH_ENTRIES_IN_FLIGHT_PER_WORKSPACE +0 `,
				`UNKEY_DECODE_BUDGET_BYTES +67108864 `,
				`OTEL_TRACES_EXPORTER +\(empty\) +otlp, console`,
				`OTEL_EXPORTER_OTLP_ENDPOINT +https://localhost:4318 `,
				`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT `,
				`OTEL_EXPORTER_OTLP_PROTOCOL +http/protobuf `,
				`OTEL_TRACES_SAMPLER +parentbased_always_on `,
				`OTEL_BSP_SCHEDULE_DELAY +5000 `,
				`OTEL_SERVICE_NAME +unkey-ratelimit-api `,
				`OTEL_RESOURCE_ATTRIBUTES `,
			}},
		{"worker", []string{"worker keygen", "worker config check", "worker --version"},
			[]string{`UNKEY_MYSQL_DSN +\(required\) `, `UNKEY_WORKER_ADDR +127.0.0.1:9080 `}},
	} {
		out, err := exec.Command(filepath.Join(bin, c.bin), "--help").Output()
		if err != nil {
			t.Fatalf("%s --help: %v", c.bin, err)
		}
		text := string(out)
		for _, cmd := range c.commands {
			if !strings.Contains(text, cmd) {
				t.Errorf("%s --help does not name %q", c.bin, cmd)
			}
		}
		for _, want := range c.lines {
			if !regexp.MustCompile(`(?m)^  ` + want).MatchString(text) {
				t.Errorf("%s --help has no line matching %q:\n%s", c.bin, want, text)
			}
		}
	}
	out, _ := exec.Command(filepath.Join(bin, "worker"), "--help").Output()
	if !strings.Contains(string(out), "reads no OTEL_* variable") || strings.Contains(string(out), "\n  OTEL_") {
		t.Error("worker --help does not say that the worker reads no OTEL_* variable")
	}
}

// TestVersion: the binaries built as `make binaries` builds them say their
// version (the chart's appVersion), their commit and when they were built.
func TestVersion(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, name := range []string{"api", "worker"} {
		b := charttest.MakeBinary(t, name, dir)
		out, err := exec.Command(b, "--version").CombinedOutput()
		if want := charttest.WantVersion(t, name); err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s --version: %v %q, want %q", name, err, out, want)
		}
	}
}
