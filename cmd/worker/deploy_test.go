package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestDeployedMetricsAreServed: every worker metric (unkey_worker_*) the
// alerting rules and the Grafana dashboard in deploy/ name is one the
// worker serves on /metrics.
func TestDeployedMetricsAreServed(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "prometheus", "*.rules.yaml"))
	dashboards, _ := filepath.Glob(filepath.Join("..", "..", "deploy", "grafana", "*.json"))
	files = append(files, dashboards...)
	families, err := newScheduleHealth().reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, f := range families {
		served[f.GetName()] = true
	}
	named := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range regexp.MustCompile(`unkey_worker_[a-z0-9_]+`).FindAllString(string(data), -1) {
			named++
			if !served[name] {
				t.Errorf("%s names %s, which the worker does not serve", f, name)
			}
		}
	}
	if named == 0 {
		t.Fatal("deploy/ names no worker metric: the cleanup alert is gone")
	}
}
