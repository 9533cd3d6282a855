package e2e

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
	"github.com/unkeyed/ratelimit/internal/testkit/xdsserver"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Envoy Gateway's rate limit deployment, as its infrastructure code
// (internal/infrastructure/kubernetes/ratelimit/resource.go) writes it:
// the container runs /bin/ratelimit with this environment, one
// certificate, key and CA under /certs for the gRPC server (mutual TLS
// with Envoy) and the xDS client alike; the kubelet probes GET
// /healthcheck on 8080 and Envoy calls gRPC on 8081. Paths and ports are
// the test's.

// ratelimitBinary links the API binary as "ratelimit" (as the image's
// /bin/ratelimit), so that it starts with envoyproxy/ratelimit's
// environment.
func ratelimitBinary(t *testing.T) string {
	t.Helper()
	link := filepath.Join(t.TempDir(), "ratelimit")
	if err := os.Symlink(filepath.Join(bin, "api"), link); err != nil {
		t.Fatal(err)
	}
	return link
}

// gatewayCerts writes Envoy Gateway's /certs (tls.crt, tls.key, ca.crt)
// under dir: one certificate, for serving and as a client.
func gatewayCerts(t *testing.T, ca *testserver.CA, dir string) string {
	t.Helper()
	certs := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certs, 0o755); err != nil {
		t.Fatal(err)
	}
	cert, key := ca.IssueServerAndClient(t, certs, 10)
	for from, to := range map[string]string{cert: "tls.crt", key: "tls.key"} {
		if err := os.Rename(from, filepath.Join(certs, to)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(certs, "ca.crt"), ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return certs
}

// tlsClient returns TLS credentials from a certificate the CA issued to a
// client (nil: none presented), trusting the CA.
func tlsClient(t *testing.T, ca *testserver.CA, withCert bool) credentials.TransportCredentials {
	t.Helper()
	c := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if withCert {
		certFile, keyFile := ca.Issue(t, t.TempDir(), 20, true)
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(c)
}

// route is Envoy Gateway's top descriptor of an HTTPRoute's rule: its key
// and value both the route's name.
const route = "httproute/default/backend/rule/0/match/0/*"

func policy(n uint32, unit rlsconfv3.RateLimitUnit) *rlsconfv3.RateLimitPolicy {
	return &rlsconfv3.RateLimitPolicy{RequestsPerUnit: n, Unit: unit}
}

// gatewayRules is what Envoy Gateway's translator pushes for a listener
// with a BackendTrafficPolicy of three rules: perUser requests a minute
// for each x-user-id (a distinct match: a key without a value), a monthly
// quota for each x-tenant (MONTH, unit 5), and a shadow rule for every
// client address (masked_remote_address, shadow_mode on its chain); and a
// fourth, as a management server of one's own would push it, a token
// bucket of one an hour with bursts of two for each x-api-key, its model
// in the descriptor's metadata (rlsconfig.ModelMetadataKey).
func gatewayRules(domain string, perUser uint32) *rlsconfv3.RateLimitConfig {
	bucket, err := structpb.NewStruct(map[string]any{rlsconfig.ModelMetadataKey: map[string]any{"algorithm": "token_bucket", "burst": 2}})
	if err != nil {
		panic(err)
	}
	return &rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: route, Value: route, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0-match-0", RateLimit: policy(perUser, rlsconfv3.RateLimitUnit_MINUTE)},
			{Key: "rule-3-match-0", RateLimit: policy(1, rlsconfv3.RateLimitUnit_HOUR), Metadata: bucket},
			{Key: "rule-1-match-0", RateLimit: policy(1000, 5)},
			{Key: "rule-2-match-0", Value: "rule-2-match-0", ShadowMode: true, Descriptors: []*rlsconfv3.RateLimitDescriptor{
				{Key: "masked_remote_address", Value: "0.0.0.0/0", ShadowMode: true, Descriptors: []*rlsconfv3.RateLimitDescriptor{
					{Key: "remote_address", ShadowMode: true, RateLimit: policy(1, rlsconfv3.RateLimitUnit_HOUR)}}}}},
		}}}}
}

