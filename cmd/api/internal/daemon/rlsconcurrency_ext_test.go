package daemon_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// concurrencyRules are a domain with a concurrency rule (2 in flight per
// user, leases of a minute) and a rule that is always over.
const concurrencyRules = `domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`

// TestRLSConcurrency calls both gRPC ports as Envoy does, with a grpc-go
// client on Envoy's stubs: the request-path call of a route acquires a
// slot and answers its lease in the dynamic metadata; the stream-done call
// (apply_on_stream_done), whose descriptor holds the lease under
// unkey.release, frees it once; a refused request holds nothing.
func TestRLSConcurrency(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(concurrencyRules), 0o644); err != nil {
		t.Fatal(err)
	}
	ts := startServer(t, "UNKEY_RLS_CONFIG="+dir, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	for port, addr := range map[string]string{"main": strings.TrimPrefix(ts.url, "http://"), "grpc-go": ts.grpcAddr} {
		t.Run(port, func(t *testing.T) {
			client := rlscall.Client(t, addr)
			user := "u-" + port
			// onRequest is the route's request-path call; it returns the
			// answer and the lease ids in its dynamic metadata.
			onRequest := func(descs ...*rlcommonv3.RateLimitDescriptor) (rlsv3.RateLimitResponse_Code, string) {
				t.Helper()
				resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: descs})
				if err != nil {
					t.Fatal(err)
				}
				lease := resp.GetDynamicMetadata().GetFields()[envoyrls.LeaseMetadataKey].GetStringValue()
				return resp.OverallCode, lease
			}
			// onStreamDone is the stream-done call: the route's metadata
			// action copies the lease into the release entry.
			onStreamDone := func(lease string) {
				t.Helper()
				resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm",
					Descriptors: []*rlcommonv3.RateLimitDescriptor{rlscall.Desc("user", user, envoyrls.ReleaseKey, lease)}})
				if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
					t.Fatalf("stream done: %v %v", resp, err)
				}
			}
			ok := rlsv3.RateLimitResponse_OK
			code, first := onRequest(rlscall.Desc("user", user))
			if code != ok || first == "" {
				t.Fatalf("first request: %v, lease %q", code, first)
			}
			if code, second := onRequest(rlscall.Desc("user", user)); code != ok || second == "" || second == first {
				t.Fatalf("second request: %v, lease %q", code, second)
			}
			if code, lease := onRequest(rlscall.Desc("user", user)); code == ok || lease != "" {
				t.Fatalf("third request of 2 in flight: %v, lease %q", code, lease)
			}
			onStreamDone(first)
			onStreamDone(first) // a repeated release frees nothing
			if code, lease := onRequest(rlscall.Desc("user", user)); code != ok || lease == "" {
				t.Fatalf("after a release: %v, lease %q", code, lease)
			}
			if code, _ := onRequest(rlscall.Desc("user", user)); code == ok {
				t.Fatal("the release freed two slots")
			}

			// Refused by another descriptor: the slot taken is given back.
			other := user + "-other"
			if code, lease := onRequest(rlscall.Desc("user", other), rlscall.Desc("blocked", "x")); code == ok || lease != "" {
				t.Fatalf("a request refused by another rule: %v, lease %q", code, lease)
			}
			for i := range 2 {
				if code, _ := onRequest(rlscall.Desc("user", other)); code != ok {
					t.Fatalf("slot %d of 2 after a refused request took none: %v", i, code)
				}
			}
			// A forged lease frees nothing: one bit of its middle changed
			// (its last characters may carry bits a decoder ignores, and
			// "AA" may be what they were).
			forged := []byte(first)
			forged[len(forged)/2] ^= 1
			onStreamDone(string(forged))
			if code, _ := onRequest(rlscall.Desc("user", other)); code == ok {
				t.Fatal("a forged release freed a slot")
			}
			// An empty release frees nothing and is one bad release.
			onStreamDone("")
		})
	}
	_, metrics := ts.get(t, "/metrics")
	for _, want := range []string{`unkey_rls_in_flight{domain="llm",rule="llm.user"} 2`, `unkey_rls_bad_releases_total 4`,
		`unkey_ratelimit_leases_total{outcome="repeated"} 2`, `unkey_ratelimit_limits_decided_total{model="concurrency",outcome="denied"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s; they hold:\n%s", want, metricLines(metrics, "unkey_rls_bad_releases_total", "unkey_ratelimit_leases_total", "unkey_rls_in_flight"))
		}
	}
}

// metricLines returns the lines of a /metrics page that start with one of
// names, for a failure's message.
func metricLines(page string, names ...string) string {
	var out []string
	for line := range strings.Lines(page) {
		for _, n := range names {
			if strings.HasPrefix(line, n) {
				out = append(out, strings.TrimSpace(line))
			}
		}
	}
	return strings.Join(out, "\n")
}

// TestRLSGiveBackWithoutTheLedger: a request that another rule refuses
// gives its slots back at once even while the ledger that records
// releases (Redis here) is down: its lease id never left the call, so no
// ledger is asked. (Given back as a release, it was refused by the
// ledger, and each refused request held a slot for its whole lease.)
func TestRLSGiveBackWithoutTheLedger(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(concurrencyRules), 0o644); err != nil {
		t.Fatal(err)
	}
	r := testserver.StartRedis(t)
	ts := startServer(t, "UNKEY_RLS_CONFIG="+dir, "UNKEY_GRPC_ADDR=127.0.0.1:0", "UNKEY_REDIS_URL="+r.URL())
	client := rlscall.Client(t, ts.grpcAddr)
	ask := func(descs ...*rlcommonv3.RateLimitDescriptor) rlsv3.RateLimitResponse_Code {
		t.Helper()
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return resp.OverallCode
	}
	r.Kill()
	for i := range 5 {
		if code := ask(rlscall.Desc("user", "u"), rlscall.Desc("blocked", "x")); code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("request %d, refused by a rule: %v", i, code)
		}
	}
	// The gauge the acquisitions set drops by what was given back.
	if _, metrics := ts.get(t, "/metrics"); !strings.Contains(metrics, `unkey_rls_in_flight{domain="llm",rule="llm.user"} 0`) {
		t.Errorf("after five refused requests gave their slots back, metrics lack unkey_rls_in_flight{domain=\"llm\",rule=\"llm.user\"} 0:\n%s", metrics)
	}
	// Two slots of one counter in one refused request: the gauge reads
	// what is held after both were given back, not the second's count less
	// its own slot.
	if code := ask(rlscall.Desc("user", "u"), rlscall.Desc("user", "u"), rlscall.Desc("blocked", "x")); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("two slots and a refusing rule: %v", code)
	}
	if _, metrics := ts.get(t, "/metrics"); !strings.Contains(metrics, `unkey_rls_in_flight{domain="llm",rule="llm.user"} 0`) {
		t.Errorf("after a request gave two slots of one counter back, metrics lack unkey_rls_in_flight{domain=\"llm\",rule=\"llm.user\"} 0:\n%s", metrics)
	}
	for i := range 2 {
		if code := ask(rlscall.Desc("user", "u")); code != rlsv3.RateLimitResponse_OK {
			t.Fatalf("slot %d of 2 after five refused requests: %v", i, code)
		}
	}
	// Each was given back once: the limit still holds.
	if code := ask(rlscall.Desc("user", "u")); code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a third slot of 2: %v", code)
	}
}
