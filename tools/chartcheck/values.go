package main

import (
	"fmt"
	"os"

	"helm.sh/helm/v3/pkg/strvals"
	"sigs.k8s.io/yaml"
)

// valueOptions are the values flags of a helm command line, merged as
// Helm merges them (helm.sh/helm/v3/pkg/cli/values.Options.MergeValues):
// the -f files in order, each over the ones before, then --set-json,
// --set, --set-string, --set-file and --set-literal. Files are local paths
// only: a README command that reads a URL or standard input is refused.
type valueOptions struct {
	ValueFiles    []string
	Values        []string
	StringValues  []string
	FileValues    []string
	JSONValues    []string
	LiteralValues []string
}

// merge returns the values the flags give.
func (o valueOptions) merge() (map[string]any, error) {
	base := map[string]any{}
	for _, path := range o.ValueFiles {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		current := map[string]any{}
		if err := yaml.Unmarshal(raw, &current); err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", path, err)
		}
		base = mergeMaps(base, current)
	}
	for _, v := range o.JSONValues {
		if err := strvals.ParseJSON(v, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set-json data %s", v)
		}
	}
	for _, v := range o.Values {
		if err := strvals.ParseInto(v, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set data: %w", err)
		}
	}
	for _, v := range o.StringValues {
		if err := strvals.ParseIntoString(v, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set-string data: %w", err)
		}
	}
	for _, v := range o.FileValues {
		read := func(rs []rune) (any, error) {
			raw, err := os.ReadFile(string(rs))
			return string(raw), err
		}
		if err := strvals.ParseIntoFile(v, base, read); err != nil {
			return nil, fmt.Errorf("failed parsing --set-file data: %w", err)
		}
	}
	for _, v := range o.LiteralValues {
		if err := strvals.ParseLiteralInto(v, base); err != nil {
			return nil, fmt.Errorf("failed parsing --set-literal data: %w", err)
		}
	}
	return base, nil
}

// mergeMaps returns b over a: nested maps merged key by key, anything
// else replaced.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if vm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeMaps(am, vm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
