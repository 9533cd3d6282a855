package e2e

import (
	"net"
	"os"
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

// configCheck runs `name config check --static` with environ and nothing
// else (no address bound, only the files a setting is parsed from read:
// the files and addresses of a manifest are the machine's it runs on),
// and returns what it printed, and its failure.
func configCheck(t *testing.T, name string, environ []string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), "config", "check", "--static")
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

// TestSettingsTyposStopTheStart: an UNKEY_* variable a program does not
// read, a misspelled setting most likely, fails `config check` (and so
// the start) naming the setting nearest to it, unless
// UNKEY_ALLOW_UNKNOWN_SETTINGS allows it; a variable another program
// reads (a client's token) is no typo. A value a setting's type cannot
// hold names the variable, what was set and what it takes, not the
// program's field.
func TestSettingsTyposStopTheStart(t *testing.T) {
	t.Parallel()
	base := map[string][]string{
		"api":    {"UNKEY_REGION=eu"},
		"worker": {"UNKEY_MYSQL_DSN=u:p@tcp(127.0.0.1:3306)/db"},
	}
	for name, typo := range map[string][2]string{
		"api":    {"UNKEY_RLS_CONFG=/etc/ratelimit", "UNKEY_RLS_CONFIG"},
		"worker": {"UNKEY_AUDIT_RETENSION=720h", "UNKEY_AUDIT_RETENTION"},
	} {
		// UNKEY_TOKEN is a client's; the service links are Kubernetes' for
		// a Service named unkey-ratelimit-api in the pod's namespace.
		env := append(append([]string{}, base[name]...), typo[0], "UNKEY_TOKEN=a-client's",
			"UNKEY_RATELIMIT_API_SERVICE_HOST=10.0.0.1", "UNKEY_RATELIMIT_API_PORT=tcp://10.0.0.1:7070")
		out, err := configCheck(t, name, env)
		unknown, _, _ := strings.Cut(typo[0], "=")
		if err == nil || !strings.Contains(out, unknown+": no such setting; did you mean "+typo[1]+"?") {
			t.Errorf("%s config check with %s: %v %q, want a failure naming %s", name, unknown, err, out, typo[1])
		}
		if out, err := configCheck(t, name, append(env, "UNKEY_ALLOW_UNKNOWN_SETTINGS=true")); err != nil {
			t.Errorf("%s config check with %s allowed: %v %q", name, unknown, err, out)
		}
		if out, err := configCheck(t, name, append(append([]string{}, base[name]...), "UNKEY_TOKEN=a-client's")); err != nil {
			t.Errorf("%s config check with a client's UNKEY_TOKEN: %v %q", name, err, out)
		}
	}
	out, err := configCheck(t, "api", append(base["api"], "UNKEY_GLOBAL_SYNC_INTERVAL=2"))
	if err == nil || !strings.Contains(out, `UNKEY_GLOBAL_SYNC_INTERVAL: must be a duration such as 500ms, 10s or 1h, got "2"`) ||
		strings.Contains(out, "GlobalSyncInterval") {
		t.Errorf("api config check with UNKEY_GLOBAL_SYNC_INTERVAL=2: %v %q, want the variable, the value and what it takes", err, out)
	}
}

// TestConfigCheckMeetsStartErrors: `config check` without --static meets
// what the start would: a rules path or a certificate that is not there,
// an address another process holds, each named by its variable; with
// the files there and the addresses free it passes.
func TestConfigCheckMeetsStartErrors(t *testing.T) {
	t.Parallel()
	check := func(name string, environ ...string) (string, error) {
		cmd := exec.Command(filepath.Join(bin, name), "config", "check")
		cmd.Env = environ
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	rules := t.TempDir()
	if err := os.WriteFile(filepath.Join(rules, "config.yaml"), []byte("domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit:\n      unit: second\n      requests_per_unit: 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	api := []string{"UNKEY_REGION=eu", "UNKEY_HTTP_ADDR=127.0.0.1:0"}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"UNKEY_RLS_CONFIG=" + filepath.Join(rules, "missing")}, "UNKEY_RLS_CONFIG: "},
		{[]string{"UNKEY_TLS_CERT_FILE=" + filepath.Join(rules, "cert.pem"), "UNKEY_TLS_KEY_FILE=" + filepath.Join(rules, "key.pem")}, "UNKEY_TLS_CERT_FILE, UNKEY_TLS_KEY_FILE"},
		{[]string{"UNKEY_GRPC_ADDR=" + held.Addr().String()}, "UNKEY_GRPC_ADDR: cannot listen on " + held.Addr().String()},
		{[]string{"UNKEY_AUTH_KEYS_FILE=" + filepath.Join(rules, "keys.json")}, "UNKEY_AUTH_KEYS_FILE: "},
	} {
		out, err := check("api", append(append([]string{}, api...), tc.env...)...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("api config check with %q: %v %q, want a failure naming %q", tc.env, err, out, tc.want)
		}
		if out, err := configCheck(t, "api", append(append([]string{}, api...), tc.env...)); err != nil {
			t.Errorf("api config check --static with %q: %v %q, want only the settings checked", tc.env, err, out)
		}
	}
	// Two settings that name one address: the start holds the first
	// when it binds the second, and so does the check.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	one := free.Addr().String()
	free.Close()
	if out, err := check("api", "UNKEY_REGION=eu", "UNKEY_HTTP_ADDR="+one, "UNKEY_GRPC_ADDR="+one); err == nil ||
		!strings.Contains(out, "UNKEY_GRPC_ADDR: cannot listen on "+one) {
		t.Errorf("api config check with one address twice: %v %q, want a failure naming UNKEY_GRPC_ADDR", err, out)
	}
	if out, err := check("api", append(api, "UNKEY_RLS_CONFIG="+rules, "UNKEY_GRPC_ADDR=127.0.0.1:0")...); err != nil {
		t.Errorf("api config check with the rules there and free addresses: %v %q", err, out)
	}
	worker := []string{"UNKEY_MYSQL_DSN=u:p@tcp(127.0.0.1:3306)/db"}
	if out, err := check("worker", append(worker, "UNKEY_WORKER_ADDR="+held.Addr().String())...); err == nil ||
		!strings.Contains(out, "UNKEY_WORKER_ADDR: cannot listen on") {
		t.Errorf("worker config check on a held address: %v %q, want a failure naming UNKEY_WORKER_ADDR", err, out)
	}
	if out, err := check("worker", append(worker, "UNKEY_WORKER_ADDR=127.0.0.1:0")...); err != nil {
		t.Errorf("worker config check on a free address: %v %q", err, out)
	}
}
