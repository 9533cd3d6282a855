package daemon

import (
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Tokens of UNKEY_AUTH_TOKENS: at least 16 characters, as the server
// requires.
const (
	tokA = "tok_a_0123456789abcdef"
	tokB = "tok_b_0123456789abcdef"
)

func TestLoadConfigDefaults(t *testing.T) {
	c, err := LoadConfig([]string{"UNKEY_REGION=local"})
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPAddr != ":7070" || c.Log.Format != "json" || c.Log.Level != "info" || len(c.tokens) != 0 {
		t.Fatalf("defaults = %+v", c)
	}
	if c.GlobalFlushInterval != ratelimit.DefaultGlobalFlushInterval || c.GlobalFullFlushInterval != ratelimit.DefaultGlobalFullFlushInterval ||
		c.GlobalSyncInterval != ratelimit.DefaultGlobalSyncInterval || c.OverridesPollInterval != overrides.DefaultPollInterval ||
		c.DecodeBudgetBytes != transport.DefaultBudget {
		t.Fatalf("the environment's defaults differ from the packages': %+v", c)
	}
}

func TestLoadConfigErrorsNameTheVariable(t *testing.T) {
	cases := []struct {
		env  []string
		want string
	}{
		{nil, `UNKEY_REGION`},
		{[]string{"UNKEY_REGION=" + strings.Repeat("r", 49)}, "UNKEY_REGION: must be 1 to 48"},
		{[]string{"UNKEY_REGION=us east"}, "UNKEY_REGION: must be 1 to 48"},
		{[]string{"UNKEY_REGION=r", "UNKEY_LOG_LEVEL=loud"}, "UNKEY_LOG_LEVEL: must be debug, info, warn or error"},
		{[]string{"UNKEY_REGION=r", "UNKEY_LOG_FORMAT=xml"}, "UNKEY_LOG_FORMAT: must be json or text"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS=abc"}, "UNKEY_AUTH_TOKENS: entry 1 must be token=workspace_id"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS=" + tokA + "=ws,=ws2"}, "UNKEY_AUTH_TOKENS: entry 2 must be token=workspace_id"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS=" + tokA + "=ws,ws2="}, "UNKEY_AUTH_TOKENS: entry 2 must be token=workspace_id"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS=" + tokA + "=ws," + tokA + "=ws2"}, "UNKEY_AUTH_TOKENS: entry 2 repeats a token"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS=" + tokA + "=" + strings.Repeat("w", 192)}, "UNKEY_AUTH_TOKENS: entry 1: workspace must be 1 to 191"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS=short=ws"}, "UNKEY_AUTH_TOKENS: entry 1: token must be at least 16 characters, got 5"},
		{[]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=http://x"}, "UNKEY_REDIS_URL: must be a redis:// or rediss:// URL"},
		{[]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=redis://x:notaport"}, "UNKEY_REDIS_URL: must be a redis:// or rediss:// URL"},
		{[]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=redis+cluster://a:1,,b:2"}, "UNKEY_REDIS_URL: must be redis+cluster://host:port[,host:port...]"},
		{[]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=redis://a:1", "UNKEY_REDIS_TLS_CA_FILE=/ca.pem"}, "need a rediss:// or rediss+cluster:// UNKEY_REDIS_URL"},
		{[]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=rediss://a:1", "UNKEY_REDIS_TLS_CA_FILE=/nonexistent.pem"}, "UNKEY_REDIS_TLS_CA_FILE: open /nonexistent.pem"},
		{[]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=rediss://a:1", "UNKEY_REDIS_TLS_CERT_FILE=/c.pem"}, "UNKEY_REDIS_TLS_CERT_FILE and UNKEY_REDIS_TLS_KEY_FILE: must be set together"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_CONFIG=/r", "UNKEY_RLS_XDS_SERVER=x:1"}, "UNKEY_RLS_XDS_SERVER and UNKEY_RLS_CONFIG: the rules come from files or from xDS, not both"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_XDS_SERVER=x"}, `UNKEY_RLS_XDS_SERVER: must be host:port, got "x"`},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_START_WITHOUT_CONFIG=true"}, "UNKEY_RLS_START_WITHOUT_CONFIG: needs UNKEY_RLS_XDS_SERVER"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_XDS_SERVER=x:1", "UNKEY_RLS_XDS_CA_FILE=/ca"}, "need UNKEY_RLS_XDS_TLS=true"},
		{[]string{"UNKEY_REGION=r", "UNKEY_GRPC_TLS_CERT_FILE=/c", "UNKEY_GRPC_TLS_KEY_FILE=/k"}, "UNKEY_GRPC_TLS_CERT_FILE: needs UNKEY_GRPC_ADDR"},
		{[]string{"UNKEY_REGION=r", "UNKEY_GRPC_ADDR=:1", "UNKEY_GRPC_TLS_CLIENT_CA_FILE=/ca"}, "UNKEY_GRPC_TLS_CLIENT_CA_FILE: needs UNKEY_GRPC_TLS_CERT_FILE"},
		{[]string{"UNKEY_REGION=r", "UNKEY_GLOBAL_SYNC_INTERVAL=10ms"}, "UNKEY_GLOBAL_SYNC_INTERVAL: must be between 100ms and 1h, got 10ms"},
		{[]string{"UNKEY_REGION=r", "UNKEY_GLOBAL_FLUSH_INTERVAL=2h"}, "UNKEY_GLOBAL_FLUSH_INTERVAL: must be between 100ms and 1h, got 2h0m0s"},
		{[]string{"UNKEY_REGION=r", "UNKEY_GLOBAL_FLUSH_INTERVAL=5s", "UNKEY_GLOBAL_FULL_FLUSH_INTERVAL=2s"},
			"UNKEY_GLOBAL_FULL_FLUSH_INTERVAL: must be at least UNKEY_GLOBAL_FLUSH_INTERVAL (5s), got 2s"},
		{[]string{"UNKEY_REGION=r", "UNKEY_DECODE_BUDGET_BYTES=4096"}, "UNKEY_DECODE_BUDGET_BYTES: must be between 1048576 (one request of the largest size) and 17179869184, got 4096"},
		{[]string{"UNKEY_REGION=r", "UNKEY_TLS_CERT_FILE=c.pem"}, "UNKEY_TLS_CERT_FILE and UNKEY_TLS_KEY_FILE: must be set together"},
		{[]string{"UNKEY_REGION=r", "UNKEY_TLS_CLIENT_CA_FILE=ca.pem"}, "UNKEY_TLS_CLIENT_CA_FILE: needs UNKEY_TLS_CERT_FILE"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RESERVATION_SECRET=short"}, "UNKEY_RESERVATION_SECRET: must be at least 32 bytes"},
		{[]string{"UNKEY_REGION=r", "UNKEY_GRPC_MAX_CONNECTIONS=0"}, "UNKEY_GRPC_MAX_CONNECTIONS: must be between 1 and 1000000"},
		// Every float refuses NaN and the infinities.
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_NEAR_LIMIT_RATIO=NaN"}, "UNKEY_RLS_NEAR_LIMIT_RATIO: must be between 0 and 1"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_NEAR_LIMIT_RATIO=+Inf"}, "UNKEY_RLS_NEAR_LIMIT_RATIO: must be between 0 and 1"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUDIT_CHANGES_PER_SECOND=NaN"}, "UNKEY_AUDIT_CHANGES_PER_SECOND: must be between 0.01 and 10000"},
		{[]string{"UNKEY_REGION=r", "UNKEY_AUDIT_CHANGES_PER_SECOND=Inf"}, "UNKEY_AUDIT_CHANGES_PER_SECOND: must be between 0.01 and 10000"},
		// The rules' bounds and calendar units.
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_MAX_DEPTH=33"}, "UNKEY_RLS_MAX_DEPTH: must be between 1 and 32, got 33"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_MAX_DESCRIPTORS=0"}, "UNKEY_RLS_MAX_DESCRIPTORS: must be at least 1"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_MAX_RULES_BYTES=1000"}, "UNKEY_RLS_MAX_RULES_BYTES: must be between 1048576 and 17179869184"},
		{[]string{"UNKEY_REGION=r", "UNKEY_RLS_TIME_ZONE=Mars/Olympus"}, `UNKEY_RLS_TIME_ZONE: must be a time zone of the IANA database (such as Europe/Berlin) or UTC, got "Mars/Olympus"`},
	}
	for _, tc := range cases {
		_, err := LoadConfig(tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadConfig(%q) = %v, want an error containing %q", tc.env, err, tc.want)
		}
	}
}

func TestLoadConfigRedisCluster(t *testing.T) {
	c, err := LoadConfig([]string{"UNKEY_REGION=r", "UNKEY_REDIS_URL=redis+cluster://10.0.0.1:7000,10.0.0.2:7000"})
	if err != nil {
		t.Fatal(err)
	}
	if c.redis != nil || c.redisCluster == nil || len(c.redisCluster.Addrs) != 2 {
		t.Fatalf("redis %v, cluster %+v; want a cluster with two seeds", c.redis, c.redisCluster)
	}
}

func TestTokens(t *testing.T) {
	// A base64 token may end in "=" padding: entries split at the last "=".
	const padded = "c2VjcmV0LXRva2VuLXdpdGgtcGFk=="
	c, err := LoadConfig([]string{"UNKEY_REGION=r", "UNKEY_AUTH_TOKENS= " + tokA + "=ws_a , " + tokB + "=ws_b," + padded + "=ws_c",
		"UNKEY_LOG_LEVEL=debug", "UNKEY_LOG_FORMAT=text"})
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{tokA: "ws_a", tokB: "ws_b", padded: "ws_c"} {
		pr, err := c.tokens.Principal(token)
		if err != nil || pr.Workspace != want {
			t.Fatalf("principal(%q) = %q, %v; want %q", token, pr.Workspace, err, want)
		}
		// A token of UNKEY_AUTH_TOKENS may do everything in its workspace.
		if !pr.Permissions.Has(access.ManageKeys) || !pr.Permissions.Allows(access.SetOverride, "any") {
			t.Fatalf("token %q lacks permissions: %v", token, pr.Permissions.Names())
		}
	}
	for _, prefix := range []string{tokA[:len(tokA)-1], strings.TrimRight(padded, "=")} {
		if _, err := c.tokens.Principal(prefix); err == nil {
			t.Fatalf("a prefix of a token was accepted: %q", prefix)
		}
	}
}

// TestSettingsHaveHelpAndTheirDefaults: every setting has help, and the
// default --help shows for it is the value the program uses when its
// variable is unset, parsed as the program parses it; the OTEL_* section
// likewise. (What the binary prints is held in e2e/TestHelp.)
func TestSettingsHaveHelpAndTheirDefaults(t *testing.T) {
	if n := len(envconfig.Settings(Config{})); n < 30 {
		t.Fatalf("%d settings: the walk missed fields", n)
	}
	if err := envconfig.CheckUsage("", Config{}, []envconfig.Section{telemetry.Settings(TracingService)}); err != nil {
		t.Error(err)
	}
}
