// Package charttest renders the Helm chart in deploy/helm/ratelimit for the
// binaries' tests, with the chartcheck tool (Helm's Go packages and
// k8s.io/api, pinned in tools/go.mod), lists the environment variables
// a configuration struct reads, from its env tags, and builds a binary as
// `make binaries` builds the images' (with the version of the chart's
// appVersion), for the tests of the images and of --version.
package charttest

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
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

// BuildEpoch is the SOURCE_DATE_EPOCH that MakeBinary builds with, and
// BuildTime the time --version then says the binary was built.
const (
	BuildEpoch = "1769860800"
	BuildTime  = "2026-01-31T12:00:00Z"
)

// MakeBinary builds the command name (api or worker) into dir with `make
// binaries`, at BuildEpoch, and returns its path.
func MakeBinary(t testing.TB, name, dir string) string {
	t.Helper()
	cmd := exec.Command("make", "--no-print-directory", "binaries", "BINARIES="+name, "BIN_DIR="+dir, "SOURCE_DATE_EPOCH="+BuildEpoch)
	cmd.Dir = Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make binaries: %v\n%s", err, out)
	}
	return filepath.Join(dir, name)
}

// AppVersion returns the chart's appVersion: the one place the project's
// version is set, which --version, the images and make release read.
func AppVersion(t testing.TB) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(Root(), "deploy", "helm", "ratelimit", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "appVersion:"); ok {
			if v = strings.Trim(strings.TrimSpace(v), `"`); v != "" {
				return v
			}
		}
	}
	t.Fatal("the chart has no appVersion")
	return ""
}

// WantVersion returns the line `name --version` prints for a build of
// MakeBinary: the chart's appVersion, git's short hash of HEAD (-dirty
// with changes to tracked files) and BuildTime.
func WantVersion(t testing.TB, name string) string {
	t.Helper()
	root := Root()
	appVersion := AppVersion(t)
	head, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	commit := strings.TrimSpace(string(head))
	if exec.Command("git", "-C", root, "diff", "--quiet", "HEAD").Run() != nil {
		commit += "-dirty"
	}
	return name + " " + appVersion + " (commit " + commit + ", built " + BuildTime + ")"
}
