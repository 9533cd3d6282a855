package main

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/envconfig"
)

// TestHelpListsEverySetting: api --help names every variable the
// configuration reads, with its default and what it is, and every command.
func TestHelpListsEverySetting(t *testing.T) {
	if n := len(envconfig.Settings(config{})); n < 30 {
		t.Fatalf("%d settings: the walk missed fields", n)
	}
	if err := envconfig.CheckUsage(usage, config{}, "api migrate", "api rls check", "api keys create", "api keys generate"); err != nil {
		t.Error(err)
	}
}
