package daemon_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// between returns the text of s after the first start and before the next
// end, or fails t.
func between(t *testing.T, s, start, end string) string {
	t.Helper()
	_, after, ok := strings.Cut(s, start)
	if !ok {
		t.Fatalf("README.md has no %q", start)
	}
	text, _, ok := strings.Cut(after, end)
	if !ok {
		t.Fatalf("README.md has no %q after %q", end, start)
	}
	return text
}

// TestReadmeEnvoyExample runs the README's try-it of Envoy's rate limit
// service as written: its rules file, its /json call, the answer it shows,
// and the third call refused.
func TestReadmeEnvoyExample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(charttest.Root(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	rules := between(t, readme, "cat > /tmp/rls/edge.yaml <<'EOF'\n", "\nEOF\n")
	call := between(t, readme, "curl -s localhost:7080/json -H 'content-type: application/json' \\\n  -d '", "'\n")
	answer := between(t, readme, call+"'\n# ", "…")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "edge.yaml"), []byte(rules+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "UNKEY_RLS_CONFIG="+dir)
	for i, want := range []struct {
		status int
		prefix string
	}{{200, answer}, {200, `{"overallCode":"OK"`}, {429, `{"overallCode":"OVER_LIMIT"`}} {
		status, raw := ts.post(t, "/json", "", strings.NewReader(call))
		// protojson varies its white space from build to build, on
		// purpose: compare the compact form, as the README writes it.
		var body bytes.Buffer
		if err := json.Compact(&body, raw); err != nil {
			t.Fatalf("call %d: %q: %v", i+1, raw, err)
		}
		if status != want.status || !strings.HasPrefix(body.String(), want.prefix) {
			t.Fatalf("call %d: %d %s, want %d and %s…", i+1, status, body.String(), want.status, want.prefix)
		}
	}
}
