// Package upstreamenv reads envoyproxy/ratelimit's environment into this
// service's settings, so that the image runs where that one was deployed
// (Envoy Gateway and Envoy AI Gateway deploy it, and let a user change
// only its image): api started as "ratelimit" (/bin/ratelimit) reads
// them. Each variable maps onto an UNKEY_* setting, which wins where both
// are given; envoyproxy/ratelimit's defaults apply where they decide what
// a deployment relies on (the ports 8080 and 8081, the rule directory, the
// xDS server's address). A variable this service cannot honour (statsd, a
// memcache or Redis Sentinel backend, a Unix socket) stops the start with
// an error naming it, never a silent difference; the ones that tune what
// this service does otherwise (pool sizes, pipelining, local cache sizes)
// have no effect.
package upstreamenv

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/spelling"
)

// Translate returns environ with the UNKEY_* (and OTEL_*) settings that
// envoyproxy/ratelimit's variables in it mean, each added where environ
// does not set it already, and where each added setting came from. An
// error names the variable and why.
func Translate(environ []string) ([]string, Origins, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	t := translation{env: env, from: map[string][]string{}}
	for _, step := range []func() error{t.misspelled, t.refused, t.listeners, t.grpcTLS, t.rules, t.redis, t.metrics, t.logs, t.tracing, t.envoy} {
		if err := step(); err != nil {
			return nil, nil, err
		}
	}
	t.set("UNKEY_REGION", "default") // this service's, not envoyproxy/ratelimit's
	return append(append([]string(nil), environ...), t.add...), Origins(t.from), nil
}

// Origins holds, for each setting Translate added from variables of
// envoyproxy/ratelimit's environment, those it was derived from (none
// where it is envoyproxy/ratelimit's default); a setting of this
// service's own (the region) has no entry.
type Origins map[string][]string

// setting matches a setting's name in an error's text.
var setting = regexp.MustCompile(`\bUNKEY_[A-Z0-9_]+\b`)

// Explain returns err with each setting Translate added named by the
// variables the user set, which are what the user knows: "UNKEY_RLS_CONFIG
// (from RUNTIME_ROOT)", or "(envoyproxy/ratelimit's default)". nil stays
// nil.
func (o Origins) Explain(err error) error {
	if err == nil || len(o) == 0 {
		return err
	}
	msg := setting.ReplaceAllStringFunc(err.Error(), func(name string) string {
		from, ok := o[name]
		switch {
		case !ok:
			return name
		case len(from) == 0:
			return name + " (envoyproxy/ratelimit's default)"
		}
		return name + " (from " + strings.Join(from, ", ") + ")"
	})
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

type translation struct {
	env map[string]string
	add []string // the settings added, k=v
	// from holds, for each setting added from envoyproxy/ratelimit's
	// variables, those of them environ sets (none: their defaults).
	from map[string][]string
}

func has(env map[string]string, k string) bool { _, ok := env[k]; return ok }

// val returns variable k, "" where it is not set.
func (t *translation) val(k string) string { return t.env[k] }

// get returns the variable, or def where it is not set or empty.
func (t *translation) get(k, def string) string {
	if v := t.val(k); v != "" {
		return v
	}
	return def
}

// set adds setting k=v unless environ sets k itself. from names the
// variables of envoyproxy/ratelimit's it is derived from; those of them
// the environment sets are what an error about k names (none: their
// defaults). A setting given no from (the region, this service's own)
// is not noted.
func (t *translation) set(k, v string, from ...string) {
	if has(t.env, k) {
		return
	}
	t.env[k] = v
	t.add = append(t.add, k+"="+v)
	if len(from) > 0 {
		given := []string{}
		for _, f := range from {
			if t.env[f] != "" {
				given = append(given, f)
			}
		}
		t.from[k] = given
	}
}

// flag reads a boolean variable as envoyproxy/ratelimit's settings do
// (strconv.ParseBool), false where it is not set.
func (t *translation) flag(k string) (bool, error) {
	v := t.val(k)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s: must be true or false, got %q", k, v)
	}
	return b, nil
}

