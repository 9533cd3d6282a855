package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/charttest"
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
	call := between(t, readme, "curl -s localhost:7070/json -H 'content-type: application/json' \\\n  -d '", "'\n")
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
		status, body := ts.post(t, "/json", "", strings.NewReader(call))
		if status != want.status || !strings.HasPrefix(string(body), want.prefix) {
			t.Fatalf("call %d: %d %s, want %d and %s…", i+1, status, body, want.status, want.prefix)
		}
	}
}
