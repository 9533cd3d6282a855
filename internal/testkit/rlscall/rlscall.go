// Package rlscall calls Envoy's rate limit service as an Envoy-based
// gateway does, on grpc-go and Envoy's generated stubs, for the tests of
// the API that speak it: in-process beside the root, and as processes in
// e2e.
package rlscall

import (
	"encoding/json"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
)

// Client dials addr without TLS, closed when the test ends.
func Client(t testing.TB, addr string) rlsv3.RateLimitServiceClient {
	t.Helper()
	return rlsv3.NewRateLimitServiceClient(loopback.Dial(t, addr))
}

// Desc builds a descriptor from key, value pairs.
func Desc(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// WithHits sets a descriptor's own hits_addend.
func WithHits(d *rlcommonv3.RateLimitDescriptor, n uint64) *rlcommonv3.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// Status is what a test expects of one descriptor's status: whether it is
// over its limit, the limit that applied (0 and "" for none) and what
// remains of it.
type Status struct {
	Over      bool
	Limit     uint32
	Unit      string
	Remaining uint32
}

// StatusOf returns s as a Status.
func StatusOf(s *rlsv3.RateLimitResponse_DescriptorStatus) Status {
	got := Status{Over: s.Code == rlsv3.RateLimitResponse_OVER_LIMIT, Remaining: s.LimitRemaining}
	if l := s.CurrentLimit; l != nil {
		got.Limit, got.Unit = l.RequestsPerUnit, l.Unit.String()
	}
	return got
}

// DecodeYAML decodes an Envoy configuration written in YAML into m as
// Envoy reads one: the YAML as JSON, in protobuf's JSON mapping, with
// every typed_config one of the messages registered in the test binary.
func DecodeYAML(text []byte, m proto.Message) error {
	var tree any
	if err := yaml.Unmarshal(text, &tree); err != nil {
		return err
	}
	js, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(js, m)
}