// upstreamNames are the variables envoyproxy/ratelimit reads: its
// settings (src/settings/settings.go), and GRPC_SERVER_TLS_CA_CERT, which
// Envoy Gateway sets.
var upstreamNames = []string{
	"BACKEND_TYPE", "CACHE_KEY_PREFIX", "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
	"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "CONFIG_GRPC_XDS_NODE_ID",
	"CONFIG_GRPC_XDS_NODE_METADATA", "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
	"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
	"CONFIG_GRPC_XDS_SERVER_URL", "CONFIG_GRPC_XDS_SERVER_USE_TLS", "CONFIG_TYPE", "DEBUG_HOST",
	"DEBUG_PORT", "DISABLE_STATS", "EXPIRATION_JITTER_MAX_SECONDS", "EXTRA_TAGS",
	"FORCE_START_WITHOUT_INITIAL_CONFIG", "GRPC_CLIENT_TLS_CACERT", "GRPC_CLIENT_TLS_SAN",
	"GRPC_HOST", "GRPC_MAX_CONNECTION_AGE", "GRPC_MAX_CONNECTION_AGE_GRACE", "GRPC_PORT",
	"GRPC_SERVER_TLS_CERT", "GRPC_SERVER_TLS_KEY", "GRPC_SERVER_USE_TLS", "GRPC_UDS",
	"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "HOST", "LIMIT_LIMIT_HEADER", "LIMIT_REMAINING_HEADER",
	"LIMIT_RESET_HEADER", "LIMIT_RESPONSE_HEADERS_ENABLED", "LOCAL_CACHE_SIZE_IN_BYTES", "LOG_FORMAT",
	"LOG_LEVEL", "MEMCACHE_HOST_PORT", "MEMCACHE_MAX_IDLE_CONNS", "MEMCACHE_SRV",
	"MEMCACHE_SRV_REFRESH", "MEMCACHE_TLS", "MEMCACHE_TLS_CACERT", "MEMCACHE_TLS_CLIENT_CERT",
	"MEMCACHE_TLS_CLIENT_KEY", "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION", "MERGE_DOMAIN_CONFIG",
	"NEAR_LIMIT_RATIO", "PORT", "PROMETHEUS_ADDR", "PROMETHEUS_MAPPER_YAML", "PROMETHEUS_PATH",
	"PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", "QUOTA_MODE", "REDIS_AUTH",
	"REDIS_CLUSTER_PIPELINE_PARALLELISM", "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "REDIS_PERSECOND",
	"REDIS_PERSECOND_AUTH", "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
	"REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND_PIPELINE_WINDOW",
	"REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR", "REDIS_PERSECOND_POOL_SIZE",
	"REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND_TIMEOUT",
	"REDIS_PERSECOND_TLS", "REDIS_PERSECOND_TYPE", "REDIS_PERSECOND_URL", "REDIS_PIPELINE_LIMIT",
	"REDIS_PIPELINE_WINDOW", "REDIS_POOL_ON_EMPTY_BEHAVIOR", "REDIS_POOL_SIZE", "REDIS_SENTINEL_AUTH",
	"REDIS_SOCKET_TYPE", "REDIS_STARTUP_INITIAL_INTERVAL", "REDIS_STARTUP_MAX_ELAPSED_TIME",
	"REDIS_STARTUP_MAX_INTERVAL", "REDIS_TIMEOUT", "REDIS_TLS", "REDIS_TLS_CACERT",
	"REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY", "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
	"REDIS_TYPE", "REDIS_URL", "RESPONSE_DYNAMIC_METADATA", "RUNTIME_APPDIRECTORY",
	"RUNTIME_IGNOREDOTFILES", "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_WATCH_ROOT",
	"SHADOW_MODE", "STATSD_HOST", "STATSD_PORT", "STATS_FLUSH_INTERVAL",
	"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "TRACING_ENABLED", "TRACING_EXPORTER_PROTOCOL",
	"TRACING_SAMPLING_RATE", "TRACING_SERVICE_INSTANCE_ID", "TRACING_SERVICE_NAME",
	"TRACING_SERVICE_NAMESPACE", "USE_DOG_STATSD", "USE_DOG_STATSD_MOGRIFIERS", "USE_PROMETHEUS",
	"USE_STATSD", "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "XDS_CLIENT_BACKOFF_JITTER",
	"XDS_CLIENT_BACKOFF_MAX_INTERVAL", "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
	"XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "GRPC_SERVER_TLS_CA_CERT",
}

