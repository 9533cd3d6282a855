package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
)

// TestUnkeySDKs runs testdata/unkey_sdk.mjs, which calls the server through
// Unkey's own SDKs (@unkey/ratelimit and @unkey/api, pinned in package.json
// and installed by make test's npm ci) and checks every answer: limit until
// denied, cost, multiLimit, the Overrides class, a decision an override
// changes, and Unkey's error shapes.
func TestUnkeySDKs(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: make test needs Node.js for the SDK test")
	}
	if _, err := os.Stat(filepath.Join("..", "..", "node_modules", "@unkey", "ratelimit")); err != nil {
		t.Fatal("the Unkey SDKs are not installed: run make deps (npm ci)")
	}
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	cmd := exec.Command(node, "testdata/unkey_sdk.mjs")
	cmd.Env = append(os.Environ(), "BASE_URL="+ts.url, "ROOT_KEY="+tokA)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		t.Fatalf("the SDK script failed (exit %d)", exit.ExitCode())
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "all SDK checks passed") {
		t.Fatal("the SDK script did not finish")
	}
}

// TestUnkeyV2Shapes checks what the SDKs do not exercise: identifiers up to
// 512 characters, the 1 MiB body cap, malformed JSON, auth before the body.
func TestUnkeyV2Shapes(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	post := func(path, token, body string) (int, string) {
		t.Helper()
		status, raw := ts.post(t, path, token, strings.NewReader(body))
		return status, string(raw)
	}
	long := strings.Repeat("é", 512)
	body := `{"namespace":"n","identifier":"` + long + `","limit":1,"duration":60000}`
	if code, out := post("/v2/ratelimit.limit", tokA, body); code != 200 || !strings.Contains(out, `"success":true`) {
		t.Fatalf("a 512-character identifier: %d %s", code, out)
	}
	if code, out := post("/v2/ratelimit.limit", tokA, body); code != 200 || !strings.Contains(out, `"success":false`) {
		t.Fatalf("the same 512-character identifier again: %d %s, want it counted", code, out)
	}
	other := `{"namespace":"n","identifier":"` + long[:len(long)-2] + `x","limit":1,"duration":60000}`
	if code, out := post("/v2/ratelimit.limit", tokA, other); code != 200 || !strings.Contains(out, `"success":true`) {
		t.Fatalf("another long identifier: %d %s, want its own counter", code, out)
	}
	tooLong := `{"namespace":"n","identifier":"` + long + `x","limit":1,"duration":60000}`
	if code, out := post("/v2/ratelimit.limit", tokA, tooLong); code != 400 || !strings.Contains(out, `"location":"body.identifier"`) {
		t.Fatalf("513 characters: %d %s, want 400 naming body.identifier", code, out)
	}
	if code, out := post("/v2/ratelimit.limit", tokA, `{"namespace":`); code != 400 || !strings.Contains(out, `"type":"https://unkey.com/docs/errors/unkey/application/invalid_input"`) {
		t.Fatalf("malformed JSON: %d %s", code, out)
	}
	if code, out := post("/v2/ratelimit.limit", "", `{"namespace":`); code != 401 || !strings.Contains(out, `"requestId":"req_`) {
		t.Fatalf("no token: %d %s, want 401 before the body is decoded", code, out)
	}
	big := `{"namespace":"n","identifier":"` + strings.Repeat("x", transport.MaxRequestBytes) + `"}`
	if code, out := post("/v2/ratelimit.limit", tokA, big); code != 400 || !strings.Contains(out, "must be at most 1048576 bytes") {
		t.Fatalf("a body over 1 MiB: %d %.200s", code, out)
	}
	if code, out := post("/v2/ratelimit.multiLimit", tokA, `[]`); code != 400 || !strings.Contains(out, "must hold 1 to 100 limits") {
		t.Fatalf("an empty multiLimit: %d %s", code, out)
	}
	bad := `[{"namespace":"n","identifier":"a","limit":1,"duration":60000},{"namespace":"n","identifier":"b","limit":1,"duration":60000,"cost":-1}]`
	if code, out := post("/v2/ratelimit.multiLimit", tokA, bad); code != 400 || !strings.Contains(out, `"location":"body[1].cost"`) {
		t.Fatalf("a bad entry of multiLimit: %d %s, want 400 naming body[1].cost", code, out)
	}
}
