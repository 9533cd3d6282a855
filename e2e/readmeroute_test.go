package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/unkeyed/ratelimit/internal/testkit/rlscall"
)

// rateLimitFilter is the namespace of the dynamic metadata Envoy's rate
// limit filter keeps an answer's dynamic metadata under.
const rateLimitFilter = "envoy.filters.http.ratelimit"

// TestReadmeConcurrencyRoute runs docs/concurrency.md's recipe as
// Envoy would: the rules as the service's configuration, the route's
// rate_limits decoded into Envoy's own RateLimit messages, and from them
// the descriptors of each call, built as Envoy builds them (a
// request_headers action from the request's header, a metadata action from
// the rate limit filter's dynamic metadata, no call when it is absent),
// sent by a grpc-go client on go-control-plane's stubs. 20 requests of a
// team hold its 20 slots; the 21st is refused and its stream-done call
// releases nothing; one request done frees a slot for the next.
func TestReadmeConcurrencyRoute(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/concurrency.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks, _ := parseBlocks("docs/concurrency.md", string(raw))
	var rules, route string
	for _, b := range blocks {
		if b.section != "Concurrency limits" || b.lang != "yaml" {
			continue
		}
		switch {
		case strings.HasPrefix(b.text, "domain:"):
			rules = b.text
		case strings.HasPrefix(b.text, "rate_limits:"):
			route = b.text
		}
	}
	if rules == "" || route == "" {
		t.Fatal("docs/concurrency.md has no rules or no route block")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "llm.yaml"), []byte(rules), 0o644); err != nil {
		t.Fatal(err)
	}
	limits := envoyRateLimits(t, route)
	ts := startServer(t, "UNKEY_RLS_CONFIG="+dir, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	client := rlscall.Client(t, ts.grpcAddr)

	// call makes the rate limit calls of one phase of a request (on the
	// request path, or once its stream is done), with the dynamic
	// metadata the request has, and returns the answer, or nil when Envoy
	// would make no call.
	call := func(headers map[string]string, md *structpb.Struct, streamDone bool) *rlsv3.RateLimitResponse {
		t.Helper()
		var descs []*rlcommonv3.RateLimitDescriptor
		for _, rl := range limits {
			if rl.GetApplyOnStreamDone() != streamDone {
				continue
			}
			if d := envoyDescriptor(t, rl, headers, md); d != nil {
				descs = append(descs, d)
			}
		}
		if len(descs) == 0 {
			return nil
		}
		resp, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	team := map[string]string{"x-team": "search"}
	type request struct{ md *structpb.Struct }
	var held []request
	for i := range 20 {
		resp := call(team, nil, false)
		if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
			t.Fatalf("request %d of 20: %v", i, resp)
		}
		// The filter keeps the answer's metadata under its name.
		held = append(held, request{md: &structpb.Struct{Fields: map[string]*structpb.Value{
			rateLimitFilter: structpb.NewStructValue(resp.GetDynamicMetadata())}}})
	}
	refused := call(team, nil, false)
	if refused.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("request 21 of 20 in flight: %v", refused)
	}
	md := &structpb.Struct{Fields: map[string]*structpb.Value{rateLimitFilter: structpb.NewStructValue(refused.GetDynamicMetadata())}}
	if resp := call(team, md, true); resp != nil {
		t.Fatalf("the refused request's stream-done call was made: %v", resp)
	}
	if resp := call(team, nil, false); resp.GetOverallCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatal("a slot freed without a release")
	}
	if resp := call(team, held[0].md, true); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("stream done: %v", resp)
	}
	if resp := call(team, nil, false); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("after a request was done, the next one: %v", resp)
	}
	if resp := call(map[string]string{"x-team": "ads"}, nil, false); resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("another team: %v", resp)
	}
}

// envoyRateLimits decodes a route's rate_limits YAML into Envoy's messages.
func envoyRateLimits(t *testing.T, route string) []*routev3.RateLimit {
	t.Helper()
	var action routev3.RouteAction
	if err := rlscall.DecodeYAML([]byte(route), &action); err != nil {
		t.Fatalf("docs/concurrency.md's route is not Envoy's RouteAction.rate_limits: %v", err)
	}
	if len(action.RateLimits) != 2 {
		t.Fatalf("docs/concurrency.md's route has %d rate limits, want 2", len(action.RateLimits))
	}
	return action.RateLimits
}

// envoyDescriptor builds rl's descriptor for a request with headers and
// dynamic metadata md as Envoy does for the two actions docs/concurrency.md's route
// uses, or nil when Envoy would send none.
func envoyDescriptor(t *testing.T, rl *routev3.RateLimit, headers map[string]string, md *structpb.Struct) *rlcommonv3.RateLimitDescriptor {
	t.Helper()
	d := &rlcommonv3.RateLimitDescriptor{}
	for _, a := range rl.Actions {
		switch {
		case a.GetRequestHeaders() != nil:
			h := a.GetRequestHeaders()
			v, ok := headers[h.HeaderName]
			if !ok {
				return nil
			}
			d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: h.DescriptorKey, Value: v})
		case a.GetMetadata() != nil:
			m := a.GetMetadata()
			if m.Source != routev3.RateLimit_Action_MetaData_DYNAMIC {
				t.Fatalf("a metadata action of source %v", m.Source)
			}
			v := md.GetFields()[m.MetadataKey.Key]
			for _, seg := range m.MetadataKey.Path {
				v = v.GetStructValue().GetFields()[seg.GetKey()]
			}
			s := v.GetStringValue()
			if s == "" {
				s = m.DefaultValue
			}
			if s == "" {
				if !m.SkipIfAbsent {
					return nil // no call for this descriptor
				}
				continue
			}
			d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: m.DescriptorKey, Value: s})
		default:
			t.Fatalf("an action this test does not build: %v", a)
		}
	}
	return d
}
