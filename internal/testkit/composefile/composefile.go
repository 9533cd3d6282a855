// Package composefile loads the repository's compose.yaml as Docker Compose
// does (github.com/compose-spec/compose-go: schema validation,
// interpolation, defaults), so that tests of the programs can check it
// against the configuration they really read, and a file Docker would
// refuse fails them.
package composefile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/compose-spec/compose-go/v2/loader"
	"github.com/compose-spec/compose-go/v2/types"
)

// File is the part of a compose file the checks need.
type File struct {
	Services map[string]Service
}

// Service is one compose service, in the short syntax the checks compare.
type Service struct {
	Image string
	// Build holds context, dockerfile and target, if the service builds.
	Build   map[string]string
	Command []string
	// Environment is the service's environment after interpolation.
	Environment map[string]string
	// Ports are "[host_ip:]published:target".
	Ports []string
	// Volumes are "source:target[:ro]".
	Volumes []string
	// DependsOn maps each dependency to its condition.
	DependsOn map[string]string
}

// Load loads compose.yaml at the root of the module that contains the
// working directory.
func Load() (*File, error) {
	dir, err := os.Getwd()
	if err != nil {
		return nil, err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "compose.yaml")); err == nil {
				return LoadDir(dir)
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return nil, fmt.Errorf("no compose.yaml above the working directory")
		}
		dir = parent
	}
}

// LoadDir loads dir/compose.yaml as Docker Compose would, with an empty
// host environment: the file must stand on its own.
func LoadDir(dir string) (*File, error) {
	project, err := loader.LoadWithContext(context.Background(), types.ConfigDetails{
		WorkingDir:  dir,
		ConfigFiles: []types.ConfigFile{{Filename: filepath.Join(dir, "compose.yaml")}},
		Environment: types.Mapping{},
	}, func(o *loader.Options) { o.SetProjectName("ratelimit", true) })
	if err != nil {
		return nil, fmt.Errorf("load compose.yaml as Docker Compose does: %w", err)
	}
	f := &File{Services: map[string]Service{}}
	for name, s := range project.Services {
		svc := Service{Image: s.Image, Command: s.Command, Environment: map[string]string{}, DependsOn: map[string]string{}}
		if b := s.Build; b != nil {
			svc.Build = map[string]string{"context": b.Context, "dockerfile": b.Dockerfile, "target": b.Target}
		}
		for k, v := range s.Environment {
			if v != nil {
				svc.Environment[k] = *v
			}
		}
		for _, p := range s.Ports {
			port := p.Published + ":" + strconv.FormatUint(uint64(p.Target), 10)
			if p.HostIP != "" {
				port = p.HostIP + ":" + port
			}
			svc.Ports = append(svc.Ports, port)
		}
		for _, v := range s.Volumes {
			vol := v.Source + ":" + v.Target
			if v.ReadOnly {
				vol += ":ro"
			}
			svc.Volumes = append(svc.Volumes, vol)
		}
		for dep, d := range s.DependsOn {
			svc.DependsOn[dep] = d.Condition
		}
		f.Services[name] = svc
	}
	return f, nil
}

// Environ returns a service's environment as KEY=value entries.
func (s Service) Environ() []string {
	var out []string
	for k, v := range s.Environment {
		out = append(out, k+"="+v)
	}
	return out
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
