package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon"
	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

// TestMain quiets go-redis's own log, which the tests' faults (a killed
// Redis) would otherwise fill with failed dials, as daemon.Run does to the
// debug log in production.
func TestMain(m *testing.M) {
	redis.SetLogger(daemon.RedisLogger{Logger: slog.New(slog.DiscardHandler)})
	os.Exit(m.Run())
}

// testServer is a real API server on a free loopback port.
type testServer struct {
	url    string
	srv    *daemon.Daemon
	close  func() error // stops the server gracefully; safe to call twice
	client *http.Client // HTTP/1.1
	h2c    *http.Client // HTTP/2 with prior knowledge, for gRPC
	// grpcAddr is the grpc-go port's address, with UNKEY_GRPC_ADDR set.
	grpcAddr string
}

func startServer(t testing.TB, environ ...string) *testServer {
	t.Helper()
	return startServerLogging(t, slog.New(slog.DiscardHandler), environ...)
}

// startServerLogging is startServer with the server's log going to logger.
func startServerLogging(t testing.TB, logger *slog.Logger, environ ...string) *testServer {
	t.Helper()
	s := daemontest.Start(t, logger, environ...)
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &testServer{url: s.URL, srv: s.Daemon, close: s.Close, grpcAddr: s.GRPCAddr,
		client: &http.Client{Timeout: 10 * time.Second},
		h2c:    &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &protocols}}}
}

// Bearer tokens of the tests' workspaces: at least 16 characters, as the
// server requires.
const (
	tokA = "tok_a_0123456789abcdef"
	tokB = "tok_b_0123456789abcdef"
)

// Tests against the real clock use 30-day windows (2592000000 ms), the
// longest allowed: a test that crossed a window boundary between two calls
// would see the previous window's count weighted down and flake.

// call posts a Connect JSON request and decodes the JSON answer.
func (ts *testServer) call(t *testing.T, method, token, body string) (int, map[string]any) {
	t.Helper()
	status, raw := ts.post(t, "/ratelimit.v1.RatelimitService/"+method, token, strings.NewReader(body))
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s answered %d with %q: %v", method, status, raw, err)
	}
	return status, out
}

