// Command chartcheck checks the Helm chart offline with Helm's own Go
// packages (pinned in tools/go.mod), without a cluster and without the helm
// binary.
//
// Usage:
//
//	chartcheck CHART_DIR [!]VALUES_FILE...
//	    Render the chart with each values file (/dev/null: none, a bare
//	    release), as an install of release "rl" in namespace "ratelimit" on
//	    a cluster of the chart's minimum Kubernetes version (Chart.yaml's
//	    kubeVersion, ">=X.Y…"); check that Helm refuses a cluster one minor
//	    version older; and print a summary of each render as JSON for the
//	    binaries' tests. A file named "!file" must fail to render; its error
//	    is in the summary.
//	chartcheck lint CHART_DIR VALUES_FILE...
//	    `helm lint --strict` with each values file, at the chart's minimum
//	    Kubernetes version: a warning fails as an error does.
//	chartcheck helm install|template ARGS...
//	    Render as that helm command line would: `helm template` at its
//	    --kube-version or Helm's default (v1.20.0), `helm install` (with or
//	    without --dry-run) on a cluster of the chart's minimum version. It
//	    takes -f/--values, the --set flags, -n/--namespace, --create-namespace
//	    and --kube-version (template), and refuses any other flag. Prints the
//	    render's summary as JSON.
//
// Every render decodes each object it renders strictly into its k8s.io/api
// type (an unknown or misspelt field fails), and fails on a kind the
// render's Kubernetes version does not serve or a pod field that needs a
// newer one (the lifecycle sleep action needs 1.30).
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	helmlint "helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// Container is what the binaries' tests check of a container.
type Container struct {
	Name  string            `json:"name"`
	Env   map[string]string `json:"env"` // a Secret's key reads as "secret:NAME/KEY"
	Ports map[string]int32  `json:"ports"`
	// Probes are "readiness" and "liveness": "GET /path port" or "TCP port".
	Probes map[string]string `json:"probes"`
	// Mounts are path -> volume source ("secret:NAME", "configMap:NAME").
	Mounts         map[string]string `json:"mounts"`
	NonRoot        bool              `json:"nonRoot"`
	ReadOnlyRoot   bool              `json:"readOnlyRoot"`
	NoCapabilities bool              `json:"noCapabilities"`
	PreStop        bool              `json:"preStop"`
}

// Render is one render's summary.
type Render struct {
	Values      string               `json:"values"`
	KubeVersion string               `json:"kubeVersion"`
	Kinds       map[string]int       `json:"kinds"`
	Workers     map[string]Container `json:"containers"` // by Deployment name/container name
	Grace       map[string]int64     `json:"terminationGracePeriodSeconds"`
	Error       string               `json:"error,omitempty"`
}

