package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/envconfig"
)

// TestHelpListsEverySetting: api --help names every variable the
// configuration reads, with its default, and says what each is.
func TestHelpListsEverySetting(t *testing.T) {
	var b bytes.Buffer
	envconfig.Usage(&b, usage, config{})
	settings := envconfig.Settings(config{})
	if len(settings) < 30 {
		t.Fatalf("%d settings: the walk missed fields", len(settings))
	}
	for _, s := range settings {
		if s.Help == "" {
			t.Errorf("%s has no help tag", s.Name)
		}
		line := ""
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), s.Name+" ") {
				line = l
			}
		}
		if line == "" || s.Default != "" && !strings.Contains(line, " "+s.Default+" ") {
			t.Errorf("--help's line for %s: %q (default %q)", s.Name, line, s.Default)
		}
	}
	for _, cmd := range []string{"api migrate", "api rls check", "api keys create", "api keys generate"} {
		if !strings.Contains(b.String(), cmd) {
			t.Errorf("--help does not name %q", cmd)
		}
	}
}