// userRequest is Envoy's request for a call of user: the route's
// descriptor with the user's header.
func userRequest(domain, user string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{
		rlscall.Desc(route, route, "rule-0-match-0", user)}}
}

// TestBehindEnvoyGateway runs the image as Envoy Gateway deploys
// envoyproxy/ratelimit: its environment, its /certs, rules from a
// go-control-plane management server over mutual TLS, Envoy's calls over
// mutual TLS, Prometheus on 19001's stand-in. It starts before any rules
// (FORCE_START_WITHOUT_INITIAL_CONFIG: OK to everything), takes the
// pushed rules, refuses a broken snapshot while keeping the rules, keeps
// them while the management server is away and takes the next once it is
// back.
func TestBehindEnvoyGateway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testserver.NewCA(t)
	certs := gatewayCerts(t, ca, dir)
	redis := testserver.StartRedis(t)

	// Envoy Gateway's xDS server: TLS 1.3, client certificates required.
	xdsCert, xdsKey := ca.Issue(t, t.TempDir(), 2, false)
	xdsPair, err := tls.LoadX509KeyPair(xdsCert, xdsKey)
	if err != nil {
		t.Fatal(err)
	}
	xds := xdsserver.Start(t, "envoy-ratelimit", xdsserver.WithCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{xdsPair}, ClientCAs: ca.Pool(), ClientAuth: tls.RequireAndVerifyClientCert,
		MinVersion: tls.VersionTLS13})))

	grpcPort, metricsPort := testserver.FreePort(t), testserver.FreePort(t)
	p := &proc{t: t, name: "ratelimit", region: "default", binary: ratelimitBinary(t), log: filepath.Join(dir, "ratelimit.log")}
	t.Cleanup(p.kill)
	p.startOnFreePort(func(port int) []string {
		return []string{
			"RUNTIME_ROOT=" + filepath.Join(dir, "data"), "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_IGNOREDOTFILES=true",
			"RUNTIME_WATCH_ROOT=false", "LOG_LEVEL=info", "USE_STATSD=false",
			"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr(), "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
			"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + certs + "/tls.crt", "GRPC_SERVER_TLS_KEY=" + certs + "/tls.key",
			"GRPC_SERVER_TLS_CA_CERT=" + certs + "/ca.crt",
			"CONFIG_GRPC_XDS_SERVER_USE_TLS=true", "CONFIG_GRPC_XDS_CLIENT_TLS_CERT=" + certs + "/tls.crt",
			"CONFIG_GRPC_XDS_CLIENT_TLS_KEY=" + certs + "/tls.key", "CONFIG_GRPC_XDS_SERVER_TLS_CACERT=" + certs + "/ca.crt",
			"FORCE_START_WITHOUT_INITIAL_CONFIG=true",
			"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + redis.Addr,
			"USE_PROMETHEUS=true", "PROMETHEUS_ADDR=127.0.0.1:" + strconv.Itoa(metricsPort),
			"PROMETHEUS_MAPPER_YAML=/etc/statsd-exporter/conf.yaml",
			// The test's ports for 8080 and 8081, on loopback.
			"HOST=127.0.0.1", "PORT=" + strconv.Itoa(port), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort),
		}
	})
	if code := get(p.url() + "/healthcheck"); code != http.StatusOK {
		t.Fatalf("GET /healthcheck before any rules, with FORCE_START_WITHOUT_INITIAL_CONFIG: %d, want 200", code)
	}

	// Envoy: gRPC over mutual TLS.
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(tlsClient(t, ca, true)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	envoy := rlsv3.NewRateLimitServiceClient(conn)
	const domain = "default/eg/http"
	ask := func(user string) rlsStatus {
		t.Helper()
		resp, err := envoy.ShouldRateLimit(context.Background(), userRequest(domain, user))
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.Statuses[0])
	}
	if got := ask("alice"); got != (rlsStatus{}) {
		t.Fatalf("before any rules: %+v, want OK without a limit", got)
	}
	// A client without a certificate from the CA is refused.
	anon, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(grpcPort), grpc.WithTransportCredentials(tlsClient(t, ca, false)))
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if _, err := rlsv3.NewRateLimitServiceClient(anon).ShouldRateLimit(context.Background(), userRequest(domain, "alice")); status.Code(err) != codes.Unavailable {
		t.Fatalf("a client without a certificate: %v, want the handshake refused (Unavailable)", err)
	}

	v1 := xds.Push(gatewayRules(domain, 3))
	start := time.Now()
	poll.Until(t, 5*time.Second, "the first snapshot in force", func() bool { return ask("bob").Limit == 3 })
	t.Logf("version %s in force %s after it was pushed", v1, time.Since(start).Round(time.Millisecond))
	// The poll counted bob's first call.
	for i, want := range []rlsStatus{{false, 3, "MINUTE", 1}, {false, 3, "MINUTE", 0}, {true, 3, "MINUTE", 0}} {
		if got := ask("bob"); got != want {
			t.Fatalf("bob's call %d: %+v, want %+v", i+2, got, want)
		}
	}
	// The monthly quota (MONTH: 30 days) and the shadow rule, answered OK
	// over its limit.
	resp, err := envoy.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{
		rlscall.Desc(route, route, "rule-1-match-0", "tenant-a"),
		rlscall.Desc(route, route, "rule-2-match-0", "rule-2-match-0", "masked_remote_address", "0.0.0.0/0", "remote_address", "10.0.0.1"),
		rlscall.Desc(route, route, "rule-2-match-0", "rule-2-match-0", "masked_remote_address", "0.0.0.0/0", "remote_address", "10.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := statusOf(resp.Statuses[0]); resp.OverallCode != rlsv3.RateLimitResponse_OK || got != (rlsStatus{false, 1000, "MONTH", 999}) ||
		statusOf(resp.Statuses[2]).Over {
		t.Fatalf("quota and shadow rule: overall %v, %+v", resp.OverallCode, resp.Statuses)
	}

	// The token bucket pushed in the metadata: its burst of two, then
	// over until a token refills.
	for i, want := range []rlsStatus{{false, 1, "HOUR", 1}, {false, 1, "HOUR", 0}, {true, 1, "HOUR", 0}} {
		resp, err := envoy.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc(route, route, "rule-3-match-0", "key-1")}})
		if err != nil {
			t.Fatal(err)
		}
		if got := statusOf(resp.Statuses[0]); got != want {
			t.Fatalf("the bucket's call %d: %+v, want %+v", i+1, got, want)
		}
	}

	// A new snapshot: in force at once.
	v2 := xds.Push(gatewayRules(domain, 5))
	start = time.Now()
	poll.Until(t, 5*time.Second, "version 2 in force", func() bool { return ask("carol").Limit == 5 })
	t.Logf("version %s in force %s after it was pushed", v2, time.Since(start).Round(time.Millisecond))

	// A broken one: refused with its error, the rules in force kept.
	bad := gatewayRules(domain, 7)
	bad.Descriptors[0].Descriptors = append(bad.Descriptors[0].Descriptors, bad.Descriptors[0].Descriptors[0])
	v3 := xds.Push(bad)
	poll.Until(t, 5*time.Second, "the NACK of version 3", func() bool { return xds.Refused(v2, "duplicate descriptor") })
	if got := ask("dave").Limit; got != 5 {
		t.Fatalf("after the refused version %s: limit %d, want version %s's 5", v3, got, v2)
	}

	// The management server killed: the rules stay; back with a new
	// snapshot: reconnected and in force.
	xds.Stop()
	time.Sleep(500 * time.Millisecond)
	if got := ask("erin").Limit; got != 5 {
		t.Fatalf("with the management server away: limit %d, want 5", got)
	}
	v4 := xds.Push(gatewayRules(domain, 9))
	xds.Restart()
	start = time.Now()
	poll.Until(t, 10*time.Second, "version 4 in force after the server came back", func() bool { return ask("frank").Limit == 9 })
	t.Logf("the management server back: version %s in force %s later", v4, time.Since(start).Round(time.Millisecond))

	// Prometheus on its own address, with envoyproxy/ratelimit's names as
	// Envoy Gateway's dashboards query them.
	metrics := getBody(t, "http://127.0.0.1:"+strconv.Itoa(metricsPort)+"/metrics")
	key1 := regexp.QuoteMeta(`key1="` + route + `_` + route + `"`)
	for _, want := range []string{
		`ratelimit_service_rate_limit_total_hits\{domain="default/eg/http",` + key1 + `,key2="rule-0-match-0"\} [1-9]`,
		`ratelimit_service_rate_limit_over_limit\{domain="default/eg/http",` + key1 + `,key2="rule-0-match-0"\} [1-9]`,
		`ratelimit_service_rate_limit_shadow_mode\{domain="default/eg/http",` + key1 + `,key2="rule-2-match-0_rule-2-match-0"\} 1\n`,
		`ratelimit_service_config_load_error 1\n`,
	} {
		if !regexp.MustCompile(want).MatchString(metrics) {
			t.Errorf("/metrics has nothing matching %s", want)
		}
	}
}

