package connectapi_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/services/access"
)

const token = "tok_connectapi_0123456789"

// limitOnlyToken is a key of the same workspace that may only decide in
// namespace ns.
const limitOnlyToken = "tok_connectapi_limit_0123456789"

// serve starts the API, as package daemon builds it, with the service on
// the main port and the grpc-go port, and returns their addresses.
func serve(t *testing.T) (url, grpcAddr string) {
	t.Helper()
	keysFile := daemontest.KeysFile(t, daemontest.Key{Secret: limitOnlyToken, Workspace: "ws", Permissions: []string{"ratelimit.ns.limit"}})
	s := daemontest.Start(t, nil, "UNKEY_AUTH_TOKENS="+token+"=ws", "UNKEY_AUTH_KEYS_FILE="+keysFile, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	return s.URL, s.GRPCAddr
}

// client returns a client of url in one protocol, sending the token.
func client(url, protocol string) ratelimitv1connect.RatelimitServiceClient {
	opts := []connect.ClientOption{connect.WithInterceptors(bearer(token))}
	hc := http.DefaultClient
	switch protocol {
	case "json":
		opts = append(opts, connect.WithProtoJSON())
	case "grpc":
		opts, hc = append(opts, connect.WithGRPC()), loopback.H2C()
	case "grpcweb":
		opts = append(opts, connect.WithGRPCWeb())
	}
	return ratelimitv1connect.NewRatelimitServiceClient(hc, url, opts...)
}

type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, req)
	}
}
func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}
func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func limitReq(id string, limit int64) *ratelimitv1.LimitRequest {
	return &ratelimitv1.LimitRequest{Namespace: "ns", Identifier: id, Limit: limit, Duration: 60_000}
}

// TestLimitInEveryProtocol: Connect JSON, Connect protobuf, gRPC-Web and
// gRPC on the main port, and gRPC on the grpc-go port, all decide on the
// same counters: a limit of 5 admits 5 calls across them and denies the
// sixth, with the documented answer; the main port's carry the IETF's
// fields, the grpc-go port's none.
func TestLimitInEveryProtocol(t *testing.T) {
	url, grpcAddr := serve(t)
	clients := []ratelimitv1connect.RatelimitServiceClient{
		client(url, "json"), client(url, "proto"), client(url, "grpcweb"), client(url, "grpc"), client("http://"+grpcAddr, "grpc"),
	}
	for i, c := range clients {
		resp, err := c.Limit(context.Background(), connect.NewRequest(limitReq("user_1", 5)))
		if err != nil || !resp.Msg.Success || resp.Msg.Remaining != int64(4-i) || resp.Msg.Limit != 5 {
			t.Fatalf("call %d: %v, %v; want success with %d remaining", i, resp, err, 4-i)
		}
		// The IETF's fields, on the main port's protocols (HTTP).
		if i < 4 {
			policy, limit := resp.Header().Get("RateLimit-Policy"), resp.Header().Get("RateLimit")
			if policy != `"ns";q=5;w=60` || !strings.HasPrefix(limit, fmt.Sprintf(`"ns";r=%d;t=`, 4-i)) {
				t.Errorf("call %d: RateLimit-Policy %q, RateLimit %q", i, policy, limit)
			}
		} else if h := resp.Header().Get("RateLimit"); h != "" {
			t.Errorf("the grpc-go port's answer carries RateLimit %q; it carries none", h)
		}
	}
	resp, err := clients[0].Limit(context.Background(), connect.NewRequest(limitReq("user_1", 5)))
	if err != nil || resp.Msg.Success || resp.Msg.Remaining != 0 || resp.Msg.RetryAfter <= 0 || resp.Msg.Reset_ == 0 {
		t.Fatalf("sixth call: %v, %v; want a denial with a wait", resp, err)
	}
}

// TestBucketPolicyFields: a token bucket's IETF fields describe its burst
// in the time the burst takes to refill, so that what remains is a share
// of the quota: 10 a second with bursts of 100 is q=100;w=10, and after one
// call r=99 (before, q=10;w=1 beside r=99).
func TestBucketPolicyFields(t *testing.T) {
	url, _ := serve(t)
	req := &ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "bucket", Limit: 10, Duration: 1000,
		Algorithm: ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET, Burst: 100}
	resp, err := client(url, "json").Limit(context.Background(), connect.NewRequest(req))
	if err != nil || !resp.Msg.Success {
		t.Fatalf("%v, %v", resp, err)
	}
	policy, limit := resp.Header().Get("RateLimit-Policy"), resp.Header().Get("RateLimit")
	if policy != `"ns";q=100;w=10` || !strings.HasPrefix(limit, `"ns";r=99;t=`) {
		t.Errorf("RateLimit-Policy %q, RateLimit %q; want q=100;w=10 and r=99", policy, limit)
	}
}

