package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The artefacts that deploy the programs (the Helm chart, compose.yaml)
// are held to the binaries TestMain built, once for both programs: what
// each reads is what its --help lists, and whether an environment loads is
// what its `config check` answers, so no test reads a program's internals.

// settings returns the variables `name --help` lists, each with the
// default it shows ("" for none).
func settings(t *testing.T, name string) map[string]string {
	t.Helper()
	out, err := exec.Command(filepath.Join(bin, name), "--help").Output()
	if err != nil {
		t.Fatalf("%s --help: %v", name, err)
	}
	vars := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !(strings.HasPrefix(f[0], "UNKEY_") || strings.HasPrefix(f[0], "OTEL_")) {
			continue
		}
		def := f[1]
		if def == "(empty)" || def == "(required)" {
			def = ""
		}
		vars[f[0]] = def
	}
	if len(vars) < 5 {
		t.Fatalf("%s --help lists %d variables: the parse missed them", name, len(vars))
	}
	return vars
}

// configCheck runs `name config check` with environ and nothing else, and
// returns what it printed, and its failure.
func configCheck(t *testing.T, name string, environ []string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), "config", "check")
	cmd.Env = environ
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// loaded is an environment as a program reads it: a variable's value, or
// the default its --help shows.
type loaded struct {
	env      map[string]string
	defaults map[string]string
}

func newLoaded(environ []string, defaults map[string]string) loaded {
	env := map[string]string{}
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return loaded{env: env, defaults: defaults}
}

func (l loaded) get(name string) string {
	if v, ok := l.env[name]; ok {
		return v
	}
	return l.defaults[name]
}