// TestWithoutForceStart: without FORCE_START_WITHOUT_INITIAL_CONFIG the
// process is not ready, and ShouldRateLimit is answered unavailable, until
// the first rules arrive; /healthcheck says what it waits for.
func TestWithoutForceStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	xds := xdsserver.Start(t, "envoy-ratelimit")
	grpcPort := testserver.FreePort(t)
	p := &proc{t: t, name: "ratelimit", region: "default", binary: ratelimitBinary(t), log: filepath.Join(dir, "ratelimit.log"), noWait: true}
	t.Cleanup(p.kill)
	p.startOnFreePort(func(port int) []string {
		return []string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr(), "CONFIG_GRPC_XDS_NODE_ID=envoy-ratelimit",
			"USE_STATSD=false", "HOST=127.0.0.1", "PORT=" + strconv.Itoa(port), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort)}
	})
	resp, err := http.Get(p.url() + "/healthcheck")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	// Without a token: what it waits for, not where (the management
	// server's address is the operator's).
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "waiting for the first rate limit configuration from the xDS management server") ||
		strings.Contains(string(body), xds.Addr()) {
		t.Fatalf("GET /healthcheck before any rules: %d %q", resp.StatusCode, body)
	}
	// With a token (any, on this server without keys: an operator's
	// permission), where it waits too.
	req, err := http.NewRequest(http.MethodGet, p.url()+"/healthcheck", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer operator-token-0123456789")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "at "+xds.Addr()) {
		t.Fatalf("GET /healthcheck with an operator's token before any rules: %d %q, want the address", resp.StatusCode, body)
	}
	conn := loopback.Dial(t, "127.0.0.1:"+strconv.Itoa(grpcPort))
	envoy := rlsv3.NewRateLimitServiceClient(conn)
	if _, err := envoy.ShouldRateLimit(context.Background(), userRequest("eg", "alice")); status.Code(err) != codes.Unavailable ||
		!strings.Contains(err.Error(), "no rate limit configuration yet") {
		t.Fatalf("ShouldRateLimit before any rules: %v, want unavailable", err)
	}
	// gRPC health checks say the same, on the gRPC port and the main one.
	health := func() [2]healthpb.HealthCheckResponse_ServingStatus {
		var out [2]healthpb.HealthCheckResponse_ServingStatus
		for i, c := range []*grpc.ClientConn{conn, loopback.Dial(t, strings.TrimPrefix(p.url(), "http://"))} {
			resp, err := healthpb.NewHealthClient(c).Check(context.Background(), &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			out[i] = resp.Status
		}
		return out
	}
	notServing := healthpb.HealthCheckResponse_NOT_SERVING
	if got := health(); got != [2]healthpb.HealthCheckResponse_ServingStatus{notServing, notServing} {
		t.Fatalf("gRPC health before any rules: %v, want NOT_SERVING on both ports", got)
	}
	xds.Push(gatewayRules("eg", 2))
	poll.Until(t, 5*time.Second, "ready once the rules arrived", func() bool { return get(p.url()+"/healthcheck") == http.StatusOK })
	serving := healthpb.HealthCheckResponse_SERVING
	poll.Until(t, 5*time.Second, "gRPC health serving on both ports", func() bool {
		return health() == [2]healthpb.HealthCheckResponse_ServingStatus{serving, serving}
	})
	r, err := envoy.ShouldRateLimit(context.Background(), userRequest("eg", "alice"))
	if err != nil || statusOf(r.Statuses[0]) != (rlsStatus{false, 2, "MINUTE", 1}) {
		t.Fatalf("after the rules: %v, %v", r, err)
	}
}

