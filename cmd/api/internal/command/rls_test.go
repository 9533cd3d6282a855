package command_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/command"
)

// rlsExamples are the rule files README's examples load.
const rlsExamples = "../../../../services/rlsconfig/testdata/examples"

// TestRLSCheck: the check command passes good files and names the file and
// rule of a broken one.
func TestRLSCheck(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n"), 0o644)
	var out strings.Builder
	if err := command.RLSCheck(&out, []string{rlsExamples}); err != nil || !strings.Contains(out.String(), "11 domains, 21 rules") {
		t.Errorf("the examples: %v\n%s", err, out.String())
	}
	models := filepath.Join(t.TempDir(), "models.yaml")
	os.WriteFile(models, []byte(`domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 100}
    rate_limits: [{requests_per_unit: 1000, calendar: {unit: month, time_zone: Europe/Berlin}}]
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 5}
`), 0o644)
	out.Reset()
	if err := command.RLSCheck(&out, []string{models}); err != nil ||
		!strings.Contains(out.String(), "1 domains, 2 rules (limits: 1 sliding_window, 1 token_bucket, 1 calendar)") {
		t.Errorf("the models: %v\n%s", err, out.String())
	}
	out.Reset()
	err := command.RLSCheck(&out, []string{rlsExamples, bad})
	if err == nil || !strings.Contains(out.String(), `FAIL `+bad+`: d.a: rate_limit.unit: "fortnight" is not one of`) {
		t.Errorf("a broken file: %v\n%s", err, out.String())
	}
}