// post posts a JSON body to path with token (none if empty) and further
// header name/value pairs, and returns the status and the raw answer.
func (ts *testServer) post(t *testing.T, path, token string, body io.Reader, header ...string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

func TestConnectJSONOverHTTP1(t *testing.T) {
	ts := startServer(t)
	body := `{"namespace":"sms.sign_up","identifier":"user_42","limit":2,"duration":2592000000}`
	for i, want := range []bool{true, true, false} {
		status, out := ts.call(t, "Limit", "", body)
		if status != http.StatusOK || out["success"] != want {
			t.Fatalf("call %d: %d %v, want 200 with success %v", i, status, out, want)
		}
		for _, key := range []string{"success", "limit", "remaining", "reset", "retryAfter"} {
			if _, ok := out[key]; !ok {
				t.Fatalf("call %d: answer %v lacks %q", i, out, key)
			}
		}
		if !want && out["retryAfter"] == "0" {
			t.Fatalf("denial without retryAfter: %v", out)
		}
	}
}

func TestGRPCClient(t *testing.T) {
	ts := startServer(t)
	client := ratelimitv1connect.NewRatelimitServiceClient(ts.h2c, ts.url, connect.WithGRPC())
	cost := int64(3)
	req := &ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "id", Limit: 5, Duration: 2592000000, Cost: &cost}
	resp, err := client.Limit(context.Background(), connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Msg.Success || resp.Msg.Remaining != 2 || resp.Msg.Reset_ <= time.Now().UnixMilli() {
		t.Fatalf("got %v, want success with 2 remaining and a reset in the future", resp.Msg)
	}
	multi, err := client.MultiLimit(context.Background(), connect.NewRequest(&ratelimitv1.MultiLimitRequest{
		Limits: []*ratelimitv1.LimitRequest{
			{Namespace: "ns", Identifier: "other", Limit: 5, Duration: 2592000000},
			{Namespace: "ns", Identifier: "id", Limit: 5, Duration: 2592000000, Cost: &cost},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	m := multi.Msg
	if m.Passed || len(m.Results) != 2 || !m.Results[0].Success || m.Results[1].Success ||
		m.Results[1].Identifier != "id" || m.Results[1].Namespace != "ns" || m.Results[0].Identifier != "other" {
		t.Fatalf("got %v, want a rolled-back batch whose results repeat their keys", m)
	}
	// The rolled-back batch counted nothing for "other".
	resp, err = client.Limit(context.Background(), connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "other", Limit: 5, Duration: 2592000000, Cost: new(int64)}))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Msg.Remaining != 5 {
		t.Fatalf("after rollback %q has %d remaining, want 5", "other", resp.Msg.Remaining)
	}
}

func TestReflectionListsService(t *testing.T) {
	ts := startServer(t)
	client := grpcreflect.NewClient(ts.h2c, ts.url)
	stream := client.NewStream(context.Background())
	defer stream.Close()
	names, err := stream.ListServices()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, n := range names {
		found = found || string(n) == ratelimitv1connect.RatelimitServiceName
	}
	if !found {
		t.Fatalf("reflection lists %v, want %s among them", names, ratelimitv1connect.RatelimitServiceName)
	}
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	ts := startServer(t)
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		resp, err := ts.client.Get(ts.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Fatalf("GET %s = %d %q, want 200 %q", path, resp.StatusCode, body, want)
		}
	}
	ts.call(t, "Limit", "", `{"namespace":"a","identifier":"b","limit":1,"duration":2592000000}`)
	ts.call(t, "Limit", "", `{"namespace":"a","identifier":"b","limit":1,"duration":2592000000}`)
	resp, err := ts.client.Get(ts.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`unkey_ratelimit_decisions_total{outcome="passed",rpc="Limit"} 1`,
		`unkey_ratelimit_decisions_total{outcome="denied",rpc="Limit"} 1`,
		`unkey_ratelimit_limits_decided_total{model="sliding_window",outcome="passed"} 1`,
		`unkey_ratelimit_limits_decided_total{model="sliding_window",outcome="denied"} 1`,
		`unkey_ratelimit_limits_decided_total{model="token_bucket",outcome="passed"} 0`,
		`unkey_ratelimit_windows_active 1`,
		`unkey_ratelimit_windows_created_total 1`,
		`unkey_ratelimit_windows_evicted_total 0`,
		`unkey_ratelimit_contended_decisions_total 0`,
	} {
		if !strings.Contains(string(body), want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	// The gRPC health service answers SERVING for the rate limit service.
	req, _ := http.NewRequest(http.MethodPost, ts.url+"/grpc.health.v1.Health/Check",
		strings.NewReader(`{"service":"`+ratelimitv1connect.RatelimitServiceName+`"}`))
	req.Header.Set("Content-Type", "application/json")
	hresp, err := ts.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hbody, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	if !strings.Contains(string(hbody), "SERVING") {
		t.Fatalf("health check = %d %s, want SERVING", hresp.StatusCode, hbody)
	}
}

func TestAuth(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a, "+tokB+"=ws_b")
	body := `{"namespace":"ns","identifier":"shared","limit":1,"duration":2592000000}`
	for _, tc := range []struct{ name, token string }{{"missing", ""}, {"unknown", "tok_c_0123456789abcdef"}} {
		status, out := ts.call(t, "Limit", tc.token, body)
		if status != http.StatusUnauthorized || out["code"] != "unauthenticated" {
			t.Fatalf("%s token: %d %v, want 401 unauthenticated", tc.name, status, out)
		}
	}
	// Two workspaces with the same namespace and identifier keep separate
	// counts.
	for _, token := range []string{tokA, tokB} {
		if _, out := ts.call(t, "Limit", token, body); out["success"] != true {
			t.Fatalf("first request of %s denied: %v", token, out)
		}
	}
	for _, token := range []string{tokA, tokB} {
		if _, out := ts.call(t, "Limit", token, body); out["success"] != false {
			t.Fatalf("second request of %s passed: %v", token, out)
		}
	}
	// The workspace is never taken from the body: a request has no such
	// field, and one that names it is refused, counting nothing.
	status, out := ts.call(t, "Limit", tokB, `{"workspace":"ws_a","namespace":"ns","identifier":"fresh","limit":1,"duration":2592000000}`)
	if status != http.StatusBadRequest || !strings.HasPrefix(fmt.Sprint(out["message"]), "workspace: unknown field") {
		t.Fatalf("a workspace field in the body: %d %v", status, out)
	}
}

// TestBearerSchemeAnyCase: the Authorization scheme is matched without
// regard to case (RFC 9110, section 11.1), on every route that reads a
// token: Connect JSON, gRPC on the main port, Unkey's v2 routes, Envoy's
// /json and the grpc-go port's metadata. Before, "bearer" was a missing
// token. Another scheme, or none, still is.
func TestBearerSchemeAnyCase(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_GRPC_ADDR=127.0.0.1:0")
	conn, err := grpc.NewClient(ts.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := context.Background()
	connectGRPC := ratelimitv1connect.NewRatelimitServiceClient(ts.h2c, ts.url, connect.WithGRPC())
	limit := `{"namespace":"ns","identifier":"bearer","limit":1000,"duration":2592000000}`
	rls := `{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR", "bearer  "} {
		auth := scheme + " " + tokA
		for _, route := range []struct{ path, body string }{
			{"/ratelimit.v1.RatelimitService/Limit", limit},
			{"/v2/ratelimit.limit", limit},
			{"/json", rls},
		} {
			if status, out := ts.post(t, route.path, "", strings.NewReader(route.body), "Authorization", auth); status != http.StatusOK {
				t.Errorf("%s with %q: %d %s, want 200", route.path, auth, status, out)
			}
		}
		req := connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "bearer", Limit: 1000, Duration: 2592000000})
		req.Header().Set("Authorization", auth)
		if _, err := connectGRPC.Limit(ctx, req); err != nil {
			t.Errorf("gRPC on the main port with %q: %v", auth, err)
		}
		md := metadata.AppendToOutgoingContext(ctx, "authorization", auth)
		if err := conn.Invoke(md, "/ratelimit.v1.RatelimitService/Limit", &ratelimitv1.LimitRequest{Namespace: "ns",
			Identifier: "bearer", Limit: 1000, Duration: 2592000000}, new(ratelimitv1.LimitResponse)); err != nil {
			t.Errorf("the grpc-go port with %q: %v", auth, err)
		}
	}
	for _, auth := range []string{"Basic " + tokA, "Bearer" + tokA, tokA, "bearer "} {
		status, out := ts.post(t, "/ratelimit.v1.RatelimitService/Limit", "", strings.NewReader(limit), "Authorization", auth)
		if status != http.StatusUnauthorized || !strings.Contains(string(out), "missing bearer token") {
			t.Errorf("Authorization %q: %d %s, want 401 missing bearer token", auth, status, out)
		}
	}
}

func TestValidationOverTheAPI(t *testing.T) {
	ts := startServer(t)
	const name = "must be 1 to 255 characters of valid UTF-8 without control or format characters"
	long := strings.Repeat("x", 256)
	cases := []struct{ method, body, message string }{
		{"Limit", `{"identifier":"i","limit":1,"duration":1000}`, "namespace: missing: LimitRequest needs it"},
		{"Limit", `{"namespace":"","identifier":"i","limit":1,"duration":1000}`, "namespace: " + name},
		{"Limit", `{"namespace":"` + long + `","identifier":"i","limit":1,"duration":1000}`, "namespace: " + name},
		{"Limit", `{"namespace":"a\u0001","identifier":"i","limit":1,"duration":1000}`, "namespace: " + name},
		{"Limit", `{"namespace":"n","limit":1,"duration":1000}`, "identifier: missing: LimitRequest needs it"},
		// What a newcomer meets first: a wrong type, a typo, an empty body,
		// a missing field, a wrong type deep in a batch.
		{"Limit", `{"namespace":"n","identifier":"i","limit":"two","duration":1000}`, `limit: must be an integer, got "two"`},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":1000,"cots":5}`, "cots: unknown field: LimitRequest has namespace, identifier, limit, duration, cost, report, reserve, algorithm, burst, calendar, shadow, penalty, penaltyMax, maxWait"},
		{"Limit", ``, "body: missing: the request, a JSON object"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1`, "body: must be valid JSON: it breaks off or stops being JSON at byte 43"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1}`, "duration: missing: a limit needs the length of its window in milliseconds, or a calendar"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":1000,"report":"yes"}`, "report: must be true or false"},
		// An enum value: its full name, as protobuf's JSON mapping takes
		// it; a short form or a typo names the accepted ones and the one
		// meant.
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"calendar":{"unit":"month"}}`,
			`calendar.unit: must be one of CALENDAR_UNIT_UNSPECIFIED, CALENDAR_UNIT_DAY, CALENDAR_UNIT_WEEK, CALENDAR_UNIT_MONTH, CALENDAR_UNIT_YEAR (or its number), got "month": did you mean "CALENDAR_UNIT_MONTH"? (an enum value is its full name)`},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"calendar":{"unit":"CALENDAR_UNIT_MONHT"}}`,
			`calendar.unit: must be one of CALENDAR_UNIT_UNSPECIFIED, CALENDAR_UNIT_DAY, CALENDAR_UNIT_WEEK, CALENDAR_UNIT_MONTH, CALENDAR_UNIT_YEAR (or its number), got "CALENDAR_UNIT_MONHT": did you mean "CALENDAR_UNIT_MONTH"? (an enum value is its full name)`},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":1000,"algorithm":"token_bucket"}`,
			`algorithm: must be one of ALGORITHM_SLIDING_WINDOW, ALGORITHM_FIXED_WINDOW, ALGORITHM_TOKEN_BUCKET, ALGORITHM_CALENDAR (or its number), got "token_bucket": did you mean "ALGORITHM_TOKEN_BUCKET"? (an enum value is its full name)`},
		{"MultiLimit", `{"limits":[{"namespace":"n","identifier":"i","limit":1,"duration":1000},{"namespace":"n","identifier":"i","limit":1,"duration":1000,"cost":"x"}]}`, `limits[1].cost: must be an integer, got "x"`},
		{"SetOverride", `{"namespace":"n","identifier":"i","limit":1}`, "duration: missing: SetOverrideRequest needs it (unless shadow is given)"},
		{"Limit", `{"namespace":"n","identifier":"` + long + `","limit":1,"duration":1000}`, "identifier: " + name},
		{"Limit", `{"namespace":"n","identifier":"i\u007f","limit":1,"duration":1000}`, "identifier: " + name},
		{"Limit", `{"namespace":"n","identifier":"i","limit":0,"duration":1000}`, "limit: must be between 1 and 9007199254740992"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":"9007199254740993","duration":1000}`, "limit: must be between 1 and 9007199254740992"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":999}`, "duration: must be between 1000 and 2592000000 milliseconds"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":"9223372036854775807"}`, "duration: must be between 1000 and 2592000000 milliseconds"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":"-9223372036854775808"}`, "duration: must be between 1000 and 2592000000 milliseconds"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":1000,"cost":-1}`, "cost: must be between 0 and 9007199254740992"},
		{"Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":1000,"cost":"9007199254740993"}`, "cost: must be between 0 and 9007199254740992"},
		{"MultiLimit", `{"limits":[]}`, "limits: must hold 1 to 100 limits"},
		{"MultiLimit", `{"limits":[` + strings.TrimSuffix(strings.Repeat(`{"namespace":"n","identifier":"i","limit":1,"duration":1000},`, 101), ",") + `]}`, "limits: must hold 1 to 100 limits"},
		{"MultiLimit", `{"limits":[{"namespace":"n","identifier":"i","limit":1,"duration":1000},{"namespace":"n","identifier":"i","limit":1,"duration":10}]}`, "limits[1].duration: must be between 1000 and 2592000000 milliseconds"},
	}
	for _, tc := range cases {
		status, out := ts.call(t, tc.method, "", tc.body)
		if status != http.StatusBadRequest || out["code"] != "invalid_argument" || out["message"] != tc.message {
			t.Errorf("%s %.80s: %d %v, want 400 invalid_argument %q", tc.method, tc.body, status, out, tc.message)
		}
	}
	if n := ts.srv.Limiter().ActiveWindows(); n != 0 {
		t.Fatalf("invalid requests created %d windows", n)
	}
	// A body over 1 MiB is refused before it is decoded, like any other
	// invalid request; one of exactly 1 MiB is decoded (and here refused for
	// its identifier's length).
	pad := func(n int) string {
		prefix, suffix := `{"namespace":"n","identifier":"`, `","limit":1,"duration":1000}`
		return prefix + strings.Repeat("x", n-len(prefix)-len(suffix)) + suffix
	}
	status, out := ts.call(t, "Limit", "", pad(transport.MaxRequestBytes+1))
	if status != http.StatusBadRequest || out["code"] != "invalid_argument" || out["message"] != "request body: must be at most 1048576 bytes (1 MiB)" {
		t.Fatalf("oversized body: %d %v, want invalid_argument naming the 1 MiB maximum", status, out)
	}
	status, out = ts.call(t, "Limit", "", pad(transport.MaxRequestBytes))
	if status != http.StatusBadRequest || out["message"] != "identifier: "+name {
		t.Fatalf("a body of exactly 1 MiB: %d %v, want it decoded and its identifier refused", status, out)
	}
	// Over gRPC too.
	client := ratelimitv1connect.NewRatelimitServiceClient(ts.h2c, ts.url, connect.WithGRPC())
	_, err := client.Limit(context.Background(), connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "n",
		Identifier: strings.Repeat("x", transport.MaxRequestBytes), Limit: 1, Duration: 1000}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "request body: must be at most") {
		t.Fatalf("oversized gRPC message: %v, want invalid_argument", err)
	}
}

