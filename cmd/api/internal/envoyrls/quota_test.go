package envoyrls

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// manualClock is a clock the test moves.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *manualClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *manualClock) advance(d time.Duration) { c.mu.Lock(); c.now = c.now.Add(d); c.mu.Unlock() }

// multiservice is envoyproxy/ratelimit's example configuration of its
// multiservice-tokenquota integration test: two backends' quotas, 1 and 2
// a minute, each naming its backend in its metadata.
const multiservice = `domain: rl
descriptors:
  - key: service
    value: service_1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata:
      service_with_quota:
        name: "service_1"
  - key: service
    value: service_2
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2}
    metadata:
      service_with_quota:
        name: "service_2"
`

// withAddend is a descriptor of one entry with a per-descriptor
// hits_addend.
func withAddend(key, value string, hits uint64) *rlcommonv3.RateLimitDescriptor {
	return &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}},
		HitsAddend: wrapperspb.UInt64(hits)}
}

// TestMultiserviceTokenQuota is envoyproxy/ratelimit's
// multiservice-tokenquota integration test, request by request, as Envoy
// drives it: on the request path both services' quotas are checked with
// hits_addend 0 and the answer's dynamic metadata names a service with
// quota left (first in request order); on the response path the service
// that served is debited 1. service_1 serves 1 and 2, service_2 serves 3,
// 4 and 5 (debits counted past the limit, as there), the 6th is refused,
// and once the window has passed service_1 serves again.
func TestMultiserviceTokenQuota(t *testing.T) {
	clock := &manualClock{now: time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)}
	limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newServiceOn(t, limiter, multiservice, prometheus.NewRegistry(), WithDynamicMetadata(true))
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	request := func() (*rlsv3.RateLimitResponse, string) {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			withAddend("service", "service_1", 0), withAddend("service", "service_2", 0)}})
		if err != nil {
			t.Fatal(err)
		}
		name := resp.DynamicMetadata.GetFields()["metadata"].GetStructValue().GetFields()["service_with_quota"].
			GetStructValue().GetFields()["name"].GetStringValue()
		return resp, name
	}
	debit := func(service string) {
		t.Helper()
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "rl", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			withAddend("service", service, 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []string{"service_1", "service_1", "service_2", "service_2", "service_2", ""} {
		resp, name := request()
		overall := rlsv3.RateLimitResponse_OK
		if want == "" {
			overall = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if resp.OverallCode != overall || name != want {
			md, _ := protojson.Marshal(resp.DynamicMetadata)
			t.Fatalf("request %d: %v, metadata %s; want %v served by %q", i+1, resp.OverallCode, md, overall, want)
		}
		if want == "" {
			if _, ok := resp.DynamicMetadata.Fields["metadata"]; ok {
				t.Fatalf("request %d: metadata with every quota spent: %v", i+1, resp.DynamicMetadata)
			}
			break
		}
		debit(want)
	}
	// Two windows on, the sliding window holds nothing of the first.
	clock.advance(2 * time.Minute)
	if resp, name := request(); resp.OverallCode != rlsv3.RateLimitResponse_OK || name != "service_1" {
		t.Fatalf("after the window: %v served by %q, want service_1", resp.OverallCode, name)
	}
}

// TestQuotaMode: the overall answer is over when any descriptor that is
// not a quota is over, or every quota is; the descriptors' statuses are
// their own, as envoyproxy/ratelimit answers them.
func TestQuotaMode(t *testing.T) {
	const cfg = `domain: q
descriptors:
  - {key: quota_a, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: quota_b, quota_mode: true, rate_limit: {unit: hour, requests_per_unit: 1}}
  - {key: plain, rate_limit: {unit: hour, requests_per_unit: 1}}
`
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	for _, tc := range []struct {
		name     string
		spent    []string // descriptors spent before the request
		request  []string
		over     bool
		statuses string
	}{
		{"plain over, quota fine", []string{"plain"}, []string{"plain", "quota_a"}, true, "[OVER_LIMIT OK]"},
		{"the only quota over", []string{"quota_a"}, []string{"plain", "quota_a"}, true, "[OK OVER_LIMIT]"},
		{"all under", nil, []string{"plain", "quota_a"}, false, "[OK OK]"},
		{"every quota over", []string{"quota_a", "quota_b"}, []string{"quota_a", "quota_b"}, true, "[OVER_LIMIT OVER_LIMIT]"},
		{"one quota of two over", []string{"quota_a"}, []string{"quota_a", "quota_b"}, false, "[OVER_LIMIT OK]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newService(t, cfg)
			descs := func(keys []string, hits uint64) []*rlcommonv3.RateLimitDescriptor {
				var out []*rlcommonv3.RateLimitDescriptor
				for _, k := range keys {
					out = append(out, withAddend(k, "x", hits))
				}
				return out
			}
			if len(tc.spent) > 0 {
				if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "q", Descriptors: descs(tc.spent, 1)}); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "q", Descriptors: descs(tc.request, 1)})
			if err != nil {
				t.Fatal(err)
			}
			var codes []string
			for _, st := range resp.Statuses {
				codes = append(codes, st.Code.String())
			}
			if got := resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT; got != tc.over || fmt.Sprint(codes) != tc.statuses {
				t.Fatalf("overall over %v, statuses %v; want %v, %s", got, codes, tc.over, tc.statuses)
			}
		})
	}
}

// TestDynamicMetadata: the answer's metadata holds the domain, every
// descriptor's entries and hits addend, the request's hits addend, and the
// metadata of the rules not over, merged first-come; the configuration's
// own metadata is never changed by a merge.
func TestDynamicMetadata(t *testing.T) {
	const cfg = `domain: m
descriptors:
  - {key: a, rate_limit: {unit: hour, requests_per_unit: 5}, metadata: {route: {primary: a, region: eu}, tier: gold}}
  - {key: b, rate_limit: {unit: hour, requests_per_unit: 5}, metadata: {route: {primary: b, zone: z1}, tier: silver}}
  - {key: c, rate_limit: {unit: hour, requests_per_unit: 0}, metadata: {blocked: true}}
`
	s, _ := newService(t, cfg, WithDynamicMetadata(true))
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	for range 2 { // the second answer proves the first changed no rule's metadata
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "m", HitsAddend: 2, Descriptors: []*rlcommonv3.RateLimitDescriptor{
			{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "a", Value: "1"}}},
			withAddend("b", "2", 1),
			{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "c", Value: "3"}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := protojson.Marshal(resp.DynamicMetadata)
		want := `{"descriptors":[{"entries":["a=1"]},{"entries":["b=2"],"hitsAddend":1},{"entries":["c=3"]}],"domain":"m",` +
			`"hitsAddend":2,"metadata":{"route":{"primary":"a","region":"eu","zone":"z1"},"tier":"gold"}}`
		if string(normalize(t, got)) != string(normalize(t, []byte(want))) {
			t.Fatalf("dynamic metadata\n got %s\nwant %s", got, want)
		}
	}
	plain, _ := newService(t, cfg)
	if resp, _ := plain.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "m", Descriptors: one("a", "1")}); resp.DynamicMetadata != nil {
		t.Fatalf("dynamic metadata without the setting: %v", resp.DynamicMetadata)
	}
}

// normalize re-encodes JSON with sorted keys and no spaces.
func normalize(t *testing.T, b []byte) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	out, _ := json.Marshal(v)
	return out
}
