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
	if err := command.RLSCheck(&out, nil, []string{rlsExamples}); err != nil || !strings.Contains(out.String(), "11 domains, 21 rules") {
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
	if err := command.RLSCheck(&out, nil, []string{models}); err != nil ||
		!strings.Contains(out.String(), "1 domains, 2 rules (limits: 1 sliding_window, 1 token_bucket, 1 calendar)") {
		t.Errorf("the models: %v\n%s", err, out.String())
	}
	out.Reset()
	err := command.RLSCheck(&out, nil, []string{rlsExamples, bad})
	if err == nil || !strings.Contains(out.String(), `FAIL `+bad+`: d.a: rate_limit.unit: "fortnight" is not one of`) {
		t.Errorf("a broken file: %v\n%s", err, out.String())
	}
}

// TestRLSCheckReadsTheRuleSettings: the check compiles as the service
// would with the environment's rule settings: two days is a length of 48
// hours, refused as a calendar's unit with UNKEY_RLS_CALENDAR_UNITS; a
// tree deeper than UNKEY_RLS_MAX_DEPTH is refused; a setting that is not
// one fails the check before any file is read.
func TestRLSCheckReadsTheRuleSettings(t *testing.T) {
	two := filepath.Join(t.TempDir(), "two.yaml")
	os.WriteFile(two, []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, unit_multiplier: 2, requests_per_unit: 5}\n"), 0o644)
	var out strings.Builder
	if err := command.RLSCheck(&out, nil, []string{two}); err != nil {
		t.Errorf("two days as a length: %v\n%s", err, out.String())
	}
	out.Reset()
	err := command.RLSCheck(&out, []string{"UNKEY_RLS_CALENDAR_UNITS=true"}, []string{two})
	if err == nil || !strings.Contains(out.String(), "FAIL "+two+": d.a: ") || !strings.Contains(out.String(), "unit_multiplier") {
		t.Errorf("two days with calendar units: %v\n%s", err, out.String())
	}
	nested := filepath.Join(t.TempDir(), "nested.yaml")
	os.WriteFile(nested, []byte("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            rate_limit: {unit: minute, requests_per_unit: 5}\n"), 0o644)
	out.Reset()
	if err := command.RLSCheck(&out, nil, []string{nested}); err != nil {
		t.Errorf("three deep with the default bounds: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := command.RLSCheck(&out, []string{"UNKEY_RLS_MAX_DEPTH=2"}, []string{nested}); err == nil || !strings.Contains(out.String(), "FAIL "+nested) {
		t.Errorf("three deep with UNKEY_RLS_MAX_DEPTH=2: %v\n%s", err, out.String())
	}
	out.Reset()
	if err := command.RLSCheck(&out, []string{"UNKEY_RLS_MAX_DEPHT=2"}, []string{nested}); err == nil || !strings.Contains(err.Error(), "UNKEY_RLS_MAX_DEPHT") || out.Len() != 0 {
		t.Errorf("a misspelt setting: %v\n%s", err, out.String())
	}
}
