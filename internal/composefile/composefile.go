// Package composefile reads the repository's compose.yaml, so that tests of
// the programs can check it against the configuration they really read.
package composefile

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is the part of a compose file the checks need.
type File struct {
	Services map[string]Service `yaml:"services"`
}

// Service is one compose service.
type Service struct {
	Image       string            `yaml:"image"`
	Build       map[string]string `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]any    `yaml:"depends_on"`
}

// Load parses compose.yaml at the root of the module that contains the
// working directory (anchors and merge keys resolved).
func Load() (*File, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "compose.yaml")); err == nil {
				break
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, fmt.Errorf("no compose.yaml above the working directory")
		}
		dir = parent
	}
	raw, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		return nil, err
	}
	var f File
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, fmt.Errorf("parse compose.yaml: %w", err)
	}
	return &f, nil
}

// Environ returns a service's environment as KEY=value entries.
func (s Service) Environ() []string {
	var out []string
	for k, v := range s.Environment {
		out = append(out, k+"="+v)
	}
	return out
}

// EnvNames returns the variable names of the env tags of a config struct.
func EnvNames(config any) map[string]bool {
	names := map[string]bool{}
	t := reflect.TypeOf(config)
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if tag := f.Tag.Get("env"); tag != "" {
			names[strings.Split(tag, ",")[0]] = true
		} else if f.Anonymous && f.Type.Kind() == reflect.Struct {
			for name := range EnvNames(reflect.Zero(f.Type).Interface()) {
				names[name] = true
			}
		}
	}
	return names
}

// HostIPs returns the host address each port is published on ("" for a
// port published on every interface).
func (s Service) HostIPs() []string {
	var out []string
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if len(parts) == 3 {
			out = append(out, parts[0])
		} else {
			out = append(out, "")
		}
	}
	return out
}

// ContainerPorts returns the container side of each "[ip:]host:container"
// port.
func (s Service) ContainerPorts() []string {
	var out []string
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		out = append(out, parts[len(parts)-1])
	}
	return out
}
