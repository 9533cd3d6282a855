package composefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesWhatDockerRefuses: a file with a misspelt key or a port
// that is not one fails to load, as Docker Compose would refuse it.
func TestLoadRefusesWhatDockerRefuses(t *testing.T) {
	for name, body := range map[string]string{
		"misspelt key":   "services:\n  a:\n    imagee: redis\n",
		"not a port":     "services:\n  a:\n    image: redis\n    ports: [\"127.0.0.1:x:6379\"]\n",
		"no image":       "services:\n  a:\n    command: [\"x\"]\n",
		"unknown volume": "services:\n  a:\n    image: redis\n    volumes: [\"data:/data\"]\n",
	} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "compose.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadDir(dir); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
}

// TestLoadTheRepositorysFile reads compose.yaml in the short syntax the
// checks compare.
func TestLoadTheRepositorysFile(t *testing.T) {
	f, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	r := f.Services["restate"]
	if len(r.Ports) == 0 || !strings.HasPrefix(r.Ports[0], "127.0.0.1:") || r.DependsOn["keygen"] != "service_completed_successfully" {
		t.Errorf("restate: ports %v, depends on %v", r.Ports, r.DependsOn)
	}
	if len(r.Volumes) == 0 || r.Volumes[0] != "identity:/identity:ro" {
		t.Errorf("restate: volumes %v", r.Volumes)
	}
}