// TestGracefulShutdown stops the server while requests are in flight: every
// request that reached the server gets its answer, and serve returns nil.
func TestGracefulShutdown(t *testing.T) {
	cfg, err := daemon.LoadConfig([]string{"UNKEY_REGION=test"})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := daemon.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The listener holds back request bodies until released, so requests
	// are in flight when shutdown begins.
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln, nil) }()
	url := "http://" + ln.Addr().String() + "/ratelimit.v1.RatelimitService/Limit"
	const inFlight = 20
	var wg sync.WaitGroup
	errs := make(chan error, inFlight)
	started := make(chan struct{}, inFlight)
	for i := 0; i < inFlight; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, pw := io.Pipe()
			go func() {
				pw.Write([]byte(`{"namespace":"n","identifier":"i",`))
				started <- struct{}{}
				<-release
				pw.Write([]byte(`"limit":100,"duration":1000}`))
				pw.Close()
			}()
			req, _ := http.NewRequest(http.MethodPost, url, pr)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			var out map[string]any
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || out["success"] != true {
				errs <- fmt.Errorf("status %d, answer %v, decode error %v", resp.StatusCode, out, err)
			}
		}()
	}
	for i := 0; i < inFlight; i++ {
		<-started
	}
	time.Sleep(50 * time.Millisecond) // let the server read the first bytes
	cancel()
	time.Sleep(50 * time.Millisecond) // shutdown has begun: readiness is off
	if srv.Ready() {
		t.Fatal("still ready after shutdown began")
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("in-flight request failed: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("serve = %v, want nil", err)
	}
}

