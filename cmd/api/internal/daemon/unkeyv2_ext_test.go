package daemon_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// TestUnkeySDKs runs testdata/unkey_sdk.mjs, which calls the server through
// Unkey's own SDKs (@unkey/ratelimit and @unkey/api, pinned in package.json
// and installed by make test's npm ci) and checks every answer: limit until
// denied, cost, multiLimit, the Overrides class, a decision an override
// changes, and Unkey's error shapes. Then it runs docs/unkey.md's TypeScript
// as written there (see below).
func TestUnkeySDKs(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: make test needs Node.js for the SDK test")
	}
	if _, err := os.Stat(filepath.Join("..", "..", "..", "..", "node_modules", "@unkey", "ratelimit")); err != nil {
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

	// The TypeScript of docs/unkey.md, as it is but
	// for the server's address, run as a user would paste it into a .ts
	// file in a CommonJS package (this repository's): with tsx, as npx tsx
	// runs it. The file is inside the repository, where Node finds the
	// SDK in node_modules.
	readme, err := os.ReadFile(filepath.Join(charttest.Root(), "docs", "unkey.md"))
	if err != nil {
		t.Fatal(err)
	}
	snippet := between(t, string(readme), "```ts\n", "```\n")
	if strings.Count(snippet, `"http://127.0.0.1:7070"`) != 2 {
		t.Fatalf("docs/unkey.md's TypeScript does not call http://127.0.0.1:7070 twice:\n%s", snippet)
	}
	dir, err := os.MkdirTemp(charttest.Root(), ".readme-snippet-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	file := filepath.Join(dir, "limit.ts")
	if err := os.WriteFile(file, []byte(strings.ReplaceAll(snippet, "http://127.0.0.1:7070", ts.url)), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(filepath.Join(charttest.Root(), "node_modules", ".bin", "tsx"), file)
	cmd.Env = append(os.Environ(), "RATELIMIT_TOKEN="+tokA)
	out, err = cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "success: true, remaining: 9") {
		t.Fatalf("docs/unkey.md's TypeScript: %v\n%s", err, out)
	}
	status, got := ts.call(t, "GetOverride", tokA, `{"namespace":"sms.sign_up","identifier":"partner_*"}`)
	if override, _ := got["override"].(map[string]any); status != 200 || override["limit"] != "1000" {
		t.Fatalf("the override docs/unkey.md's TypeScript sets: %d %v", status, got)
	}
}

// TestUnkeySDKWithKeyOverTLS runs testdata/unkey_keys.mjs: @unkey/api over
// https (the server's certificate signed by a test CA that Node is told to
// trust) with a key of UNKEY_AUTH_KEYS_FILE that may limit and read
// overrides in one namespace: it limits, and every call beyond its
// permissions is refused 403 in Unkey's shape, naming the permission.
func TestUnkeySDKWithKeyOverTLS(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: make test needs Node.js for the SDK test")
	}
	ca := testserver.NewCA(t)
	dir := t.TempDir()
	certFile, keyFile := ca.Issue(t, dir, 1, false)
	caFile := filepath.Join(dir, "ca.pem")
	os.WriteFile(caFile, ca.PEM, 0o644)
	_, key, out := cliKey(t, nil, "generate", "--workspace", "ws_sdk", "--name", "app",
		"--permissions", "ratelimit.sdk.limit,ratelimit.sdk.read_override")
	keysFile := filepath.Join(dir, "keys.json")
	os.WriteFile(keysFile, []byte(`{"keys":[`+strings.SplitN(out, "\n", 2)[0]+`]}`), 0o600)
	ts := startServer(t, "UNKEY_AUTH_KEYS_FILE="+keysFile, "UNKEY_TLS_CERT_FILE="+certFile, "UNKEY_TLS_KEY_FILE="+keyFile)
	cmd := exec.Command(node, "testdata/unkey_keys.mjs")
	cmd.Env = append(os.Environ(), "BASE_URL="+strings.Replace(ts.url, "http://", "https://", 1), "LIMIT_KEY="+key,
		"NODE_EXTRA_CA_CERTS="+caFile)
	got, err := cmd.CombinedOutput()
	t.Logf("%s", got)
	if err != nil {
		t.Fatalf("the SDK script failed: %v", err)
	}
	if !strings.Contains(string(got), "all key checks passed") {
		t.Fatal("the SDK script did not finish")
	}
}

// between returns the text of s after the first start and before the next
// end, or fails t.
func between(t *testing.T, s, start, end string) string {
	t.Helper()
	_, after, ok := strings.Cut(s, start)
	if !ok {
		t.Fatalf("the text has no %q", start)
	}
	text, _, ok := strings.Cut(after, end)
	if !ok {
		t.Fatalf("the text has no %q after %q", end, start)
	}
	return text
}