func main() {
	var err error
	switch {
	case len(os.Args) >= 3 && os.Args[1] == "lint":
		err = lint(os.Stdout, os.Args[2], os.Args[3:])
	case len(os.Args) >= 3 && os.Args[1] == "helm":
		var r Render
		if r, err = helmCommand(os.Args[2:]); err == nil {
			err = printJSON(r)
		}
	case len(os.Args) >= 3:
		var rs []Render
		if rs, err = renderAll(os.Args[1], os.Args[2:]); err == nil {
			err = printJSON(rs)
		}
	default:
		fmt.Fprintln(os.Stderr, "usage: chartcheck CHART_DIR [!]VALUES_FILE... | lint CHART_DIR VALUES_FILE... | helm install|template ARGS...")
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chartcheck:", err)
		os.Exit(1)
	}
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// renderAll renders the chart with each values file ("!file": must fail)
// at its minimum Kubernetes version, after checking that Helm refuses an
// older cluster.
func renderAll(chartDir string, files []string) ([]Render, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return nil, err
	}
	minimum, err := minimumVersion(chrt)
	if err != nil {
		return nil, err
	}
	if err := refusesOlder(chrt, minimum); err != nil {
		return nil, err
	}
	var out []Render
	for _, file := range files {
		wantFail := strings.HasPrefix(file, "!")
		file = strings.TrimPrefix(file, "!")
		vals, err := chartutil.ReadValuesFile(file)
		if err != nil {
			return nil, err
		}
		r, err := render(chrt, vals, "rl", "ratelimit", minimum, []string{"monitoring.coreos.com/v1/ServiceMonitor"})
		r.Values = file
		switch {
		case wantFail && err == nil:
			return nil, fmt.Errorf("%s: rendered, but must fail", file)
		case wantFail:
			r.Error = err.Error()
		case err != nil:
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// kubeVersionRange is the form of Chart.yaml's kubeVersion this check reads
// a minimum from.
var kubeVersionRange = regexp.MustCompile(`^>=\s*v?1\.(\d+)(\.0)?(-0)?$`)

// minimumVersion is the oldest Kubernetes the chart says it runs on.
func minimumVersion(chrt *chart.Chart) (*chartutil.KubeVersion, error) {
	m := kubeVersionRange.FindStringSubmatch(chrt.Metadata.KubeVersion)
	if m == nil {
		return nil, fmt.Errorf("kubeVersion %q of Chart.yaml: want a minimum, such as \">=1.30.0-0\"", chrt.Metadata.KubeVersion)
	}
	return chartutil.ParseKubeVersion("v1." + m[1] + ".0")
}

// refusesOlder checks that Helm refuses to install the chart on a cluster
// one minor version older than its minimum: the minimum is enforced, not
// only stated.
func refusesOlder(chrt *chart.Chart, minimum *chartutil.KubeVersion) error {
	minor, _ := minorOf(minimum)
	older, err := chartutil.ParseKubeVersion(fmt.Sprintf("v1.%d.0", minor-1))
	if err != nil {
		return err
	}
	_, err = render(chrt, map[string]any{"region": "check"}, "rl", "ratelimit", older, nil)
	if err == nil || !strings.Contains(err.Error(), "incompatible with Kubernetes") {
		return fmt.Errorf("kubeVersion %s of Chart.yaml: an install on Kubernetes %s must be refused, got %v",
			chrt.Metadata.KubeVersion, older.Version, err)
	}
	return nil
}

// minorOf is a version's minor number ("30", or "30+" as some providers
// write it).
func minorOf(v *chartutil.KubeVersion) (int, error) {
	if v.Major != "1" {
		return 0, fmt.Errorf("Kubernetes %s: only 1.x is known", v.Version)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(v.Minor, "+"))
	if err != nil {
		return 0, fmt.Errorf("Kubernetes %s: minor version %q", v.Version, v.Minor)
	}
	return n, nil
}

// render renders the chart as an install of release in namespace on a
// cluster of kubeVersion (nil: Helm's default, as `helm template` without
// --kube-version) that serves Helm's default API versions and apiVersions,
// and decodes and checks every object.
//
// It takes the steps of Helm's client-only install (`helm template`,
// `helm install --dry-run`; helm.sh/helm/v3/pkg/action's Install.Run with
// ClientOnly) one by one, with the packages they call: the action package
// would also compile Kubernetes' client and kubectl's libraries into this
// tool, half of its build on a cold cache, for nothing a render uses.
func render(chrt *chart.Chart, vals map[string]any, release, namespace string, kubeVersion *chartutil.KubeVersion, apiVersions []string) (Render, error) {
	r := Render{Kinds: map[string]int{}, Workers: map[string]Container{}, Grace: map[string]int64{}}
	caps := chartutil.DefaultCapabilities.Copy()
	if kubeVersion != nil {
		caps.KubeVersion = *kubeVersion
	}
	caps.APIVersions = append(caps.APIVersions, apiVersions...)
	r.KubeVersion = caps.KubeVersion.Version
	minor, err := minorOf(&caps.KubeVersion)
	if err != nil {
		return r, err
	}
	if err := chartutil.ValidateReleaseName(release); err != nil {
		return r, err
	}
	if err := chartutil.ProcessDependenciesWithMerge(chrt, vals); err != nil {
		return r, err
	}
	options := chartutil.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	renderValues, err := chartutil.ToRenderValues(chrt, vals, options, caps) // validates values.schema.json
	if err != nil {
		return r, err
	}
	if kv := chrt.Metadata.KubeVersion; kv != "" && !chartutil.IsCompatibleRange(kv, caps.KubeVersion.String()) {
		return r, fmt.Errorf("chart requires kubeVersion: %s which is incompatible with Kubernetes %s", kv, caps.KubeVersion.String())
	}
	var e engine.Engine
	files, err := e.Render(chrt, renderValues)
	if err != nil {
		return r, err
	}
	for name := range files {
		if strings.HasSuffix(name, "/NOTES.txt") {
			delete(files, name) // not a resource
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return r, err
	}
	if len(hooks) > 0 {
		return r, fmt.Errorf("%d hooks rendered: this check decodes resources only", len(hooks))
	}
	for _, m := range manifests {
		if err := decode(m.Name, []byte(m.Content), minor, &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// kinds are the objects the chart may render: their types, and the
// Kubernetes minor version from which each is served (GA).
var kinds = map[string]struct {
	since int
	new   func() any
}{
	"v1/Service":                             {0, func() any { return &corev1.Service{} }},
	"v1/ConfigMap":                           {0, func() any { return &corev1.ConfigMap{} }},
	"apps/v1/Deployment":                     {9, func() any { return &appsv1.Deployment{} }},
	"policy/v1/PodDisruptionBudget":          {21, func() any { return &policyv1.PodDisruptionBudget{} }},
	"autoscaling/v2/HorizontalPodAutoscaler": {23, func() any { return &autoscalingv2.HorizontalPodAutoscaler{} }},
	// A CRD, the Prometheus Operator's: served wherever it is installed.
	"monitoring.coreos.com/v1/ServiceMonitor": {0, func() any { return &serviceMonitor{} }},
}

// podFeatures are the pod spec fields that a cluster serves only from some
// Kubernetes minor version: an older API server refuses them or, with the
// feature gate off, drops them from the pod it stores, so that the chart
// would install and silently lose them.
var podFeatures = []struct {
	name  string
	since int
	uses  func(*corev1.LifecycleHandler) bool
}{
	{"the lifecycle sleep action (PodLifecycleSleepAction, on by default from 1.30)", 30,
		func(h *corev1.LifecycleHandler) bool { return h.Sleep != nil }},
	{"a lifecycle sleep of 0 seconds (PodLifecycleSleepActionAllowZero, on by default from 1.33)", 33,
		func(h *corev1.LifecycleHandler) bool { return h.Sleep != nil && h.Sleep.Seconds == 0 }},
}

// decode decodes one rendered object strictly into its type, and checks
// that a cluster of Kubernetes 1.minor serves it.
func decode(name string, doc []byte, minor int, r *Render) error {
	var head struct {
		Kind       string `json:"kind"`
		APIVersion string `json:"apiVersion"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if head.Kind == "" {
		return nil // an empty document
	}
	r.Kinds[head.Kind]++
	kind, ok := kinds[head.APIVersion+"/"+head.Kind]
	if !ok {
		return fmt.Errorf("%s: %s %s is not a kind this check knows", name, head.APIVersion, head.Kind)
	}
	if minor < kind.since {
		return fmt.Errorf("%s: %s %s is served from Kubernetes 1.%d, not by %s", name, head.APIVersion, head.Kind, kind.since, r.KubeVersion)
	}
	obj := kind.new()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return fmt.Errorf("%s (%s): %w", name, head.Kind, err)
	}
	if d, ok := obj.(*appsv1.Deployment); ok {
		if err := checkPod(d.Spec.Template.Spec, minor); err != nil {
			return fmt.Errorf("%s (%s %s): %w on Kubernetes %s", name, head.Kind, d.Name, err, r.KubeVersion)
		}
		summarize(d, r)
	}
	if cm, ok := obj.(*corev1.ConfigMap); ok {
		for file, content := range cm.Data {
			var rules map[string]any
			if err := yaml.UnmarshalStrict([]byte(content), &rules); err != nil {
				return fmt.Errorf("%s: %s is not YAML: %w", name, file, err)
			}
		}
	}
	return nil
}

// checkPod fails on a field of spec that Kubernetes 1.minor does not serve.
func checkPod(spec corev1.PodSpec, minor int) error {
	var errs []error
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Lifecycle == nil {
			continue
		}
		for _, h := range []*corev1.LifecycleHandler{c.Lifecycle.PreStop, c.Lifecycle.PostStart} {
			if h == nil {
				continue
			}
			for _, f := range podFeatures {
				if f.uses(h) && minor < f.since {
					errs = append(errs, fmt.Errorf("container %s uses %s", c.Name, f.name))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// serviceMonitor is the part of the Prometheus Operator's ServiceMonitor
// the chart writes (its CRD is not in k8s.io/api).
type serviceMonitor struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name   string            `json:"name"`
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
			Scheme   string `json:"scheme,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

func summarize(d *appsv1.Deployment, r *Render) {
	spec := d.Spec.Template.Spec
	if spec.TerminationGracePeriodSeconds != nil {
		r.Grace[d.Name] = *spec.TerminationGracePeriodSeconds
	}
	sources := map[string]string{}
	for _, v := range spec.Volumes {
		switch {
		case v.Secret != nil:
			sources[v.Name] = "secret:" + v.Secret.SecretName
		case v.ConfigMap != nil:
			sources[v.Name] = "configMap:" + v.ConfigMap.Name
		}
	}
	for _, c := range spec.Containers {
		out := Container{Name: c.Name, Env: map[string]string{}, Ports: map[string]int32{}, Probes: map[string]string{},
			Mounts: map[string]string{}}
		for _, e := range c.Env {
			switch {
			case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
				out.Env[e.Name] = "secret:" + e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
			default:
				out.Env[e.Name] = e.Value
			}
		}
		for _, p := range c.Ports {
			out.Ports[p.Name] = p.ContainerPort
		}
		for kind, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
			switch {
			case p == nil:
			case p.HTTPGet != nil:
				out.Probes[kind] = fmt.Sprintf("%s %s %s", p.HTTPGet.Scheme, p.HTTPGet.Path, p.HTTPGet.Port.String())
			case p.TCPSocket != nil:
				out.Probes[kind] = "TCP " + p.TCPSocket.Port.String()
			}
		}
		for _, m := range c.VolumeMounts {
			out.Mounts[m.MountPath] = sources[m.Name]
		}
		if sc := c.SecurityContext; sc != nil {
			out.NonRoot = sc.RunAsNonRoot != nil && *sc.RunAsNonRoot
			out.ReadOnlyRoot = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
			out.NoCapabilities = sc.Capabilities != nil && len(sc.Capabilities.Add) == 0 &&
				len(sc.Capabilities.Drop) == 1 && sc.Capabilities.Drop[0] == "ALL"
		}
		out.PreStop = c.Lifecycle != nil && c.Lifecycle.PreStop != nil
		r.Workers[d.Name+"/"+c.Name] = out
	}
}

// lint runs `helm lint --strict` on the chart with each values file, at
// the chart's minimum Kubernetes version, printing every message to out;
// any warning or error fails. It is Helm's lint (helm.sh/helm/v3/pkg/lint)
// with the strict tolerance of its action: a warning counts as an error.
func lint(out io.Writer, chartDir string, files []string) error {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return err
	}
	minimum, err := minimumVersion(chrt)
	if err != nil {
		return err
	}
	failed := 0
	for _, file := range files {
		vals, err := chartutil.ReadValuesFile(file)
		if err != nil {
			return err
		}
		linter := helmlint.AllWithKubeVersion(chartDir, vals, "default", minimum)
		fmt.Fprintf(out, "==> Linting %s with %s (Kubernetes %s)\n", chartDir, file, minimum.Version)
		bad := 0
		for _, msg := range linter.Messages {
			fmt.Fprintln(out, msg)
			if msg.Severity >= support.WarningSev {
				bad++
			}
		}
		if bad > 0 {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("lint --strict: %d of %d values files failed", failed, len(files))
	}
	fmt.Fprintf(out, "%d values files linted, none failed\n", len(files))
	return nil
}

// helmCommand renders the chart as the helm command line args (after
// "helm") would.
func helmCommand(args []string) (Render, error) {
	if len(args) == 0 || (args[0] != "install" && args[0] != "template") {
		return Render{}, fmt.Errorf("helm: want install or template, got %q", args)
	}
	verb := args[0]
	fs := pflag.NewFlagSet("helm "+verb, pflag.ContinueOnError)
	var opts valueOptions
	fs.StringSliceVarP(&opts.ValueFiles, "values", "f", nil, "")
	fs.StringArrayVar(&opts.Values, "set", nil, "")
	fs.StringArrayVar(&opts.StringValues, "set-string", nil, "")
	fs.StringArrayVar(&opts.FileValues, "set-file", nil, "")
	fs.StringArrayVar(&opts.JSONValues, "set-json", nil, "")
	fs.StringArrayVar(&opts.LiteralValues, "set-literal", nil, "")
	namespace := fs.StringP("namespace", "n", "default", "")
	fs.Bool("create-namespace", false, "")
	var kubeVersion string
	if verb == "template" {
		fs.StringVar(&kubeVersion, "kube-version", "", "")
	} else {
		fs.String("dry-run", "", "")
		fs.Lookup("dry-run").NoOptDefVal = "client"
	}
	if err := fs.Parse(args[1:]); err != nil {
		return Render{}, fmt.Errorf("helm %s: %w", verb, err)
	}
	pos := fs.Args()
	release, chartDir := "release-name", "" // helm template's name when none is given
	switch {
	case len(pos) == 2:
		release, chartDir = pos[0], pos[1]
	case len(pos) == 1 && verb == "template":
		chartDir = pos[0]
	default:
		return Render{}, fmt.Errorf("helm %s: want NAME CHART, got %q", verb, pos)
	}
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return Render{}, err
	}
	vals, err := opts.merge()
	if err != nil {
		return Render{}, err
	}
	// helm template assumes Helm's default version unless told; helm install
	// asks the cluster: here, one of the oldest the chart says it runs on.
	var version *chartutil.KubeVersion
	switch {
	case kubeVersion != "":
		if version, err = chartutil.ParseKubeVersion(kubeVersion); err != nil {
			return Render{}, fmt.Errorf("invalid kube version %q: %w", kubeVersion, err)
		}
	case verb == "install":
		if version, err = minimumVersion(chrt); err != nil {
			return Render{}, err
		}
	}
	r, err := render(chrt, vals, release, *namespace, version, nil)
	r.Values = strings.Join(args, " ")
	return r, err
}
