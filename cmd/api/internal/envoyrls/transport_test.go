package envoyrls_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
)

const token = "tok_envoyrls_0123456789"

const rules = `
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2}
`

// otherDomainToken may decide only in the domain "other".
const otherDomainToken = "tok_envoyrls_other_0123456789"

// serve starts the API, as package daemon builds it, with rules, and
// returns the main port's URL and the grpc-go port's address.
func serve(t *testing.T) (url, grpcAddr string) {
	t.Helper()
	rulesFile := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rulesFile, []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	keysFile := daemontest.KeysFile(t, daemontest.Key{Secret: otherDomainToken, Workspace: "ws", Permissions: []string{"ratelimit.envoy:other.limit"}})
	s := daemontest.Start(t, nil, "UNKEY_AUTH_TOKENS="+token+"=ws", "UNKEY_AUTH_KEYS_FILE="+keysFile,
		"UNKEY_RLS_CONFIG="+rulesFile, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	return s.URL, s.GRPCAddr
}

// client dials addr with grpc-go and Envoy's generated stubs, as an
// Envoy-based gateway's rate limit client calls the service.
func client(t *testing.T, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(loopback.Dial(t, addr))
}

func request(domain string, values ...string) *rlsv3.RateLimitRequest {
	req := &rlsv3.RateLimitRequest{Domain: domain}
	for _, v := range values {
		req.Descriptors = append(req.Descriptors, &rlcommonv3.RateLimitDescriptor{
			Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "user", Value: v}}})
	}
	return req
}

// TestTransports: Envoy's ShouldRateLimit through grpc-go on the main port
// (h2c, connect-go's server) and on the grpc-go port, and /json, decide on
// the same counters, and answer failures alike.
func TestTransports(t *testing.T) {
	url, grpcAddr := serve(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	main, own := client(t, strings.TrimPrefix(url, "http://")), client(t, grpcAddr)
	for i, c := range []rlsv3.RateLimitServiceClient{main, own} {
		resp, err := c.ShouldRateLimit(ctx, request("edge", "alice"))
		if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != uint32(1-i) {
			t.Fatalf("call %d: %v, %v", i, resp, err)
		}
	}
	status, body := postJSON(t, url, token, `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"alice"}]}]}`)
	if status != http.StatusTooManyRequests || !strings.Contains(body, `"overallCode":"OVER_LIMIT"`) {
		t.Fatalf("/json, third call: %d %s, want 429 OVER_LIMIT", status, body)
	}
	for _, c := range []rlsv3.RateLimitServiceClient{main, own} {
		if _, err := c.ShouldRateLimit(context.Background(), request("edge", "bob")); grpcCode(err) != codes.Unauthenticated {
			t.Errorf("no token: %v", err)
		}
		if _, err := c.ShouldRateLimit(ctx, request("", "bob")); grpcCode(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "domain: must not be empty") {
			t.Errorf("no domain: %v", err)
		}
		if _, err := c.ShouldRateLimit(ctx, request("edge", make([]string, envoyrls.MaxDescriptors+1)...)); grpcCode(err) != codes.InvalidArgument ||
			!strings.Contains(err.Error(), "descriptors: must hold 1 to 100 descriptors") {
			t.Errorf("101 descriptors: %v", err)
		}
	}
	// A key that may decide only in another domain is refused, naming the
	// permission, and counts nothing.
	other := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+otherDomainToken)
	for _, c := range []rlsv3.RateLimitServiceClient{main, own} {
		if _, err := c.ShouldRateLimit(other, request("edge", "carol")); grpcCode(err) != codes.PermissionDenied ||
			!strings.Contains(err.Error(), "lacks ratelimit.envoy:edge.limit") {
			t.Errorf("a key of another domain: %v, want permission denied", err)
		}
	}
	if status, body := postJSON(t, url, otherDomainToken, `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"carol"}]}]}`); status != http.StatusForbidden ||
		!strings.Contains(body, "ratelimit.envoy:edge.limit") {
		t.Errorf("/json with a key of another domain: %d %s, want 403", status, body)
	}
	if resp, err := own.ShouldRateLimit(ctx, request("edge", "carol")); err != nil || resp.Statuses[0].LimitRemaining != 1 {
		t.Errorf("carol after refused calls: %v, %v; want 1 remaining of 2 (nothing counted)", resp, err)
	}
	if status, body := postJSON(t, url, "", `{}`); status != http.StatusUnauthorized {
		t.Errorf("/json without a token: %d %s", status, body)
	}
	if status, body := postJSON(t, url, token, `{"domain":"edge","descriptors":[{"entries":[`+strings.Repeat(`{},`, 5000)+`{}]}]}`); status != http.StatusBadRequest ||
		!strings.Contains(body, "descriptors: must hold 1 to 100 descriptors of 1 to 32 entries each") {
		t.Errorf("/json with 5,001 entries: %d %s", status, body)
	}
}

func grpcCode(err error) codes.Code { return status.Code(err) }

// postJSON posts body to the /json endpoint under url with token (none if
// "").
func postJSON(t *testing.T, url, token, body string) (int, string) {
	t.Helper()
	status, raw := loopback.Post(t, url+"/json", token, "application/json", strings.NewReader(body))
	return status, string(raw)
}

// TestNegativeHitsOverTransports: Envoy's negative hits through grpc-go
// (main port and grpc-go port) and envoyproxy/ratelimit's /json give back
// to the counter the hits were counted in.
func TestNegativeHitsOverTransports(t *testing.T) {
	url, grpcAddr := serve(t)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
	main, own := client(t, strings.TrimPrefix(url, "http://")), client(t, grpcAddr)
	negative := request("edge", "dave")
	negative.Descriptors[0].IsNegativeHits = true
	negative.Descriptors[0].HitsAddend = wrapperspb.UInt64(3)
	for i, c := range []rlsv3.RateLimitServiceClient{main, own} {
		// Two hits of 2 admitted, the third refused (and counted, as
		// envoyproxy/ratelimit counts it); the three given back.
		for j, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
			if resp, err := c.ShouldRateLimit(ctx, request("edge", "dave")); err != nil || resp.OverallCode != want {
				t.Fatalf("client %d, hit %d: %v, %v; want %v", i, j, resp, err, want)
			}
		}
		if resp, err := c.ShouldRateLimit(ctx, negative); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("client %d, negative hits: %v, %v", i, resp, err)
		}
	}
	hit := `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"dave"}]}]}`
	for range 2 {
		if status, body := postJSON(t, url, token, hit); status != http.StatusOK {
			t.Fatalf("/json hit after the refunds: %d %s", status, body)
		}
	}
	status, body := postJSON(t, url, token, `{"domain":"edge","descriptors":[{"entries":[{"key":"user","value":"dave"}],"isNegativeHits":true}]}`)
	if status != http.StatusOK || !strings.Contains(body, `"overallCode":"OK"`) {
		t.Fatalf("/json negative hits: %d %s", status, body)
	}
	// One given back of the two: one hit more, then over.
	for i, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		if status, body := postJSON(t, url, token, hit); status != want {
			t.Fatalf("/json hit %d after the refund: %d %s, want %d", i, status, body, want)
		}
	}
}
