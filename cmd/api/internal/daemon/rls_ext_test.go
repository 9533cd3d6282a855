package daemon_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
)

// rlsExamples is envoyproxy/ratelimit's README's eleven worked examples.
const rlsExamples = "../../../../services/rlsconfig/testdata/examples"

// TestRLSExamples runs the README's eleven examples through a real gRPC
// client on Envoy's stubs, on both ports that serve gRPC. Each step is a
// ShouldRateLimit call and the statuses it must answer, in request order:
// the limit in each status shows which rule matched, and hits_addend
// reaches a limit in one call, so no step depends on how fast the calls
// run.
func TestRLSExamples(t *testing.T) {
	type step struct {
		domain string
		hits   uint32
		descs  []*rlcommonv3.RateLimitDescriptor
		want   []rlsStatus
	}
	const maxU32 = math.MaxUint32
	examples := []struct {
		name  string
		steps []step
	}{
		{"1 key and value", []step{
			{"mongo_cps", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("database", "users"), rlscall.Desc("database", "orders")},
				[]rlsStatus{{false, 500, "SECOND", 499}, {}}},
		}},
		{"2 nested descriptors, several per request", []step{
			{"messaging", 4, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("message_type", "marketing", "to_number", "2061111111"), rlscall.Desc("to_number", "2061111111")},
				[]rlsStatus{{false, 5, "DAY", 1}, {false, 100, "DAY", 96}}},
			{"messaging", 2, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("message_type", "marketing", "to_number", "2061111111"), rlscall.Desc("to_number", "2061111111")},
				// Over its limit, the first is counted all the same, as
				// envoyproxy/ratelimit counts it (nothing remains); the
				// second is counted on its own.
				[]rlsStatus{{true, 5, "DAY", 0}, {false, 100, "DAY", 94}}},
			{"messaging", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("message_type", "marketing", "to_number", "2062222222")},
				[]rlsStatus{{false, 5, "DAY", 4}}},
		}},
		{"3 most specific match first", []step{
			{"edge_proxy_per_ip", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("remote_address", "50.0.0.1"), rlscall.Desc("remote_address", "50.0.0.5")},
				[]rlsStatus{{false, 10, "SECOND", 9}, {true, 0, "SECOND", 0}}},
		}},
		{"4 depth must match", []step{
			{"example4", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key", "value"), rlscall.Desc("key", "value", "subkey", "subvalue")},
				[]rlsStatus{{}, {false, 300, "SECOND", 299}}},
		}},
		{"5 unlimited", []step{
			{"internal", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("ldap", "x"), rlscall.Desc("azure", "x")},
				[]rlsStatus{{false, 0, "", maxU32}, {false, 100, "MINUTE", 99}}},
		}},
		{"6 shadow mode", []step{
			{"example6", 11, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("service", "auth-service", "user", "user-a")},
				// Shadow mode answers OK over the limit; the hits count.
				[]rlsStatus{{false, 10, "SECOND", 0}}},
			{"example6", 21, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("service", "auth-service", "user", "user-b")},
				[]rlsStatus{{true, 20, "SECOND", 0}}},
		}},
		{"7 replaces", []step{
			{"example7", 6, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key_1", "value_1", "user", "bkthomps"), rlscall.Desc("key_2", "value_2", "user", "bkthomps")},
				[]rlsStatus{{}, {false, 10, "SECOND", 4}}},
			// The replaced rule counted nothing above: all 5 remain.
			{"example7", 5, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key_1", "value_1", "user", "bkthomps")},
				[]rlsStatus{{false, 5, "SECOND", 0}}},
		}},
		{"8 detailed metric", []step{
			{"example8", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key1", "unspecified_value"), rlscall.Desc("key1", "value1")},
				[]rlsStatus{{false, 10, "MINUTE", 9}, {false, 20, "MINUTE", 19}}},
		}},
		{"9 wildcards", []step{
			{"example9", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key1", "valueXYZ"), rlscall.Desc("path", "/api/123/action"),
				rlscall.Desc("path", "/api/123/other"), rlscall.Desc("route", "/api/v1/resource/123/action")},
				[]rlsStatus{{false, 20, "MINUTE", 19}, {false, 20, "MINUTE", 19}, {}, {false, 20, "MINUTE", 19}}},
		}},
		{"10 value to metric", []step{
			{"example10", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("route", "api", "http_method", "GET", "subject_id", "123")},
				[]rlsStatus{{false, 60, "MINUTE", 59}}},
		}},
		{"11 share threshold", []step{
			{"example11", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.WithHits(rlscall.Desc("files", "files/a.pdf"), 5), rlscall.WithHits(rlscall.Desc("files", "files/b.csv"), 5),
				rlscall.WithHits(rlscall.Desc("files_no_share", "files_no_share/a.pdf"), 10)},
				[]rlsStatus{{false, 10, "HOUR", 5}, {false, 10, "HOUR", 0}, {false, 10, "HOUR", 0}}},
			{"example11", 0, []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("files", "files/c.txt"), rlscall.Desc("files_no_share", "files_no_share/b.csv")},
				[]rlsStatus{{true, 10, "HOUR", 0}, {false, 10, "HOUR", 9}}},
		}},
	}
	for _, port := range []string{"main port", "grpc-go port"} {
		// A server for each port, so that each starts from empty counters.
		ts := startServer(t, "UNKEY_RLS_CONFIG="+rlsExamples, "UNKEY_GRPC_ADDR=127.0.0.1:0")
		addr := strings.TrimPrefix(ts.url, "http://")
		if port == "grpc-go port" {
			addr = ts.grpcAddr
		}
		client := rlscall.Client(t, addr)
		for _, ex := range examples {
			t.Run(port+"/"+ex.name, func(t *testing.T) {
				for i, st := range ex.steps {
					req := &rlsv3.RateLimitRequest{Domain: st.domain, HitsAddend: st.hits, Descriptors: st.descs}
					resp, err := client.ShouldRateLimit(context.Background(), req)
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					anyOver := false
					for j, want := range st.want {
						got := statusOf(resp.Statuses[j])
						if got != want {
							t.Errorf("step %d, descriptor %d: %+v, want %+v", i, j, got, want)
						}
						anyOver = anyOver || want.Over
					}
					if (resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT) != anyOver {
						t.Errorf("step %d: overall %v, want over limit = %v", i, resp.OverallCode, anyOver)
					}
				}
			})
		}
	}
}

