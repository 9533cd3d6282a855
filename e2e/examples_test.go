package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// TestClientExamples runs the examples under examples/ (Go on connect-go,
// TypeScript on @connectrpc/connect, Python on its standard library, each
// over Connect JSON) against a server with keys: with the key, two calls
// pass and the third is denied with its retry time; with a wrong one, each
// prints the API's message and fails.
func TestClientExamples(t *testing.T) {
	t.Parallel()
	const tokA = "tok_examples_0123456789"
	url := startServer(t, "UNKEY_REGION=examples", "UNKEY_AUTH_TOKENS="+tokA+"=ws_a").url
	root := charttest.Root()
	for _, ex := range []struct {
		name string
		cmd  []string
	}{
		{"go", []string{"go", "run", "./examples/go"}},
		{"typescript", []string{"node_modules/.bin/tsx", "examples/typescript/limit.ts"}},
		{"python", []string{"python3", "examples/python/limit.py"}},
	} {
		run := func(token string) (string, error) {
			args := append(ex.cmd[1:], "--url", url, "--token", token, "--identifier", "ex_"+ex.name+token[:4])
			cmd := exec.Command(ex.cmd[0], args...)
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		out, err := run(tokA)
		if err != nil || !strings.Contains(out, "request 1: passed, 1 left") || !strings.Contains(out, "request 2: passed, 0 left") ||
			!strings.Contains(out, "request 3: denied, retry in ") {
			t.Errorf("%s example: %v\n%s", ex.name, err, out)
		}
		out, err = run("wrong_token_0123456789")
		if err == nil || !strings.Contains(out, "unknown bearer token") {
			t.Errorf("%s example with a wrong key: %v\n%s", ex.name, err, out)
		}
	}
}
