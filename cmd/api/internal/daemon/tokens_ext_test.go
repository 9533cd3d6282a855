package daemon_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
)

// aiBudget is an AI gateway's token budget: 1,000 tokens a minute per
// team, as Envoy AI Gateway configures it.
const aiBudget = `domain: ai-gateway
descriptors:
  - key: team
    rate_limit: {unit: minute, requests_per_unit: 1000}
`

// TestAIGatewayTokenBudget drives Envoy AI Gateway's flow through a
// grpc-go client on go-control-plane's stubs, on both gRPC ports: each LLM
// call is checked on the request path with hits_addend 0 and reported on
// the response path with the 300 tokens it used. The report that crosses
// the budget is counted, and the next check is refused: 4 calls of 10 (1,200
// tokens against 1,000). With UNKEY_RLS_COUNT_OVER_LIMIT=false (this
// service's behaviour before) every report past the budget was dropped and
// all 10 calls went through: 3,000 tokens against 1,000.
func TestAIGatewayTokenBudget(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "ai.yaml")
	if err := os.WriteFile(cfg, []byte(aiBudget), 0o644); err != nil {
		t.Fatal(err)
	}
	flow := func(t *testing.T, client rlsv3.RateLimitServiceClient) (admitted int) {
		t.Helper()
		call := func(tokens uint64) *rlsv3.RateLimitResponse {
			t.Helper()
			resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "ai-gateway",
				Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "team", Value: "search"}},
					HitsAddend: wrapperspb.UInt64(tokens)}}})
			if err != nil {
				t.Fatal(err)
			}
			return resp
		}
		for range 10 {
			if call(0).OverallCode != rlsv3.RateLimitResponse_OK { // request path
				break
			}
			admitted++
			call(300) // response path (apply_on_stream_done); Envoy ignores the answer
		}
		return admitted
	}
	for _, port := range []string{"main port", "grpc-go port"} {
		t.Run(port, func(t *testing.T) {
			for _, tc := range []struct {
				setting string
				want    int
			}{{"true", 4}, {"false", 10}} {
				ts := startServer(t, "UNKEY_RLS_CONFIG="+cfg, "UNKEY_GRPC_ADDR=127.0.0.1:0", "UNKEY_RLS_COUNT_OVER_LIMIT="+tc.setting)
				addr := strings.TrimPrefix(ts.url, "http://")
				if port == "grpc-go port" {
					addr = ts.grpcAddr
				}
				if got := flow(t, rlscall.Client(t, addr)); got != tc.want {
					t.Fatalf("UNKEY_RLS_COUNT_OVER_LIMIT=%s: %d LLM calls admitted, want %d", tc.setting, got, tc.want)
				}
			}
		})
	}
}

// TestReportOverConnectAndV2: Limit with report counts the cost whatever
// the verdict, on the Connect API and on v2; MultiLimit refuses a report.
func TestReportOverConnectAndV2(t *testing.T) {
	ts := startServer(t)
	for i, want := range []string{"true", "true", "true", "false", "false"} {
		_, out := ts.call(t, "Limit", "", `{"namespace":"llm","identifier":"team","limit":1000,"duration":60000,"cost":300,"report":true}`)
		if got := fmt.Sprint(out["success"]); got != want {
			t.Fatalf("report %d: %v, want success %s", i+1, out, want)
		}
	}
	if _, out := ts.call(t, "Limit", "", `{"namespace":"llm","identifier":"team","limit":1000,"duration":60000,"cost":0}`); out["success"] != false {
		t.Fatalf("a check after the reports spent the budget: %v", out)
	}
	status, body := ts.post(t, "/v2/ratelimit.limit", "", strings.NewReader(
		`{"namespace":"llm","identifier":"v2","limit":100,"duration":60000,"cost":150,"report":true}`))
	if status != 200 || !strings.Contains(string(body), `"success":false`) || !strings.Contains(string(body), `"remaining":0`) {
		t.Fatalf("v2 report over the budget: %d %s", status, body)
	}
	status, body = ts.post(t, "/v2/ratelimit.limit", "", strings.NewReader(`{"namespace":"llm","identifier":"v2","limit":100,"duration":60000,"cost":0}`))
	if status != 200 || !strings.Contains(string(body), `"success":false`) {
		t.Fatalf("v2 check after a report over the budget: %d %s", status, body)
	}
	status, out := ts.call(t, "MultiLimit", "", `{"limits":[{"namespace":"llm","identifier":"m","limit":10,"duration":60000,"report":true}]}`)
	if status != 400 || !strings.Contains(fmt.Sprint(out["message"]), "limits[0].report") {
		t.Fatalf("a report in a MultiLimit: %d %v", status, out)
	}
}