// TestBatchLimit decides independent requests in one call: each is counted
// on its own, a bad entry fails the call before anything is counted, and an
// entry past the workspace's window cap is denied alone.
func TestBatchLimit(t *testing.T) {
	ts := startServer(t, "UNKEY_MAX_WINDOWS_PER_WORKSPACE=2")
	entry := func(id string) string {
		return `{"namespace":"b","identifier":"` + id + `","limit":1,"duration":2592000000}`
	}
	code, out := ts.call(t, "BatchLimit", "", `{"limits":[`+entry("a")+`,`+entry("a")+`,`+entry("b")+`,`+entry("c")+`]}`)
	if code != http.StatusOK {
		t.Fatalf("BatchLimit: %d %v", code, out)
	}
	var got []any
	for _, r := range out["results"].([]any) {
		got = append(got, r.(map[string]any)["success"])
	}
	if fmt.Sprint(got) != "[true false true false]" {
		t.Fatalf("verdicts %v, want [true false true false]: a admitted, a again denied, b admitted, c past the cap of 2 windows", got)
	}
	code, out = ts.call(t, "BatchLimit", "", `{"limits":[`+entry("b")+`,{"namespace":"b","identifier":"a","limit":0,"duration":60000}]}`)
	if code != http.StatusBadRequest || out["message"] != "limits[1].limit: must be between 1 and 9007199254740992" {
		t.Fatalf("a bad entry: %d %v", code, out)
	}
	if _, out := ts.call(t, "Limit", "", `{"namespace":"b","identifier":"b","limit":1,"duration":2592000000,"cost":0}`); out["remaining"] != "0" {
		t.Fatalf("b after the refused batch: %v, want only the first batch's count", out)
	}
	many := make([]string, 1001)
	for i := range many {
		many[i] = entry("a")
	}
	if code, out := ts.call(t, "BatchLimit", "", `{"limits":[`+strings.Join(many, ",")+`]}`); code != http.StatusBadRequest || out["message"] != "limits: must hold 1 to 1000 limits" {
		t.Fatalf("1,001 entries: %d %v", code, out)
	}
}

