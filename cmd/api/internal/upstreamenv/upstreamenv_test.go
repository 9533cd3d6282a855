package upstreamenv_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/upstreamenv"
)

// gatewayEnv is the environment Envoy Gateway gives its rate limit
// container (internal/infrastructure/kubernetes/ratelimit/resource.go),
// with Redis, Prometheus and tracing on.
var gatewayEnv = []string{
	"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true", "RUNTIME_WATCH_ROOT=false",
	"LOG_LEVEL=info", "USE_STATSD=false",
	"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=envoy-gateway:18001", "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
	"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=/certs/tls.crt", "GRPC_SERVER_TLS_KEY=/certs/tls.key", "GRPC_SERVER_TLS_CA_CERT=/certs/ca.crt",
	"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=/certs/tls.crt", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY=/certs/tls.key",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT=/certs/ca.crt", "FORCE_START_WITHOUT_INITIAL_CONFIG=true",
	"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=redis.redis-system.svc.cluster.local:6379",
	"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=:19001", "PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
	"TRACING_ENABLED=true", "TRACING_SERVICE_NAME=envoy-ratelimit", "TRACING_SERVICE_NAMESPACE=envoy gateway,system",
	"TRACING_SERVICE_INSTANCE_ID=envoy-ratelimit-7d9c", "TRACING_SAMPLING_RATE=1.0", "OTEL_EXPORTER_OTLP_ENDPOINT=http://otel:4318",
}

func added(t *testing.T, environ []string) map[string]string {
	t.Helper()
	out, _, err := upstreamenv.Translate(environ)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out[:len(environ)], environ) {
		t.Fatalf("the environment given changed: %v", out[:len(environ)])
	}
	m := map[string]string{}
	for _, kv := range out[len(environ):] {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

func TestEnvoyGatewayEnvironment(t *testing.T) {
	got := added(t, gatewayEnv)
	want := map[string]string{
		"UNKEY_HTTP_ADDR": "0.0.0.0:8080", "UNKEY_GRPC_ADDR": "0.0.0.0:8081",
		"UNKEY_GRPC_TLS_CERT_FILE": "/certs/tls.crt", "UNKEY_GRPC_TLS_KEY_FILE": "/certs/tls.key", "UNKEY_GRPC_TLS_CLIENT_CA_FILE": "/certs/ca.crt",
		"UNKEY_RLS_XDS_SERVER": "envoy-gateway:18001", "UNKEY_RLS_XDS_NODE_ID": "envoy-ratelimit", "UNKEY_RLS_XDS_TLS": "true",
		"UNKEY_RLS_XDS_CA_FILE": "/certs/ca.crt", "UNKEY_RLS_XDS_CERT_FILE": "/certs/tls.crt", "UNKEY_RLS_XDS_KEY_FILE": "/certs/tls.key",
		"UNKEY_RLS_START_WITHOUT_CONFIG": "true",
		"UNKEY_REDIS_URL":                "redis://redis.redis-system.svc.cluster.local:6379",
		"UNKEY_METRICS_ADDR":             ":19001", "UNKEY_LOG_LEVEL": "info",
		"OTEL_SERVICE_NAME": "envoy-ratelimit", "OTEL_RESOURCE_ATTRIBUTES": "service.namespace=envoy%20gateway%2Csystem,service.instance.id=envoy-ratelimit-7d9c",
		"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.0", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_TRACES_EXPORTER": "otlp", "UNKEY_REGION": "default",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected setting %s=%s", k, got[k])
		}
	}
}

// TestUnkeySettingsWin: a setting given itself is not replaced.
func TestUnkeySettingsWin(t *testing.T) {
	got := added(t, append(slices.Clone(gatewayEnv), "UNKEY_REDIS_URL=redis+cluster://a:1", "UNKEY_REGION=eu-west", "OTEL_TRACES_EXPORTER=console"))
	for _, k := range []string{"UNKEY_REDIS_URL", "UNKEY_REGION", "OTEL_TRACES_EXPORTER"} {
		if v, ok := got[k]; ok {
			t.Errorf("%s was set to %q over the environment's", k, v)
		}
	}
}

