package envoyrls

import (
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"math/rand/v2"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FuzzFastRateLimitRequest: whatever the fast reader of /json's request
// accepts, protojson accepts too and reads as the same message; what it
// refuses is left to protojson.
func FuzzFastRateLimitRequest(f *testing.F) {
	for _, seed := range []string{
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u_1"}]}]}`,
		` { "domain" : "d" , "hits_addend" : 3 , "descriptors" : [ { "entries" : [ ] } , {"entries":[{"key":"a","value":"é"},{"value":"v","key":"k"}]} ] } `,
		`{"domain":"d","hitsAddend":4294967295}`, `{"domain":"d","hitsAddend":4294967296}`, `{"hitsAddend":"5"}`,
		`{"hitsAddend":01}`, `{"hitsAddend":1.0}`, `{"hitsAddend":1e2}`, `{"domain":"d","domain":"e"}`,
		`{"domain":"a\u0041"}`, `{"domain":null}`, `{"descriptors":[{"entries":[{"key":"k","key":"j"}]}]}`,
		`{"descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":1,"unit":"SECOND"}}]}`,
		`{"descriptors":[{"hitsAddend":2,"entries":[]}]}`, `{}`, `{"DOMAIN":"d"}`, "{\"domain\":\"\xff\"}", `{"domain":"d"} x`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast rlsv3.RateLimitRequest
		if !fastRateLimitRequest(body, &fast) {
			if len(fast.Descriptors) > 0 || fast.Domain != "" || fast.HitsAddend != 0 {
				t.Fatalf("%q: refused, and left %v", body, &fast)
			}
			return
		}
		var slow rlsv3.RateLimitRequest
		if err := protojson.Unmarshal(body, &slow); err != nil {
			t.Fatalf("fast accepted %q, protojson refused it: %v", body, err)
		}
		if !proto.Equal(&fast, &slow) {
			t.Fatalf("%q: fast %v, protojson %v", body, &fast, &slow)
		}
	})
}

// TestFastRateLimitRequestTakesTheCommonShape: Envoy's request as /json
// callers send it is read by the fast path; the rest is left to protojson.
func TestFastRateLimitRequestTakesTheCommonShape(t *testing.T) {
	for body, want := range map[string]bool{
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u_1"}]}],"hitsAddend":2}`: true,
		`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u\"1"}]}]}`:               false,
		`{"domain":"bench","descriptors":[{"entries":[],"limit":{"requestsPerUnit":1}}]}`:              false,
	} {
		var m rlsv3.RateLimitRequest
		if got := fastRateLimitRequest([]byte(body), &m); got != want {
			t.Errorf("%s: fast %v, want %v", body, got, want)
		}
	}
}

// TestFastRateLimitResponse: what the fast writer writes reads back, with
// protojson, as the message it was written from, for random answers of the
// common shape (every unit and code, names, durations to the nanosecond);
// an answer with headers, a body, metadata, a quota, a unit multiplier or
// a name to escape is left to protojson.
func TestFastRateLimitResponse(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { return rng.IntN(n) }
	for range 2000 {
		m := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_Code(pick(3))}
		for range pick(4) {
			s := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_Code(pick(3)), LimitRemaining: uint32(rng.Int64N(1 << 32))}
			if pick(4) > 0 {
				s.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(pick(3) * rng.IntN(1<<30)),
					Unit: rlsv3.RateLimitResponse_RateLimit_Unit(pick(8)), Name: []string{"", "per_user", "daily quota"}[pick(3)]}
			}
			if pick(4) > 0 {
				nanos := []int32{0, 500_000_000, 1_000, 7, 123_456_789}[pick(5)]
				s.DurationUntilReset = durationpb.New(time.Duration(rng.Int64N(1<<33))*time.Second + time.Duration(nanos))
			}
			m.Statuses = append(m.Statuses, s)
		}
		for range pick(3) {
			m.ResponseHeadersToAdd = append(m.ResponseHeadersToAdd, &corev3.HeaderValue{
				Key: []string{"Retry-After", "RateLimit-Limit", ""}[pick(3)], Value: []string{"45", "10", ""}[pick(3)]})
		}
		out, ok := appendRateLimitResponse(nil, m)
		if !ok {
			t.Fatalf("%v: not written", m)
		}
		var back rlsv3.RateLimitResponse
		if err := protojson.Unmarshal(out, &back); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if !proto.Equal(m, &back) {
			t.Fatalf("wrote %s for %v, read back %v", out, m, &back)
		}
	}
	md, _ := structpb.NewStruct(map[string]any{"k": "v"})
	for _, m := range []*rlsv3.RateLimitResponse{
		{ResponseHeadersToAdd: nil, RawBody: []byte("x")},
		{RequestHeadersToAdd: []*corev3.HeaderValue{{Key: "k", Value: "v"}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "RateLimit", Value: `"per_user";r=9;t=42`}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{{Key: "k", RawValue: []byte("v")}}},
		{ResponseHeadersToAdd: []*corev3.HeaderValue{nil}},
		{DynamicMetadata: md},
		{Quota: &rlsv3.RateLimitResponse_Quota{}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Quota: &rlsv3.RateLimitResponse_Quota{}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{UnitMultiplier: wrapperspb.UInt32(5)}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{CurrentLimit: &rlsv3.RateLimitResponse_RateLimit{Name: `a"b`}}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: 7}}},
		{Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{nil}},
	} {
		if out, ok := appendRateLimitResponse(nil, m); ok {
			t.Errorf("%v: written as %s, want it left to protojson", m, out)
		}
	}
}