// TestConnectJSONIsCompact: Connect's JSON answers are compact whichever
// encoder wrote them: the fast one of Limit, and protobuf's JSON mapping
// for the rest (which spaces its output at random, on purpose), and so
// are the answers of Envoy's /json route.
func TestConnectJSONIsCompact(t *testing.T) {
	ts := startServer(t)
	limit := `{"namespace":"n","identifier":"i","limit":5,"duration":60000}`
	for _, tc := range []struct{ path, body string }{
		{"/ratelimit.v1.RatelimitService/Limit", limit},
		{"/ratelimit.v1.RatelimitService/MultiLimit", `{"limits":[` + limit + `,` + limit + `]}`},
		{"/ratelimit.v1.RatelimitService/SetOverride", `{"namespace":"n","identifier":"i","limit":9,"duration":60000}`},
	} {
		for range 5 { // protojson's spacing is random: several answers
			status, out := ts.post(t, tc.path, "", strings.NewReader(tc.body), "Content-Type", "application/json")
			var compact bytes.Buffer
			if err := json.Compact(&compact, out); status != http.StatusOK || err != nil || !bytes.Equal(compact.Bytes(), out) {
				t.Fatalf("%s: %d %s, want a compact JSON answer (%v)", tc.path, status, out, err)
			}
		}
	}
}