func TestDefaultsAndMappings(t *testing.T) {
	got := added(t, []string{"PORT=9000", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=cluster", "REDIS_URL=a:7000,b:7001", "REDIS_TLS=true",
		"REDIS_TLS_CLIENT_CERT=/redis-certs/tls.crt", "REDIS_TLS_CLIENT_KEY=/redis-certs/tls.key",
		"REDIS_AUTH=user:p@ss", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true", "LIMIT_RESPONSE_HEADERS_ENABLED=true", "DEBUG_PORT=6070",
		"LOG_LEVEL=WARN", "LOG_FORMAT=text"})
	for k, v := range map[string]string{
		"UNKEY_HTTP_ADDR": "0.0.0.0:9000", "UNKEY_GRPC_ADDR": "0.0.0.0:8081", "UNKEY_DEBUG_ADDR": "0.0.0.0:6070",
		"UNKEY_RLS_CONFIG": "/srv/runtime_data/current/config", "UNKEY_REDIS_URL": "rediss+cluster://user:p%40ss@a:7000,b:7001",
		"UNKEY_REDIS_TLS_CERT_FILE": "/redis-certs/tls.crt", "UNKEY_REDIS_TLS_KEY_FILE": "/redis-certs/tls.key",
		"UNKEY_RLS_COUNT_OVER_LIMIT": "false", "UNKEY_RLS_RESPONSE_HEADERS": "true", "UNKEY_LOG_LEVEL": "warn", "UNKEY_LOG_FORMAT": "text",
		"OTEL_TRACES_EXPORTER": "none",
	} {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got["UNKEY_RLS_XDS_SERVER"]; ok {
		t.Error("files are the default rule source, not xDS")
	}
}

func TestRefused(t *testing.T) {
	if _, _, err := upstreamenv.Translate([]string{"REDIS_TLS=FALSE"}); err != nil {
		t.Errorf("REDIS_TLS=FALSE without REDIS_URL: %v, want no error", err)
	}
	for _, tc := range []struct{ env, want string }{
		{"USE_STATSD=true", "USE_STATSD=true: not supported"},
		{"BACKEND_TYPE=memcache", "BACKEND_TYPE=memcache: not supported"},
		{"REDIS_TYPE=sentinel", "REDIS_TYPE=sentinel: not supported"},
		{"REDIS_SOCKET_TYPE=unix", "REDIS_SOCKET_TYPE=unix: not supported"},
		{"REDIS_PERSECOND=true", "REDIS_PERSECOND=true: not supported"},
		{"GRPC_UDS=/tmp/s", "GRPC_UDS: not supported"},
		{"CONFIG_TYPE=GRPC_XDS_DELTA", "CONFIG_TYPE=GRPC_XDS_DELTA: must be FILE or GRPC_XDS_SOTW"},
		{"PORT=http", `PORT: must be a port number (0 to 65535), got "http"`},
		{"SHADOW_MODE=yes", `SHADOW_MODE: must be true or false, got "yes"`},
		{"PROMETHEUS_PATH=/stats", "PROMETHEUS_PATH=/stats: not supported"},
		{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_USE_TLS=true: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY"},
		{"REDIS_TLS_CLIENT_CERT=/c", "REDIS_TLS_CLIENT_CERT: needs REDIS_TLS=true"},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION=true", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION: not supported"},
	} {
		// Redis and Prometheus on, where the variable tried does not say.
		env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=r:6379", "USE_PROMETHEUS=true", tc.env}
		if _, _, err := upstreamenv.Translate(env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Translate = %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
	// A sampling rate that is no number from 0 to 1, NaN included; a Redis
	// address with options after its port (which would reach the Redis
	// URL: skip_verify turns off its certificate checks).
	for _, tc := range []struct{ env, want string }{
		{"TRACING_ENABLED=true TRACING_SAMPLING_RATE=NaN", "TRACING_SAMPLING_RATE: must be a number from 0 to 1"},
		{"TRACING_ENABLED=true TRACING_SAMPLING_RATE=Inf", "TRACING_SAMPLING_RATE: must be a number from 0 to 1"},
		{"REDIS_URL=r:6379?skip_verify=true", "REDIS_URL: must be host:port"},
		{"REDIS_URL=r:http", "REDIS_URL: must be host:port"},
	} {
		env := append([]string{"REDIS_SOCKET_TYPE=tcp"}, strings.Fields(tc.env)...)
		if _, _, err := upstreamenv.Translate(env); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Translate = %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
	// Without REDIS_URL, what asks for a Redis stops the start all the same.
	for _, tc := range []struct{ env, want string }{
		{"REDIS_TYPE=sentinel", "REDIS_TYPE=sentinel: not supported"},
		{"REDIS_SOCKET_TYPE=unix", "REDIS_SOCKET_TYPE=unix: not supported"},
		{"REDIS_TLS=true", "REDIS_TLS=true: needs REDIS_URL"},
		{"REDIS_AUTH=secret", "REDIS_AUTH: needs REDIS_URL"},
	} {
		if _, _, err := upstreamenv.Translate([]string{tc.env}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s without REDIS_URL: Translate = %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
}

// TestOriginsNameWhatTheUserSet: an error about a setting Translate added
// names the variables the user set that it came from (the rules'
// directory from RUNTIME_ROOT and RUNTIME_SUBDIRECTORY, the listener from
// PORT), or says it is envoyproxy/ratelimit's default; a setting the user
// set themselves stays as it is.
func TestOriginsNameWhatTheUserSet(t *testing.T) {
	_, origins, err := upstreamenv.Translate([]string{"RUNTIME_ROOT=/data", "RUNTIME_SUBDIRECTORY=rl", "PORT=9000",
		"UNKEY_LOG_LEVEL=debug"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ err, want string }{
		{"UNKEY_RLS_CONFIG: open /data/rl/config: no such file or directory",
			"UNKEY_RLS_CONFIG (from RUNTIME_ROOT, RUNTIME_SUBDIRECTORY): open /data/rl/config: no such file or directory"},
		{"config check: UNKEY_HTTP_ADDR: cannot listen on 0.0.0.0:9000", "config check: UNKEY_HTTP_ADDR (from PORT): cannot listen on 0.0.0.0:9000"},
		{"UNKEY_REGION: bad", "UNKEY_REGION: bad"}, // this service's default, not read from the environment
		{"UNKEY_GRPC_ADDR: bad", "UNKEY_GRPC_ADDR (envoyproxy/ratelimit's default): bad"},
		{"UNKEY_LOG_LEVEL: bad", "UNKEY_LOG_LEVEL: bad"},
		{"UNKEY_RLS_CONFIG_INTERVAL: bad", "UNKEY_RLS_CONFIG_INTERVAL: bad"},
	} {
		if got := origins.Explain(errors.New(tc.err)).Error(); got != tc.want {
			t.Errorf("Explain(%q) = %q, want %q", tc.err, got, tc.want)
		}
	}
	if origins.Explain(nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}

// TestMisspelledUpstreamVariables: a variable one edit from one of
// envoyproxy/ratelimit's (two for a long name) stops the start naming the
// one it likely meant, since either service would read it as unset; the
// rest of an environment (a shell's, Kubernetes' service links) is let
// be, and UNKEY_ALLOW_UNKNOWN_SETTINGS lets a misspelling be too.
func TestMisspelledUpstreamVariables(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"REDIS_UR=redis:6379"}, "REDIS_UR: envoyproxy/ratelimit reads no such variable; did you mean REDIS_URL?"},
		{[]string{"RUNTIME_RO0T=/data"}, "did you mean RUNTIME_ROOT?"},
		{[]string{"USE_PROMETEUS=true"}, "did you mean USE_PROMETHEUS?"},
		// A port setting misspelled: no service link (whose value is
		// tcp://…).
		{[]string{"GRC_PORT=8081"}, "did you mean GRPC_PORT?"},
		{[]string{"PATH=/bin", "HOME=/root", "HOSTNAME=rl-0", "TERM=xterm", "LANG=C.UTF-8", "REDIS_PORT=tcp://10.0.0.1:6379",
			"RATELIMIT_SERVICE_HOST=10.0.0.2", "RATELIMIT_PORT_8081_TCP_ADDR=10.0.0.2", "KUBERNETES_SERVICE_PORT=443"}, ""},
		{[]string{"REDIS_UR=redis:6379", "UNKEY_ALLOW_UNKNOWN_SETTINGS=true"}, ""},
		// Long names three or four edits from one of envoyproxy/
		// ratelimit's are someone else's: two edits at most.
		{[]string{"REDIS_SENTINEL_ADDRS=a:1", "GRPC_MAX_CONNECTION_IDLE=5m"}, ""},
	} {
		_, _, err := upstreamenv.Translate(tc.env)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%q: %v, want it let be", tc.env, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%q: %v, want %q", tc.env, err, tc.want)
		}
	}
}
