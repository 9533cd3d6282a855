// Package charttest renders the Helm chart in deploy/helm/ratelimit for the
// binaries' tests, with the chartcheck tool (Helm's Go packages and
// k8s.io/api, pinned in tools/go.mod), and lists the environment variables
// a configuration struct reads, from its env tags.
package charttest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/envconfig"
)

// Container is what chartcheck reports of a rendered container.
type Container struct {
	Env            map[string]string `json:"env"`
	Ports          map[string]int32  `json:"ports"`
	Probes         map[string]string `json:"probes"`
	Mounts         map[string]string `json:"mounts"`
	NonRoot        bool              `json:"nonRoot"`
	ReadOnlyRoot   bool              `json:"readOnlyRoot"`
	NoCapabilities bool              `json:"noCapabilities"`
	PreStop        bool              `json:"preStop"`
}

// Render is one values file's render.
type Render struct {
	Values      string               `json:"values"`
	KubeVersion string               `json:"kubeVersion"` // the chart's minimum, which chartcheck renders on
	Kinds       map[string]int       `json:"kinds"`
	Containers  map[string]Container `json:"containers"`
	Grace       map[string]int64     `json:"terminationGracePeriodSeconds"`
	Error       string               `json:"error"`
}

// Root is the repository's root directory.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Renders renders the chart on its minimum Kubernetes version with its CI
// values: minimal, full, one without a region, and none at all (a bare
// install; these two must fail), keyed "minimal", "full", "no-region" and
// "bare".
func Renders(t *testing.T) map[string]Render {
	t.Helper()
	root := Root()
	ci := filepath.Join(root, "deploy", "helm", "ratelimit", "ci")
	cmd := exec.Command("go", "run", "./chartcheck", filepath.Join(root, "deploy", "helm", "ratelimit"),
		filepath.Join(ci, "minimal-values.yaml"), filepath.Join(ci, "full-values.yaml"), "!"+filepath.Join(ci, "no-region-values.yaml"),
		"!"+os.DevNull)
	cmd.Dir = filepath.Join(root, "tools")
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("chartcheck: %v\n%s", err, stderr)
	}
	var renders []Render
	if err := json.Unmarshal(out, &renders); err != nil {
		t.Fatalf("chartcheck's answer: %v", err)
	}
	byName := map[string]Render{}
	for _, r := range renders {
		name := strings.TrimSuffix(filepath.Base(r.Values), "-values.yaml")
		if r.Values == os.DevNull {
			name = "bare"
		}
		byName[name] = r
	}
	return byName
}

// EnvNames returns the variables a configuration struct reads (see
// envconfig.Settings).
func EnvNames(cfg any) map[string]bool {
	names := map[string]bool{}
	for _, s := range envconfig.Settings(cfg) {
		names[s.Name] = true
	}
	return names
}

// Environ returns a container's environment as NAME=value entries, each
// Secret's key replaced by the value secrets gives for its variable.
func Environ(c Container, secrets map[string]string) []string {
	var out []string
	for name, v := range c.Env {
		if strings.HasPrefix(v, "secret:") {
			v = secrets[name]
		}
		out = append(out, name+"="+v)
	}
	return out
}
