package main

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/envconfig"
)

// TestHelpListsEverySetting: worker --help names every variable the
// configuration reads, with its default and what it is, and every command.
func TestHelpListsEverySetting(t *testing.T) {
	if n := len(envconfig.Settings(config{})); n < 8 {
		t.Fatalf("%d settings: the walk missed fields", n)
	}
	if err := envconfig.CheckUsage(usage, config{}, "worker keygen"); err != nil {
		t.Error(err)
	}
}
