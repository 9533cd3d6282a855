package main

import (
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/envconfig"
)

// TestHelpListsEverySetting: worker --help names every variable the
// configuration reads, with the default the program uses and what it is,
// every command, and says that it reads no OTEL_* variable (the worker
// sets up no tracing).
func TestHelpListsEverySetting(t *testing.T) {
	if n := len(envconfig.Settings(config{})); n < 8 {
		t.Fatalf("%d settings: the walk missed fields", n)
	}
	if err := envconfig.CheckUsage(usage, config{}, nil, "worker keygen", "worker config check", "worker --version"); err != nil {
		t.Error(err)
	}
	if !strings.Contains(usage, "reads no OTEL_* variable") {
		t.Error("worker --help does not say that the worker reads no OTEL_* variable")
	}
}