// TestBehindEnvoyAIGateway runs the two ways Envoy AI Gateway spends a
// token budget through the rate limit service.
//
// Token limits of a BackendTrafficPolicy (Envoy Gateway's deployment and
// rules): the request path checks with hits_addend 0, the response path
// (apply_on_stream_done) reports the tokens the response used as
// hits_addend, counted even past the limit, so that the next request's
// check is refused.
//
// QuotaPolicy (AI Gateway's own deployment: plaintext xDS from its
// controller to node envoy-ai-gateway-ratelimit, no forced start): domain
// ai-gateway-quota, backend_name then model_name_override, every leaf
// quota_mode; a request counts one on each backend's quota, the stream's
// end reports its cost, and the request is refused only once every
// backend's quota is spent.
func TestBehindEnvoyAIGateway(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	gateway := xdsserver.Start(t, "envoy-ratelimit")
	quotas := xdsserver.Start(t, "envoy-ai-gateway-ratelimit")
	start := func(name string, xds *xdsserver.Server, node string, extra ...string) rlsv3.RateLimitServiceClient {
		grpcPort := testserver.FreePort(t)
		p := &proc{t: t, name: name, region: "default", binary: ratelimitBinary(t), log: filepath.Join(dir, name+".log"), noWait: true}
		t.Cleanup(p.kill)
		p.startOnFreePort(func(port int) []string {
			return append([]string{"CONFIG_TYPE=GRPC_XDS_SOTW", "CONFIG_GRPC_XDS_SERVER_URL=" + xds.Addr(), "CONFIG_GRPC_XDS_NODE_ID=" + node,
				"USE_STATSD=false", "HOST=127.0.0.1", "PORT=" + strconv.Itoa(port), "GRPC_HOST=127.0.0.1", "GRPC_PORT=" + strconv.Itoa(grpcPort)},
				extra...)
		})
		return rlscall.Client(t, "127.0.0.1:"+strconv.Itoa(grpcPort))
	}

	// BackendTrafficPolicy token limits: 1,000 tokens an hour per tenant.
	envoy := start("eg-ratelimit", gateway, "envoy-ratelimit", "FORCE_START_WITHOUT_INITIAL_CONFIG=true")
	const domain = "default/eg/http"
	gateway.Push(&rlsconfv3.RateLimitConfig{Name: domain, Domain: domain, Descriptors: []*rlsconfv3.RateLimitDescriptor{{
		Key: route, Value: route, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "rule-0-match-0", RateLimit: policy(1000, rlsconfv3.RateLimitUnit_HOUR)}}}}})
	tokens := func(n uint64) rlsStatus {
		t.Helper()
		resp, err := envoy.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain,
			Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.WithHits(rlscall.Desc(route, route, "rule-0-match-0", "tenant-a"), n)}})
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.Statuses[0])
	}
	poll.Until(t, 5*time.Second, "the token rules in force", func() bool { return tokens(0).Limit == 1000 })
	for i, step := range []struct {
		hits uint64
		want rlsStatus
	}{
		{0, rlsStatus{false, 1000, "HOUR", 1000}},  // request path: a check
		{700, rlsStatus{false, 1000, "HOUR", 300}}, // response path: 700 tokens used
		{0, rlsStatus{false, 1000, "HOUR", 300}},
		{500, rlsStatus{true, 1000, "HOUR", 0}}, // 500 more: over, and counted
		{0, rlsStatus{true, 1000, "HOUR", 0}},   // the next request is refused
	} {
		if got := tokens(step.hits); got != step.want {
			t.Fatalf("step %d (hits %d): %+v, want %+v", i, step.hits, got, step.want)
		}
	}

	// QuotaPolicy: gpt-4 on two backends, 100 and 50 a minute.
	quota := start("ai-gateway-ratelimit", quotas, "envoy-ai-gateway-ratelimit")
	leaf := func(backend string, n uint32) *rlsconfv3.RateLimitDescriptor {
		return &rlsconfv3.RateLimitDescriptor{Key: "backend_name", Value: backend, Descriptors: []*rlsconfv3.RateLimitDescriptor{
			{Key: "model_name_override", Value: "gpt-4", QuotaMode: true, RateLimit: policy(n, rlsconfv3.RateLimitUnit_MINUTE)}}}
	}
	quotas.Push(&rlsconfv3.RateLimitConfig{Name: "ai-gateway-quota", Domain: "ai-gateway-quota",
		Descriptors: []*rlsconfv3.RateLimitDescriptor{leaf("default/openai", 100), leaf("default/azure", 50)}})
	backend := func(name string, hits uint64) *rlcommonv3.RateLimitDescriptor {
		d := rlscall.Desc("backend_name", name, "model_name_override", "gpt-4")
		if hits > 0 {
			d = rlscall.WithHits(d, hits)
		}
		return d
	}
	ask := func(ds ...*rlcommonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		return quota.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai-gateway-quota", Descriptors: ds})
	}
	poll.Until(t, 5*time.Second, "the quotas in force (the process waits for them)", func() bool {
		_, err := ask(backend("default/openai", 0))
		return err == nil
	})
	request := func() rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := ask(backend("default/openai", 0), backend("default/azure", 0))
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	report := func(name string, cost uint64) {
		t.Helper()
		if _, err := ask(backend(name, cost)); err != nil {
			t.Fatal(err)
		}
	}
	// The poll's call counted one on openai.
	if got := request(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("the first request: %v", got)
	}
	report("default/openai", 118) // 120 of 100: openai's quota spent
	if got := request(); got != rlsv3.RateLimitResponse_OK {
		t.Fatalf("with azure's quota left: %v, want OK", got)
	}
	report("default/azure", 60) // azure's spent too
	if got := request(); got != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("with every quota spent: %v, want OVER_LIMIT", got)
	}
}