// TestRLSRequest covers what the examples do not: hits_addend at both
// levels, a descriptor's own limit, auth, the headers, the bounds, metrics,
// health and reflection.
func TestRLSRequest(t *testing.T) {
	ts := startServer(t, "UNKEY_RLS_CONFIG="+rlsExamples, "UNKEY_GRPC_ADDR=127.0.0.1:0",
		"UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b", "UNKEY_RLS_RESPONSE_HEADERS=true")
	client := rlscall.Client(t, ts.grpcAddr)
	a := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokA)
	b := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tokB)
	call := func(ctx context.Context, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if _, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "messaging",
		Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("to_number", "1")}}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v, want unauthenticated", err)
	}
	// An explicit hits_addend of 0 checks without counting; the request's
	// 0 means 1.
	resp := call(a, &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		rlscall.WithHits(rlscall.Desc("to_number", "h"), 0), rlscall.Desc("to_number", "h")}})
	if statusOf(resp.Statuses[0]).Remaining != 100 || statusOf(resp.Statuses[1]).Remaining != 99 {
		t.Errorf("hits_addend 0 then unset: %v", resp.Statuses)
	}
	// Counts live in the token's workspace.
	resp = call(b, &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("to_number", "h")}})
	if statusOf(resp.Statuses[0]).Remaining != 99 {
		t.Errorf("workspace b saw workspace a's count: %v", resp.Statuses[0])
	}
	// A descriptor's own limit wins over the file's rule.
	own := rlscall.Desc("to_number", "own")
	own.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: 3} // HOUR
	resp = call(a, &rlsv3.RateLimitRequest{Domain: "messaging", HitsAddend: 3, Descriptors: []*rlcommonv3.RateLimitDescriptor{own}})
	if got := statusOf(resp.Statuses[0]); got != (rlsStatus{true, 2, "HOUR", 0}) || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Errorf("descriptor limit: %+v", got)
	}
	// The headers are those of the descriptor closest to its limit.
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if headers["RateLimit-Limit"] != "2" || headers["RateLimit-Remaining"] != "0" || headers["RateLimit-Reset"] == "" {
		t.Errorf("response headers = %v", headers)
	}
	for _, tc := range []struct {
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{&rlsv3.RateLimitRequest{Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("a", "b")}}, "domain: must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "d"}, "descriptors: must hold 1 to 100 descriptors"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{{}}}, "descriptors[0].entries: must hold 1 to 32"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("", "b")}}, "descriptors[0].entries[0].key: must not be empty"},
		{&rlsv3.RateLimitRequest{Domain: "d", Descriptors: make([]*rlcommonv3.RateLimitDescriptor, 101)}, "descriptors: must hold 1 to 100"},
	} {
		for i := range tc.req.Descriptors {
			if tc.req.Descriptors[i] == nil {
				tc.req.Descriptors[i] = rlscall.Desc("k", "v")
			}
		}
		if _, err := client.ShouldRateLimit(a, tc.req); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want invalid_argument containing %q", tc.req, err, tc.want)
		}
	}
	// Health and reflection name the service on both ports.
	for _, addr := range []string{ts.grpcAddr, strings.TrimPrefix(ts.url, "http://")} {
		conn := loopback.Dial(t, addr)
		hc, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: envoyrls.ServiceName})
		if err != nil || hc.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("%s: health of %s: %v, %v", addr, envoyrls.ServiceName, hc, err)
		}
		stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
			t.Fatal(err)
		}
		if r, err := stream.Recv(); err != nil || !strings.Contains(r.String(), envoyrls.ServiceName) {
			t.Errorf("%s: reflection's services: %v, %v", addr, r, err)
		}
		stream.CloseSend()
	}
	_, body := ts.get(t, "/metrics")
	for _, want := range []string{
		`unkey_rls_hits_total{domain="messaging",rule="messaging.to_number"} 2`,
		`unkey_rls_over_limit_total{domain="messaging",rule="descriptor_limit"} 3`,
		`unkey_rls_config_rules 21`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// get GETs path from the main port with tokA's key, which a server with UNKEY_AUTH_TOKENS
// takes for its metrics and an open one ignores.
func (ts *testServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, ts.url+path, nil)
	req.Header.Set("Authorization", "Bearer "+tokA)
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRLSMetricsLabels: a rule's label is its path in the file; only
// detailed_metric and value_to_metric bring the request's values in.
func TestRLSMetricsLabels(t *testing.T) {
	ts := startServer(t, "UNKEY_RLS_CONFIG="+rlsExamples)
	client := rlscall.Client(t, strings.TrimPrefix(ts.url, "http://"))
	for _, req := range []*rlsv3.RateLimitRequest{
		{Domain: "example8", Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key1", "unspecified_value")}},
		{Domain: "example10", Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("route", "api", "http_method", "GET", "subject_id", "123")}},
		{Domain: "example9", Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("key1", "value1"), rlscall.Desc("key1", "value2")}},
		{Domain: "edge_proxy_per_ip", Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("remote_address", "50.0.0.5")}},
	} {
		if _, err := client.ShouldRateLimit(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	_, body := ts.get(t, "/metrics")
	for _, want := range []string{
		`unkey_rls_within_limit_total{domain="example8",rule="example8.key1_unspecified_value"} 1`,
		`unkey_rls_within_limit_total{domain="example10",rule="example10.route_api.http_method_GET.subject_id"} 1`,
		`unkey_rls_within_limit_total{domain="example9",rule="example9.key1_value*"} 2`,
		`unkey_rls_over_limit_total{domain="edge_proxy_per_ip",rule="edge_proxy_per_ip.remote_address_50.0.0.5"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestRLSConfigReload: a changed file is in force within the interval; a
// broken one is refused and counted, and the last good rules stay.
func TestRLSConfigReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.yaml")
	write := func(limit string) {
		t.Helper()
		data := "domain: reload\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: " + limit + "\n"
		if err := os.WriteFile(file, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("5")
	ts := startServer(t, "UNKEY_RLS_CONFIG="+dir, "UNKEY_RLS_CONFIG_INTERVAL=100ms")
	client := rlscall.Client(t, strings.TrimPrefix(ts.url, "http://"))
	limitNow := func() uint32 {
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "reload",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.WithHits(rlscall.Desc("user", "u"), 0)}})
		if err != nil {
			t.Fatal(err)
		}
		return statusOf(resp.Statuses[0]).Limit
	}
	if l := limitNow(); l != 5 {
		t.Fatalf("limit = %d, want 5", l)
	}
	write("7")
	poll.Until(t, 5*time.Second, "the new limit to be in force", func() bool { return limitNow() == 7 })
	if err := os.WriteFile(file, []byte("domain: reload\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the broken file to be refused", func() bool {
		_, body := ts.get(t, "/metrics")
		return strings.Contains(body, `unkey_rls_config_loads_total{result="error"} 1`)
	})
	if l := limitNow(); l != 7 {
		t.Fatalf("after a broken file the limit is %d, want the last good 7", l)
	}
	write("9")
	poll.Until(t, 5*time.Second, "the fixed file to be in force", func() bool { return limitNow() == 9 })
	// A broken file at start is an error: the service does not start
	// without the limits it was given.
	os.WriteFile(file, []byte("domain: [\n"), 0o644)
	cfg, err := daemon.LoadConfig([]string{"UNKEY_REGION=test", "UNKEY_RLS_CONFIG=" + dir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.New(cfg, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "UNKEY_RLS_CONFIG: "+file) {
		t.Errorf("daemon.New with a broken file: %v", err)
	}
}

// TestRLSJSONEndpoint: envoyproxy/ratelimit's /json endpoint answers 200 or
// 429 with the response in protobuf's JSON mapping, and a body it cannot
// read 400 in JSON, naming the field where it can, never in the decoder's
// words.
func TestRLSJSONEndpoint(t *testing.T) {
	ts := startServer(t, "UNKEY_RLS_CONFIG="+rlsExamples)
	for _, tc := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"1.2.3.4"}]}]}`, 200,
			`"overallCode":"OK"`},
		{`{"domain":"edge_proxy_per_ip","descriptors":[{"entries":[{"key":"remote_address","value":"50.0.0.5"}]}]}`, 429,
			`"overallCode":"OVER_LIMIT"`},
		{`{"domain":"edge_proxy_per_ip","descriptors":[]}`, 400, "descriptors: must hold 1 to 100"},
		{`{"domain":`, 400, `{"code":"invalid_argument","message":"domain: must be valid JSON: it breaks off or stops being JSON at byte 10"}`},
		{`{"domain":"d","bogus":1,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`, 400, `{"code":"invalid_argument","message":"bogus: unknown field`},
		{`{"domain":"d","descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}`, 400, `{"code":"invalid_argument","message":"descriptors[0].limit.unit: must be one of UNKNOWN, SECOND, MINUTE, HOUR, DAY, MONTH, YEAR (or its number), got \"FORTNIGHT\""}`},
	} {
		status, body := ts.post(t, "/json", "", strings.NewReader(tc.body), "Content-Type", "application/json")
		strip := func(s string) string { return strings.ReplaceAll(s, " ", "") }
		if status != tc.status || !strings.Contains(strip(string(body)), strip(tc.want)) {
			t.Errorf("%s: %d %s, want %d with %s", tc.body, status, body, tc.status, tc.want)
		}
	}
}

// rlsStatus is rlscall.Status, for the tables of this file.
type rlsStatus rlscall.Status

func statusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) rlsStatus {
	return rlsStatus(rlscall.StatusOf(s))
}
