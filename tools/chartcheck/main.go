// Command chartcheck renders the Helm chart with Helm's own Go packages
// (as `helm install --dry-run` would, without a cluster), decodes every
// object it renders strictly into its k8s.io/api type (an unknown or
// misspelt field fails), and prints a summary of the workloads as JSON for
// the binaries' tests to hold against their configuration code.
//
// Usage: chartcheck CHART_DIR VALUES_FILE...   (each file one render)
//
// A render that should fail is named "!file": it must fail, and its error
// is printed.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
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

// Render is one values file's render.
type Render struct {
	Values  string               `json:"values"`
	Kinds   map[string]int       `json:"kinds"`
	Workers map[string]Container `json:"containers"` // by Deployment name/container name
	Grace   map[string]int64     `json:"terminationGracePeriodSeconds"`
	Error   string               `json:"error,omitempty"`
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: chartcheck CHART_DIR VALUES_FILE...")
		os.Exit(2)
	}
	chrt, err := loader.Load(os.Args[1])
	if err != nil {
		fail(err)
	}
	var out []Render
	for _, file := range os.Args[2:] {
		wantFail := strings.HasPrefix(file, "!")
		file = strings.TrimPrefix(file, "!")
		r, err := render(chrt, file)
		switch {
		case wantFail && err == nil:
			fail(fmt.Errorf("%s: rendered, but must fail", file))
		case wantFail:
			r.Error = err.Error()
		case err != nil:
			fail(fmt.Errorf("%s: %w", file, err))
		}
		out = append(out, r)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chartcheck:", err)
	os.Exit(1)
}

// render renders the chart with one values file, as an install of release
// "rl" in namespace "ratelimit", and decodes every object.
func render(chrt *chart.Chart, file string) (Render, error) {
	r := Render{Values: file, Kinds: map[string]int{}, Workers: map[string]Container{}, Grace: map[string]int64{}}
	vals, err := chartutil.ReadValuesFile(file)
	if err != nil {
		return r, err
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = "rl", "ratelimit"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.31.0", Major: "1", Minor: "31"}
	install.APIVersions = append(chartutil.DefaultVersionSet, "monitoring.coreos.com/v1/ServiceMonitor")
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return r, err
	}
	for name, doc := range releaseutil.SplitManifests(rel.Manifest) {
		if err := decode(name, []byte(doc), &r); err != nil {
			return r, err
		}
	}
	return r, nil
}

// decode decodes one rendered object strictly into its type.
func decode(name string, doc []byte, r *Render) error {
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
	var obj any
	switch head.APIVersion + "/" + head.Kind {
	case "apps/v1/Deployment":
		obj = &appsv1.Deployment{}
	case "v1/Service":
		obj = &corev1.Service{}
	case "v1/ConfigMap":
		obj = &corev1.ConfigMap{}
	case "policy/v1/PodDisruptionBudget":
		obj = &policyv1.PodDisruptionBudget{}
	case "autoscaling/v2/HorizontalPodAutoscaler":
		obj = &autoscalingv2.HorizontalPodAutoscaler{}
	case "monitoring.coreos.com/v1/ServiceMonitor":
		obj = &serviceMonitor{}
	default:
		return fmt.Errorf("%s: %s %s is not a kind this check knows", name, head.APIVersion, head.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return fmt.Errorf("%s (%s): %w", name, head.Kind, err)
	}
	if d, ok := obj.(*appsv1.Deployment); ok {
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
