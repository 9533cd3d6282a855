package transport_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
)

// samples returns the observation counts of unkey_request_duration_seconds
// by "protocol method outcome".
func samples(t *testing.T, reg *prometheus.Registry) map[string]uint64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, f := range families {
		if f.GetName() != "unkey_request_duration_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			out[labels["protocol"]+" "+labels["method"]+" "+labels["outcome"]] = m.GetHistogram().GetSampleCount()
		}
	}
	return out
}

// TestLatencyMetric: every call on every route and both ports is timed
// under its protocol, its method and its outcome; a path that names no
// method is "unknown", so a caller cannot grow the series.
func TestLatencyMetric(t *testing.T) {
	s := daemontest.Start(t, nil, "UNKEY_GRPC_ADDR=127.0.0.1:0")
	url, grpcAddr := s.URL, s.GRPCAddr
	// Windows of 30 days: no window's end falls between a key's two calls
	// (at a minute's, the first call's count would weigh less than one and
	// the second pass).
	limit := `{"namespace":"ns","identifier":"lat","limit":1,"duration":2592000000}`
	for range 2 { // passed, then denied
		post(t, url+"/ratelimit.v1.RatelimitService/Limit", "application/json", strings.NewReader(limit))
	}
	post(t, url+"/ratelimit.v1.RatelimitService/Limit", "application/json", strings.NewReader(`{"namespace":""}`))
	post(t, url+"/v2/ratelimit.limit", "application/json", strings.NewReader(limit))
	post(t, url+"/json", "application/json", strings.NewReader(`{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`))
	for i := range 3 {
		post(t, url+"/ratelimit.v1.RatelimitService/NoSuchMethod"+strings.Repeat("x", i), "application/json", strings.NewReader(`{}`))
	}
	conn := loopback.Dial(t, grpcAddr)
	for range 2 {
		conn.Invoke(context.Background(), "/ratelimit.v1.RatelimitService/Limit",
			&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "grpc", Limit: 1, Duration: 2592000000}, new(ratelimitv1.LimitResponse))
	}
	got := samples(t, s.Registry())
	for series, want := range map[string]uint64{
		"connect Limit passed":      1,
		"connect Limit denied":      1,
		"connect Limit error":       1,
		"v2 ratelimit.limit denied": 1, // the same counter as the Connect calls
		"json json passed":          1,
		"connect unknown error":     3,
		"grpc Limit passed":         1,
		"grpc Limit denied":         1,
	} {
		if got[series] != want {
			t.Errorf("%s: %d samples, want %d (all: %v)", series, got[series], want, got)
		}
	}
	if len(got) != 8 {
		t.Errorf("series %v, want only the 8 above", got)
	}
}

// TestLatencyLabelsOnTheGRPCPort: an unauthenticated call of any path on
// the grpc-go port is timed as method "unknown" unless the server serves
// the method, so that nobody grows the series (before: one series per
// path a caller made up).
func TestLatencyLabelsOnTheGRPCPort(t *testing.T) {
	s := daemontest.Start(t, nil, "UNKEY_AUTH_TOKENS=tok_0123456789abcdef=ws", "UNKEY_GRPC_ADDR=127.0.0.1:0")
	grpcAddr := s.GRPCAddr
	conn := loopback.Dial(t, grpcAddr)
	for i := range 20 {
		conn.Invoke(context.Background(), fmt.Sprintf("/ratelimit.v1.RatelimitService/Made%d", i),
			&ratelimitv1.LimitRequest{}, new(ratelimitv1.LimitResponse))
	}
	conn.Invoke(context.Background(), "/ratelimit.v1.RatelimitService/Limit", &ratelimitv1.LimitRequest{}, new(ratelimitv1.LimitResponse))
	got := samples(t, s.Registry())
	if got["grpc unknown error"] != 20 || got["grpc Limit error"] != 1 || len(got) != 2 {
		t.Fatalf("series %v, want 20 unknown errors and 1 Limit error", got)
	}
}