// TestErrors: the failures every caller meets, by the gRPC table, in
// Connect and over grpc-go alike.
func TestErrors(t *testing.T) {
	url, grpcAddr := serve(t)
	for _, c := range []ratelimitv1connect.RatelimitServiceClient{client(url, "json"), client("http://"+grpcAddr, "grpc")} {
		_, err := c.Limit(context.Background(), connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "a", Limit: 1, Duration: 10}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "duration: must be between 1000 and 2592000000 milliseconds") {
			t.Errorf("a bad duration: %v", err)
		}
		_, err = c.MultiLimit(context.Background(), connect.NewRequest(&ratelimitv1.MultiLimitRequest{
			Limits: []*ratelimitv1.LimitRequest{limitReq("a", 1), {Namespace: "ns", Identifier: "b", Limit: 1, Duration: 1000, Cost: new(int64(-1))}}}))
		if connect.CodeOf(err) != connect.CodeInvalidArgument || !strings.Contains(err.Error(), "limits[1].cost") {
			t.Errorf("a bad entry: %v", err)
		}
		_, err = c.GetOverride(context.Background(), connect.NewRequest(&ratelimitv1.GetOverrideRequest{Namespace: "ns", Identifier: "none"}))
		if connect.CodeOf(err) != connect.CodeNotFound {
			t.Errorf("an override that does not exist: %v", err)
		}
	}
	// A key that may only decide cannot raise its own limit, nor decide in
	// another namespace, on either port.
	for _, c := range []ratelimitv1connect.RatelimitServiceClient{
		ratelimitv1connect.NewRatelimitServiceClient(http.DefaultClient, url, connect.WithInterceptors(bearer(limitOnlyToken))),
		ratelimitv1connect.NewRatelimitServiceClient(loopback.H2C(), "http://"+grpcAddr, connect.WithGRPC(), connect.WithInterceptors(bearer(limitOnlyToken))),
	} {
		_, err := c.SetOverride(context.Background(), connect.NewRequest(&ratelimitv1.SetOverrideRequest{Namespace: "ns", Identifier: "a", Limit: 1_000_000, Duration: 60_000}))
		if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "lacks ratelimit.ns.set_override") {
			t.Errorf("SetOverride with a limit-only key: %v, want permission denied", err)
		}
		_, err = c.BatchLimit(context.Background(), connect.NewRequest(&ratelimitv1.BatchLimitRequest{
			Limits: []*ratelimitv1.LimitRequest{limitReq("a", 1), {Namespace: "other", Identifier: "a", Limit: 1, Duration: 60_000}}}))
		if connect.CodeOf(err) != connect.CodePermissionDenied || !strings.Contains(err.Error(), "lacks ratelimit.other.limit") {
			t.Errorf("BatchLimit naming another namespace: %v, want permission denied", err)
		}
		if _, err := c.Limit(context.Background(), connect.NewRequest(limitReq("k", 5))); err != nil {
			t.Errorf("Limit in its namespace: %v", err)
		}
	}
	anon := ratelimitv1connect.NewRatelimitServiceClient(http.DefaultClient, url)
	if _, err := anon.Limit(context.Background(), connect.NewRequest(limitReq("a", 1))); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("no token: %v, want unauthenticated", err)
	}
}

// TestMultiLimitAllOrNothing: a MultiLimit that one limit denies counts
// nothing, and each result repeats its key.
func TestMultiLimitAllOrNothing(t *testing.T) {
	url, _ := serve(t)
	c := client(url, "proto")
	ctx := context.Background()
	if _, err := c.Limit(ctx, connect.NewRequest(limitReq("spent", 1))); err != nil {
		t.Fatal(err)
	}
	resp, err := c.MultiLimit(ctx, connect.NewRequest(&ratelimitv1.MultiLimitRequest{
		Limits: []*ratelimitv1.LimitRequest{limitReq("fresh", 10), limitReq("spent", 1)}}))
	if err != nil || resp.Msg.Passed || !resp.Msg.Results[0].Success || resp.Msg.Results[1].Success ||
		resp.Msg.Results[0].Identifier != "fresh" || resp.Msg.Results[1].Identifier != "spent" {
		t.Fatalf("MultiLimit: %v, %v", resp, err)
	}
	check, err := c.Limit(ctx, connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "fresh", Limit: 10, Duration: 60_000, Cost: new(int64(0))}))
	if err != nil || check.Msg.Remaining != 10 {
		t.Fatalf("after the denied MultiLimit: %v, %v; want nothing counted", check, err)
	}
}