// TestRatelimitConfigCheck: ratelimit config check reads envoyproxy/
// ratelimit's environment as serving does, and names a variable it cannot
// honour.
func TestRatelimitConfigCheck(t *testing.T) {
	t.Parallel()
	bin := ratelimitBinary(t)
	run := func(env ...string) (string, error) {
		cmd := exec.Command(bin, "config", "check", "--static")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("PORT=9000", "GRPC_PORT=9001", "USE_STATSD=false", "CONFIG_TYPE=GRPC_XDS_SOTW")
	if err != nil || !strings.Contains(out, "region default, HTTP on 0.0.0.0:9000, gRPC (grpc-go) 0.0.0.0:9001") {
		t.Fatalf("config check: %v\n%s", err, out)
	}
	if out, err := run("USE_STATSD=true"); err == nil || !strings.Contains(out, "USE_STATSD=true: not supported") {
		t.Fatalf("config check with USE_STATSD=true: %v\n%s", err, out)
	}
	// Without --static it reads the rules as serving would: a runtime
	// directory that is not there is named as the user set it.
	cmd := exec.Command(bin, "config", "check")
	cmd.Env = []string{"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "RUNTIME_ROOT=" + filepath.Join(t.TempDir(), "missing")}
	full, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(full), "UNKEY_RLS_CONFIG (from RUNTIME_ROOT)") {
		t.Fatalf("config check with a RUNTIME_ROOT that is not there: %v\n%s", err, full)
	}
}
