package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// chartDir is the chart under deploy/helm, from this package's directory.
const chartDir = "../../deploy/helm/ratelimit"

// ciValues is one of the chart's CI values files.
func ciValues(name string) string { return filepath.Join(chartDir, "ci", name+"-values.yaml") }

// copyChart copies the chart into a temporary directory, applying edit
// (file name relative to the chart -> new content; "" deletes it).
func copyChart(t *testing.T, edit map[string]string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "ratelimit")
	err := filepath.WalkDir(chartDir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(chartDir, path)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), raw, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, content := range edit {
		path := filepath.Join(dst, name)
		if content == "" {
			err = os.Remove(path)
		} else {
			err = os.WriteFile(path, []byte(content), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// read returns one of the chart's files.
func read(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(chartDir, name))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), "\n") {
		t.Fatalf("%s: %q", name, raw)
	}
	return string(raw)
}

// withKubeVersion is the chart's Chart.yaml with another kubeVersion
// ("": none).
func withKubeVersion(t *testing.T, constraint string) string {
	t.Helper()
	var out []string
	for _, line := range strings.Split(read(t, "Chart.yaml"), "\n") {
		if strings.HasPrefix(line, "kubeVersion:") {
			if constraint == "" {
				continue
			}
			line = "kubeVersion: " + constraint
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// TestLintFailsOnAFinding lints the chart as make check-chart does: clean
// with its CI values, and failing on a warning (strict) and on an error in
// a broken copy.
func TestLintFailsOnAFinding(t *testing.T) {
	files := []string{ciValues("minimal"), ciValues("full")}
	if err := lint(io.Discard, chartDir, files); err != nil {
		t.Fatalf("the chart: %v", err)
	}
	for name, edit := range map[string]map[string]string{
		// A removed API version: a warning, which --strict fails on.
		"a deprecated API": {"templates/old.yaml": "apiVersion: policy/v1beta1\nkind: PodDisruptionBudget\nmetadata: {name: old}\nspec: {maxUnavailable: 1}\n"},
		// A template that does not parse: an error.
		"a broken template": {"templates/broken.yaml": "{{ if }}\n"},
		// A value the schema refuses: an error.
		"a value the schema refuses": {"values.yaml": strings.Replace(read(t, "values.yaml"), "port: 7070", "port: 0", 1)},
	} {
		var out strings.Builder
		err := lint(&out, copyChart(t, edit), files)
		if err == nil {
			t.Errorf("%s: lint passed:\n%s", name, out.String())
			continue
		}
		if !strings.Contains(out.String(), "[WARNING]") && !strings.Contains(out.String(), "[ERROR]") {
			t.Errorf("%s: lint failed (%v) without saying why:\n%s", name, err, out.String())
		}
	}
}

// TestRenderAtTheMinimumVersion renders the chart on the Kubernetes its
// Chart.yaml names as the oldest, and checks that a chart that states an
// older minimum than its fields need is refused, as is one that states
// none or one Helm does not enforce.
func TestRenderAtTheMinimumVersion(t *testing.T) {
	rs, err := renderAll(chartDir, []string{ciValues("minimal"), ciValues("full"), "!" + ciValues("no-region"), "!/dev/null"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.KubeVersion != "v1.30.0" {
			t.Errorf("%s: rendered on %s, want the chart's minimum, v1.30.0", r.Values, r.KubeVersion)
		}
	}
	for _, r := range rs[2:] {
		if !strings.Contains(r.Error, "region is required") {
			t.Errorf("%s: %q, want the region named first", r.Values, r.Error)
		}
	}
	if !rs[1].Workers["rl-ratelimit-api/api"].PreStop {
		t.Errorf("full values: no preStop in %v", rs[1].Workers)
	}

	// The lifecycle sleep action is not served by 1.29.
	older := copyChart(t, map[string]string{"Chart.yaml": withKubeVersion(t, `">=1.29.0-0"`)})
	if _, err := renderAll(older, []string{ciValues("minimal")}); err == nil || !strings.Contains(err.Error(), "lifecycle sleep action") {
		t.Errorf("a chart stating 1.29 with the sleep action: %v, want it refused naming the sleep action", err)
	}
	// Without a preStop it renders there.
	chrt, err := loader.Load(older)
	if err != nil {
		t.Fatal(err)
	}
	minimum, err := minimumVersion(chrt)
	if err != nil || minimum.Version != "v1.29.0" {
		t.Fatalf("the copy's minimum: %v, %v", minimum, err)
	}
	r, err := render(chrt, map[string]any{"region": "x", "api": map[string]any{"preStopSeconds": 0}}, "rl", "ratelimit", minimum, nil)
	if err != nil || r.Workers["rl-ratelimit-api/api"].PreStop {
		t.Errorf("preStopSeconds 0 on 1.29: %v, preStop %v; want a render without a preStop", err, r.Workers["rl-ratelimit-api/api"].PreStop)
	}

	// A minimum must be stated, and enforced by Helm.
	if _, err := renderAll(copyChart(t, map[string]string{"Chart.yaml": withKubeVersion(t, "")}), []string{ciValues("minimal")}); err == nil {
		t.Error("a chart without kubeVersion rendered")
	}
	if _, err := renderAll(copyChart(t, map[string]string{"Chart.yaml": withKubeVersion(t, `">=1.30.0-0 || <1.2.0"`)}), []string{ciValues("minimal")}); err == nil {
		t.Error("a kubeVersion that is not a plain minimum was taken")
	}
}

// TestHelmCommand renders helm command lines as Helm would: helm template
// on Helm's default Kubernetes (v1.20.0) refuses the chart without
// --kube-version, a bare install is refused naming the region, the flags
// README uses are taken and others refused.
func TestHelmCommand(t *testing.T) {
	for _, c := range []struct {
		args    string
		wantErr string // "" for success
	}{
		{"template rl " + chartDir + " --set region=eu-west-1", "incompatible with Kubernetes v1.20.0"},
		{"template rl " + chartDir + " --kube-version 1.30 --set region=eu-west-1", ""},
		{"template " + chartDir + " --kube-version 1.30 -f " + ciValues("full"), ""},
		{"install rl " + chartDir, "region is required"},
		{"install rl " + chartDir + " --set worker.enabled=true", "region is required"},
		{"install rl " + chartDir + " --set region=eu-west-1", ""},
		{"install rl " + chartDir + " --set region=eu-west-1 --set worker.enabled=true", "worker.restate.adminURL is required"},
		{"install rl-eu " + chartDir + " -n ratelimit --create-namespace -f " + ciValues("full") + " --set region=eu-west-2", ""},
		{"install rl " + chartDir + " --set region=eu-west-1 --kube-version 1.30", "unknown flag: --kube-version"},
		{"install rl " + chartDir + " --set region=eu-west-1 --wait", "unknown flag: --wait"},
		{"upgrade rl " + chartDir, "want install or template"},
	} {
		r, err := helmCommand(strings.Fields(c.args))
		switch {
		case c.wantErr == "" && err != nil:
			t.Errorf("helm %s: %v", c.args, err)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("helm %s: %v, want an error with %q", c.args, err, c.wantErr)
		case c.wantErr == "" && r.Kinds["Deployment"] == 0:
			t.Errorf("helm %s: rendered %v, no Deployment", c.args, r.Kinds)
		}
	}
	r, err := helmCommand(strings.Fields("install rl-eu " + chartDir + " -n ratelimit --set region=eu-west-1 --set worker.enabled=true " +
		"--set mysql.dsn=u@tcp(m:3306)/r --set worker.restate.adminURL=http://r:9070 --set worker.restate.ingressURL=http://r:8080"))
	if err != nil {
		t.Fatal(err)
	}
	w := r.Workers["rl-eu-ratelimit-worker/worker"]
	if r.KubeVersion != "v1.30.0" || w.Env["UNKEY_WORKER_URL"] != "http://rl-eu-ratelimit-worker.ratelimit.svc:9080" || w.Env["UNKEY_RESTATE_ADMIN_URL"] != "http://r:9070" {
		t.Errorf("helm install with the worker: Kubernetes %s, worker %+v", r.KubeVersion, w)
	}
}
