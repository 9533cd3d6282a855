package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