// misspelled stops at a variable that is none of envoyproxy/ratelimit's
// but one edit from one of them (two for a name of ten letters or more):
// a misspelling, which envoyproxy/ratelimit would have read as unset, and
// so would this service, silently (REDIS_UR: no Redis). Every other
// variable of the environment is someone else's and let be, as are
// Kubernetes' service links (NAME_PORT, NAME_SERVICE_HOST, …).
// UNKEY_ALLOW_UNKNOWN_SETTINGS=true lets these be too.
func (t *translation) misspelled() error {
	if ok, _ := strconv.ParseBool(t.env["UNKEY_ALLOW_UNKNOWN_SETTINGS"]); ok {
		return nil
	}
	var names []string
	for k := range t.env {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		if slices.Contains(upstreamNames, k) || strings.HasPrefix(k, "UNKEY_") || strings.HasPrefix(k, "OTEL_") || envconfig.ServiceLink(k, t.env[k]) {
			continue
		}
		if near, ok := spelling.Near(k, upstreamNames); ok {
			return fmt.Errorf("%s: envoyproxy/ratelimit reads no such variable; did you mean %s? (UNKEY_ALLOW_UNKNOWN_SETTINGS=true starts anyway)", k, near)
		}
	}
	return nil
}

// refused stops at a variable this service cannot honour.
func (t *translation) refused() error {
	for _, r := range []struct{ name, why string }{
		{"USE_STATSD", "this service publishes its metrics to Prometheus (USE_PROMETHEUS), not to statsd"},
		{"USE_DOG_STATSD", "this service publishes its metrics to Prometheus (USE_PROMETHEUS), not to DogStatsD"},
		{"REDIS_PERSECOND", "one Redis serves every window here; per-second limits cannot have a Redis of their own"},
		{"MERGE_DOMAIN_CONFIG", "a domain is defined once here; configurations of one domain are not merged"},
		{"QUOTA_MODE", "quota mode is a rule's here (quota_mode on its descriptor), not the whole service's"},
	} {
		on, err := t.flag(r.name)
		if err != nil {
			return err
		}
		if on {
			return fmt.Errorf("%s=true: not supported: %s", r.name, r.why)
		}
	}
	for _, r := range []struct{ name, why string }{
		{"GRPC_UDS", "the gRPC server listens on TCP (GRPC_HOST, GRPC_PORT)"},
		{"GRPC_CLIENT_TLS_SAN", "a client certificate is checked against its CA (GRPC_SERVER_TLS_CA_CERT), not a name"},
		{"CONFIG_GRPC_XDS_NODE_METADATA", "the xDS node is named by CONFIG_GRPC_XDS_NODE_ID alone"},
		{"CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "the xDS stream carries no headers of its own"},
		{"REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "the Redis server's certificate is always checked, its name included"},
		{"REDIS_SENTINEL_AUTH", "Redis Sentinel is not supported (REDIS_TYPE single or cluster)"},
	} {
		if t.val(r.name) != "" && t.val(r.name) != "false" {
			return fmt.Errorf("%s: not supported: %s", r.name, r.why)
		}
	}
	if b := strings.ToLower(t.get("BACKEND_TYPE", "redis")); b != "redis" {
		return fmt.Errorf("BACKEND_TYPE=%s: not supported: the counters live in local memory, shared through Redis (and MySQL across regions)", b)
	}
	return nil
}

// addr joins a host variable and a port variable, checking the port.
func (t *translation) addr(hostVar, hostDef, portVar, portDef string) (string, error) {
	port := t.get(portVar, portDef)
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("%s: must be a port number (0 to 65535), got %q", portVar, port)
	}
	return net.JoinHostPort(t.get(hostVar, hostDef), port), nil
}

// listeners: the HTTP port (health check, /json, the API), the gRPC port
// Envoy calls, the debug port where one is asked for.
func (t *translation) listeners() error {
	a, err := t.addr("HOST", "0.0.0.0", "PORT", "8080")
	if err != nil {
		return err
	}
	t.set("UNKEY_HTTP_ADDR", a, "HOST", "PORT")
	if a, err = t.addr("GRPC_HOST", "0.0.0.0", "GRPC_PORT", "8081"); err != nil {
		return err
	}
	t.set("UNKEY_GRPC_ADDR", a, "GRPC_HOST", "GRPC_PORT")
	if t.val("DEBUG_PORT") != "" {
		if a, err = t.addr("DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", "6070"); err != nil {
			return err
		}
		t.set("UNKEY_DEBUG_ADDR", a, "DEBUG_HOST", "DEBUG_PORT")
	}
	return nil
}

// grpcTLS: TLS on the gRPC port alone, mutual where a client CA is given.
// Envoy Gateway names its CA GRPC_SERVER_TLS_CA_CERT (which envoyproxy/
// ratelimit does not read, so that any TLS client is accepted there);
// here it is the client CA, as Envoy Gateway means it.
func (t *translation) grpcTLS() error {
	on, err := t.flag("GRPC_SERVER_USE_TLS")
	if err != nil || !on {
		return err
	}
	cert, key := t.val("GRPC_SERVER_TLS_CERT"), t.val("GRPC_SERVER_TLS_KEY")
	if cert == "" || key == "" {
		return fmt.Errorf("GRPC_SERVER_USE_TLS=true: needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
	}
	t.set("UNKEY_GRPC_TLS_CERT_FILE", cert, "GRPC_SERVER_TLS_CERT")
	t.set("UNKEY_GRPC_TLS_KEY_FILE", key, "GRPC_SERVER_TLS_KEY")
	if ca := t.get("GRPC_SERVER_TLS_CA_CERT", t.val("GRPC_CLIENT_TLS_CACERT")); ca != "" {
		t.set("UNKEY_GRPC_TLS_CLIENT_CA_FILE", ca, "GRPC_SERVER_TLS_CA_CERT", "GRPC_CLIENT_TLS_CACERT")
	}
	return nil
}

// rules: files under the runtime directory, or xDS.
func (t *translation) rules() error {
	switch typ := strings.ToUpper(t.get("CONFIG_TYPE", "FILE")); typ {
	case "FILE":
		dir := path.Join(t.get("RUNTIME_ROOT", "/srv/runtime_data/current"), t.val("RUNTIME_SUBDIRECTORY"),
			t.get("RUNTIME_APPDIRECTORY", "config"))
		t.set("UNKEY_RLS_CONFIG", dir, "RUNTIME_ROOT", "RUNTIME_SUBDIRECTORY", "RUNTIME_APPDIRECTORY")
	case "GRPC_XDS_SOTW":
		t.set("UNKEY_RLS_XDS_SERVER", t.get("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000"), "CONFIG_GRPC_XDS_SERVER_URL")
		t.set("UNKEY_RLS_XDS_NODE_ID", t.get("CONFIG_GRPC_XDS_NODE_ID", "default"), "CONFIG_GRPC_XDS_NODE_ID")
		tls, err := t.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS")
		if err != nil {
			return err
		}
		if tls {
			t.set("UNKEY_RLS_XDS_TLS", "true", "CONFIG_GRPC_XDS_SERVER_USE_TLS")
			for _, m := range [][2]string{{"CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "UNKEY_RLS_XDS_CA_FILE"},
				{"CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "UNKEY_RLS_XDS_CERT_FILE"}, {"CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "UNKEY_RLS_XDS_KEY_FILE"},
				{"CONFIG_GRPC_XDS_SERVER_TLS_SAN", "UNKEY_RLS_XDS_SERVER_NAME"}} {
				if v := t.val(m[0]); v != "" {
					t.set(m[1], v, m[0])
				}
			}
		}
		force, err := t.flag("FORCE_START_WITHOUT_INITIAL_CONFIG")
		if err != nil {
			return err
		}
		if force {
			t.set("UNKEY_RLS_START_WITHOUT_CONFIG", "true", "FORCE_START_WITHOUT_INITIAL_CONFIG")
		}
	default:
		return fmt.Errorf("CONFIG_TYPE=%s: must be FILE or GRPC_XDS_SOTW", typ)
	}
	return nil
}

// redis: REDIS_URL is host:port (a comma-separated list for a cluster),
// over TCP, with TLS and a password or user:password where given.
//
// Without REDIS_URL there is no Redis (envoyproxy/ratelimit would dial its
// default Unix socket): each process then counts alone, unless
// UNKEY_REDIS_URL names one. What asks for a Redis this service cannot
// reach stops the start even then.
func (t *translation) redis() error {
	u := t.val("REDIS_URL")
	// Unix (the default) is refused where it is asked for, and where a
	// REDIS_URL would be reached by it.
	if socket := strings.ToLower(t.get("REDIS_SOCKET_TYPE", "unix")); socket != "tcp" && (u != "" || t.val("REDIS_SOCKET_TYPE") != "") {
		return fmt.Errorf("REDIS_SOCKET_TYPE=%s: not supported: Redis is reached over TCP (REDIS_SOCKET_TYPE=tcp, REDIS_URL=host:port)", socket)
	}
	if typ := strings.ToLower(t.val("REDIS_TYPE")); typ != "" && typ != "single" && typ != "cluster" {
		return fmt.Errorf("REDIS_TYPE=%s: not supported: single or cluster (Redis Sentinel is not)", typ)
	}
	tls, err := t.flag("REDIS_TLS")
	if err != nil {
		return err
	}
	if u == "" {
		if tls {
			return fmt.Errorf("REDIS_TLS=true: needs REDIS_URL (host:port): without it there is no Redis")
		}
		for _, k := range []string{"REDIS_AUTH", "REDIS_TLS_CACERT", "REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"} {
			if t.val(k) != "" {
				return fmt.Errorf("%s: needs REDIS_URL (host:port): without it there is no Redis", k)
			}
		}
		return nil
	}
	scheme := "redis"
	if tls {
		scheme = "rediss"
	}
	if strings.ToLower(t.val("REDIS_TYPE")) == "cluster" {
		scheme += "+cluster"
	}
	hosts := strings.Split(u, ",")
	for _, h := range hosts {
		// The port a number: what follows it (a query's options, such as
		// skip_verify) would reach the Redis URL, whose certificate
		// checks REDIS_TLS keeps on.
		_, port, err := net.SplitHostPort(h)
		if n, perr := strconv.ParseUint(port, 10, 16); err != nil || perr != nil || n == 0 {
			return fmt.Errorf("REDIS_URL: must be host:port (a comma-separated list for a cluster; no options), got %q", u)
		}
	}
	if len(hosts) > 1 && !strings.HasSuffix(scheme, "+cluster") {
		return fmt.Errorf("REDIS_URL: several hosts need REDIS_TYPE=cluster, got %q", u)
	}
	userinfo := ""
	if auth := t.val("REDIS_AUTH"); auth != "" {
		if user, pass, ok := strings.Cut(auth, ":"); ok {
			userinfo = url.UserPassword(user, pass).String() + "@"
		} else {
			userinfo = url.UserPassword("", auth).String() + "@"
		}
	}
	t.set("UNKEY_REDIS_URL", scheme+"://"+userinfo+strings.Join(hosts, ","), "REDIS_URL", "REDIS_TYPE", "REDIS_TLS", "REDIS_AUTH")
	for _, m := range [][2]string{{"REDIS_TLS_CACERT", "UNKEY_REDIS_TLS_CA_FILE"}, {"REDIS_TLS_CLIENT_CERT", "UNKEY_REDIS_TLS_CERT_FILE"},
		{"REDIS_TLS_CLIENT_KEY", "UNKEY_REDIS_TLS_KEY_FILE"}} {
		if v := t.val(m[0]); v != "" {
			if !tls {
				return fmt.Errorf("%s: needs REDIS_TLS=true", m[0])
			}
			t.set(m[1], v, m[0])
		}
	}
	return nil
}

// metrics: Prometheus on its own address, as there.
func (t *translation) metrics() error {
	on, err := t.flag("USE_PROMETHEUS")
	if err != nil || !on {
		return err
	}
	if p := t.get("PROMETHEUS_PATH", "/metrics"); p != "/metrics" {
		return fmt.Errorf("PROMETHEUS_PATH=%s: not supported: the metrics are served at /metrics", p)
	}
	addr := t.get("PROMETHEUS_ADDR", ":9090")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("PROMETHEUS_ADDR: must be [host]:port, got %q", addr)
	}
	t.set("UNKEY_METRICS_ADDR", addr, "PROMETHEUS_ADDR")
	return nil
}

// logs: envoyproxy/ratelimit's levels (logrus's) onto slog's four.
func (t *translation) logs() error {
	if v := t.val("LOG_LEVEL"); v != "" {
		level, ok := map[string]string{"trace": "debug", "debug": "debug", "info": "info", "warn": "warn", "warning": "warn",
			"error": "error", "fatal": "error", "panic": "error"}[strings.ToLower(v)]
		if !ok {
			return fmt.Errorf("LOG_LEVEL: must be trace, debug, info, warn, error, fatal or panic, got %q", v)
		}
		t.set("UNKEY_LOG_LEVEL", level, "LOG_LEVEL")
	}
	if v := strings.ToLower(t.val("LOG_FORMAT")); v != "" {
		if v != "json" && v != "text" {
			return fmt.Errorf("LOG_FORMAT: must be json or text, got %q", t.val("LOG_FORMAT"))
		}
		t.set("UNKEY_LOG_FORMAT", v, "LOG_FORMAT")
	}
	return nil
}

// tracing: TRACING_* onto OpenTelemetry's standard variables, which this
// service reads; without TRACING_ENABLED nothing is traced, as there.
func (t *translation) tracing() error {
	on, err := t.flag("TRACING_ENABLED")
	if err != nil {
		return err
	}
	if !on {
		t.set("OTEL_TRACES_EXPORTER", "none")
		return nil
	}
	t.set("OTEL_SERVICE_NAME", t.get("TRACING_SERVICE_NAME", "RateLimit"))
	var attrs []string
	for _, m := range [][2]string{{"TRACING_SERVICE_NAMESPACE", "service.namespace"}, {"TRACING_SERVICE_INSTANCE_ID", "service.instance.id"}} {
		if v := t.val(m[0]); v != "" {
			attrs = append(attrs, m[1]+"="+escapeAttribute(v))
		}
	}
	if len(attrs) > 0 {
		t.set("OTEL_RESOURCE_ATTRIBUTES", strings.Join(attrs, ","))
	}
	if r := t.val("TRACING_SAMPLING_RATE"); r != "" {
		if f, err := strconv.ParseFloat(r, 64); err != nil || !(f >= 0 && f <= 1) { // NaN too
			return fmt.Errorf("TRACING_SAMPLING_RATE: must be a number from 0 to 1, got %q", r)
		}
		t.set("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
		t.set("OTEL_TRACES_SAMPLER_ARG", r)
	}
	switch p := strings.ToLower(t.get("TRACING_EXPORTER_PROTOCOL", "http")); p {
	case "http":
		t.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	case "grpc":
		t.set("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	default:
		return fmt.Errorf("TRACING_EXPORTER_PROTOCOL: must be http or grpc, got %q", p)
	}
	t.set("OTEL_TRACES_EXPORTER", "otlp")
	return nil
}

// envoy: the rate limit service's own behaviour.
func (t *translation) envoy() error {
	for _, m := range [][2]string{{"SHADOW_MODE", "UNKEY_RLS_SHADOW_MODE"}, {"LIMIT_RESPONSE_HEADERS_ENABLED", "UNKEY_RLS_RESPONSE_HEADERS"},
		{"RESPONSE_DYNAMIC_METADATA", "UNKEY_RLS_RESPONSE_DYNAMIC_METADATA"}} {
		on, err := t.flag(m[0])
		if err != nil {
			return err
		}
		if on {
			t.set(m[1], "true", m[0])
		}
	}
	stop, err := t.flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	if err != nil {
		return err
	}
	if stop {
		t.set("UNKEY_RLS_COUNT_OVER_LIMIT", "false", "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT")
	}
	for _, m := range [][2]string{{"NEAR_LIMIT_RATIO", "UNKEY_RLS_NEAR_LIMIT_RATIO"}, {"LIMIT_LIMIT_HEADER", "UNKEY_RLS_LIMIT_HEADER"},
		{"LIMIT_REMAINING_HEADER", "UNKEY_RLS_REMAINING_HEADER"}, {"LIMIT_RESET_HEADER", "UNKEY_RLS_RESET_HEADER"}} {
		if v := t.val(m[0]); v != "" {
			t.set(m[1], v, m[0])
		}
	}
	return nil
}

// escapeAttribute percent-encodes a value of OTEL_RESOURCE_ATTRIBUTES:
// every byte but the unreserved ones (letters, digits, '-', '.', '_',
// '~'), so that ',' and '=' do not split it and a space stays a space.
func escapeAttribute(v string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