// TestBatchLimit: each entry decided on its own; a batch over the bound is
// refused by its size, in protobuf and in JSON, before it is decoded.
func TestBatchLimit(t *testing.T) {
	url, grpcAddr := serve(t)
	ctx := context.Background()
	for i, c := range []ratelimitv1connect.RatelimitServiceClient{client(url, "json"), client(url, "grpc"), client("http://"+grpcAddr, "grpc")} {
		id := fmt.Sprint("batch_", i)
		resp, err := c.BatchLimit(ctx, connect.NewRequest(&ratelimitv1.BatchLimitRequest{
			Limits: []*ratelimitv1.LimitRequest{limitReq(id, 1), limitReq(id, 1)}}))
		if err != nil || len(resp.Msg.Results) != 2 || !resp.Msg.Results[0].Success || resp.Msg.Results[1].Success {
			t.Fatalf("BatchLimit: %v, %v", resp, err)
		}
		big := &ratelimitv1.BatchLimitRequest{}
		for range 1001 {
			big.Limits = append(big.Limits, &ratelimitv1.LimitRequest{})
		}
		if _, err := c.BatchLimit(ctx, connect.NewRequest(big)); connect.CodeOf(err) != connect.CodeInvalidArgument ||
			!strings.Contains(err.Error(), "limits: must hold 1 to 1000 limits") {
			t.Fatalf("1001 entries: %v", err)
		}
	}
}

// TestBatchStopsWhenTheCallerIsGone: BatchLimit checks its context between
// entries, so a call whose client left or whose deadline passed stops
// deciding (and counting) at once.
func TestBatchStopsWhenTheCallerIsGone(t *testing.T) {
	h, limiter, _ := newHandler(t)
	ctx, cancel := context.WithCancel(call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()}))
	cancel()
	req := &ratelimitv1.BatchLimitRequest{}
	for range 10 {
		req.Limits = append(req.Limits, limitReq("gone", 100))
	}
	if _, err := h.BatchLimit(ctx, connect.NewRequest(req)); connect.CodeOf(err) != connect.CodeCanceled {
		t.Fatalf("BatchLimit with its context cancelled: %v, want canceled", err)
	}
	if n := limiter.ActiveWindows(); n != 0 {
		t.Fatalf("the cancelled batch created %d windows", n)
	}
}

// TestOverrides: set, get, list in pages and delete over the API; an
// override applies to the next decision.
func TestOverrides(t *testing.T) {
	url, _ := serve(t)
	c := client(url, "json")
	ctx := context.Background()
	for _, id := range []string{"o1", "o2", "o3"} {
		if _, err := c.SetOverride(ctx, connect.NewRequest(&ratelimitv1.SetOverrideRequest{Namespace: "ns", Identifier: id, Limit: 7, Duration: 60_000})); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Limit(ctx, connect.NewRequest(limitReq("o1", 1000)))
	if err != nil || got.Msg.Limit != 7 || got.Msg.OverrideId == "" {
		t.Fatalf("a call under an override: %v, %v", got, err)
	}
	var seen []string
	cursor := ""
	for page := 0; page < 5; page++ {
		resp, err := c.ListOverrides(ctx, connect.NewRequest(&ratelimitv1.ListOverridesRequest{Namespace: "ns", Limit: 2, Cursor: cursor}))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range resp.Msg.Overrides {
			seen = append(seen, o.Identifier)
		}
		if cursor = resp.Msg.Cursor; cursor == "" {
			break
		}
	}
	if strings.Join(seen, ",") != "o1,o2,o3" {
		t.Fatalf("pages: %v", seen)
	}
	if _, err := c.ListOverrides(ctx, connect.NewRequest(&ratelimitv1.ListOverridesRequest{Namespace: "ns", Cursor: "%%"})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("a forged cursor: %v", err)
	}
	if _, err := c.DeleteOverride(ctx, connect.NewRequest(&ratelimitv1.DeleteOverrideRequest{Namespace: "ns", Identifier: "o1"})); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetOverride(ctx, connect.NewRequest(&ratelimitv1.GetOverrideRequest{Namespace: "ns", Identifier: "o1"})); connect.CodeOf(err) != connect.CodeNotFound {
		t.Fatalf("a deleted override: %v", err)
	}
}

// TestJSONAnswerSpellsEveryField: curl reads "success": false and
// "retryAfter": "0" rather than missing keys.
func TestJSONAnswerSpellsEveryField(t *testing.T) {
	url, _ := serve(t)
	req, _ := http.NewRequest("POST", url+ratelimitv1connect.RatelimitServiceLimitProcedure,
		bytes.NewReader([]byte(`{"namespace":"ns","identifier":"curl","limit":1,"duration":60000,"cost":2}`)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	b.ReadFrom(resp.Body)
	if got := b.String(); resp.StatusCode != 200 || !strings.HasPrefix(got, `{"success":false,"limit":"1","remaining":"1","reset":"`) ||
		!strings.HasSuffix(got, `","retryAfter":"0","overrideId":"","reservation":"","algorithm":"ALGORITHM_SLIDING_WINDOW","shadowDenied":false,"penalized":false,"wait":"0"}`) {
		t.Fatalf("%d %s", resp.StatusCode, got)
	}
}
