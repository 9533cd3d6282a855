package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/charttest"
)

// TestVersion: the worker built as `make binaries` builds it says its
// version (the chart's appVersion), its commit and when it was built.
func TestVersion(t *testing.T) {
	bin := charttest.MakeBinary(t, "worker", t.TempDir())
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if want := charttest.WantVersion(t, "worker"); err != nil || strings.TrimSpace(string(out)) != want {
		t.Fatalf("worker --version: %v %q, want %q", err, out, want)
	}
}
