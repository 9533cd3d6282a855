package envoyrls

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// newService returns the adapter on an in-memory limiter and overrides,
// with the rules of yaml.
func newService(t *testing.T, yaml string, opts ...Option) (*Service, *overrides.Registry) {
	t.Helper()
	limiter, err := ratelimit.New("test")
	if err != nil {
		t.Fatal(err)
	}
	return newServiceOn(t, limiter, yaml, prometheus.NewRegistry(), opts...)
}

// newServiceOn returns the adapter on limiter and in-memory overrides, with
// the rules of yaml and its metrics registered with reg.
func newServiceOn(t *testing.T, limiter *ratelimit.Service, yaml string, reg *prometheus.Registry, opts ...Option) (*Service, *overrides.Registry) {
	t.Helper()
	cfg, err := rlsconfig.Load(rlsconfig.File{Name: "test.yaml", Data: []byte(yaml)})
	if err != nil {
		t.Fatal(err)
	}
	return newServiceWith(t, limiter, cfg, reg, opts...)
}

// newServiceWith returns the adapter on limiter and in-memory overrides,
// with the rules of cfg and its metrics registered with reg.
func newServiceWith(t testing.TB, limiter *ratelimit.Service, cfg *rlsconfig.Config, reg *prometheus.Registry, opts ...Option) (*Service, *overrides.Registry) {
	t.Helper()
	p, ov := newPipeline(t, limiter)
	return newServiceOnPipeline(t, p, cfg, reg, opts...), ov
}

// newPipeline returns a pipeline on limiter and in-memory overrides.
func newPipeline(t testing.TB, limiter *ratelimit.Service, opts ...pipeline.Option) (*pipeline.Pipeline, *overrides.Registry) {
	t.Helper()
	ov, err := overrides.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(limiter, ov, prometheus.NewRegistry(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return p, ov
}

// newServiceOnPipeline returns the adapter on p, with the rules of cfg and
// its metrics registered with reg.
func newServiceOnPipeline(t testing.TB, p *pipeline.Pipeline, cfg *rlsconfig.Config, reg *prometheus.Registry, opts ...Option) *Service {
	t.Helper()
	l, err := transport.NewLayer(access.Tokens{}, transport.NewBudget(transport.DefaultBudget, transport.DefaultShare), slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(l, p, func() *rlsconfig.Config { return cfg }, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func one(key, value string) []*rlcommonv3.RateLimitDescriptor {
	return []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: key, Value: value}}}}
}

// TestYearRulesAndOverrides: a year rule keeps a 365-day window (longer than
// the API lets callers ask for); an override set on the descriptor's
// counter name replaces the rule's limit and window.
func TestYearRulesAndOverrides(t *testing.T) {
	s, ov := newService(t, "domain: d\ndescriptors:\n  - key: plan\n    rate_limit: {unit: year, requests_per_unit: 3}\n")
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("plan", "free")})
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Statuses[0]
	if st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_YEAR || st.LimitRemaining != 2 ||
		st.DurationUntilReset.AsDuration() > 365*24*time.Hour || st.DurationUntilReset.AsDuration() <= 0 {
		t.Fatalf("year rule: %v", st)
	}
	if _, err := ov.Set(ctx, overrides.Override{Workspace: access.OpenWorkspace, Namespace: "envoy:d", Identifier: "plan=free",
		Limit: 100, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	resp, err = s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("plan", "free")})
	if err != nil {
		t.Fatal(err)
	}
	if st := resp.Statuses[0]; st.CurrentLimit.RequestsPerUnit != 100 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR ||
		st.LimitRemaining != 99 {
		t.Fatalf("with an override of 100 an hour: %v", st)
	}
}

// TestGlobalShadowMode: over the limit, the answer is OK, and the counts
// are kept as without shadow mode.
func TestGlobalShadowMode(t *testing.T) {
	s, _ := newService(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n", WithShadowMode(true))
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	for i, wantStatus := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("k", "v")})
		if err != nil {
			t.Fatal(err)
		}
		if resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].Code != wantStatus {
			t.Fatalf("call %d: overall %v, status %v; want OK overall and %v", i, resp.OverallCode, resp.Statuses[0].Code, wantStatus)
		}
	}
}

// TestSeveralLimits: "2 a second and 5 per 5 minutes" on one descriptor.
// Each limit is its own window; the descriptor is over when any is, and
// current_limit names the tightest. Counting hits over the limit (the
// default), every window counts every hit; without, a hit is counted in
// all or in none.
func TestSeveralLimits(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2, name: burst}
    rate_limits:
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 5, name: five_minutes}
`
	type want struct {
		code      rlsv3.RateLimitResponse_Code
		limit     uint32
		name      string
		unit      rlsv3.RateLimitResponse_RateLimit_Unit
		remaining uint32
	}
	const (
		ok    = rlsv3.RateLimitResponse_OK
		over  = rlsv3.RateLimitResponse_OVER_LIMIT
		sec   = rlsv3.RateLimitResponse_RateLimit_SECOND
		fiveM = rlsv3.RateLimitResponse_RateLimit_UNKNOWN // Envoy's unit has no multiplier
	)
	for _, tc := range []struct {
		name    string
		counted bool
		// steps: a hit, after advancing the clock by the step's wait.
		steps []struct {
			wait time.Duration
			want want
		}
	}{
		{"over-limit hits counted", true, []struct {
			wait time.Duration
			want want
		}{
			{0, want{ok, 2, "burst", sec, 1}},
			{0, want{ok, 2, "burst", sec, 0}},
			{0, want{over, 2, "burst", sec, 0}},             // counted in the 5 minutes too: 3 of 5
			{2 * time.Second, want{ok, 2, "burst", sec, 1}}, // 4 of 5: a tie goes to the first
			{0, want{ok, 2, "burst", sec, 0}},               // 5 of 5
			{0, want{over, 2, "burst", sec, 0}},             // both over
			{2 * time.Second, want{over, 5, "five_minutes", fiveM, 0}},
		}},
		{"only admitted hits counted", false, []struct {
			wait time.Duration
			want want
		}{
			{0, want{ok, 2, "burst", sec, 1}},
			{0, want{ok, 2, "burst", sec, 0}},
			{0, want{over, 2, "burst", sec, 0}}, // counted nowhere: 2 of 5
			{2 * time.Second, want{ok, 2, "burst", sec, 1}},
			{0, want{ok, 2, "burst", sec, 0}},
			{0, want{over, 2, "burst", sec, 0}}, // counted nowhere: 4 of 5
			{2 * time.Second, want{ok, 5, "five_minutes", fiveM, 0}},
			{0, want{over, 5, "five_minutes", fiveM, 0}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := &manualClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
			limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
			if err != nil {
				t.Fatal(err)
			}
			s, _ := newServiceOn(t, limiter, rules, prometheus.NewRegistry(), WithOverLimitHitsCounted(tc.counted), WithClock(clock.Now))
			ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
			for i, step := range tc.steps {
				clock.advance(step.wait)
				resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("user", "u1")})
				if err != nil {
					t.Fatal(err)
				}
				st := resp.Statuses[0]
				got := want{st.Code, st.CurrentLimit.GetRequestsPerUnit(), st.CurrentLimit.GetName(), st.CurrentLimit.GetUnit(), st.LimitRemaining}
				if got != step.want || resp.OverallCode != step.want.code {
					t.Errorf("hit %d: %+v (overall %v), want %+v", i+1, got, resp.OverallCode, step.want)
				}
			}
		})
	}
}

// TestIETFHeaders: RateLimit-Policy and RateLimit name each limited
// descriptor's rule (its limit's name, its name, else its path), with the
// window of the limit that decided (a multiple of a unit included); an
// unlimited descriptor has no item. Beside the old trio when both are on.
func TestIETFHeaders(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10, name: per_user}
  - key: plan
    rate_limits: [{unit: minute, unit_multiplier: 5, requests_per_unit: 100}]
  - key: internal
    rate_limit: {unlimited: true}
`
	req := &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		one("user", "u")[0], one("plan", "p")[0], one("internal", "x")[0]}}
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	for _, tc := range []struct {
		name  string
		opts  []Option
		names []string
	}{
		{"IETF", []Option{WithIETFHeaders(true)}, []string{"RateLimit-Policy", "RateLimit"}},
		{"both", []Option{WithIETFHeaders(true), WithResponseHeaders(DefaultHeaders)},
			[]string{"RateLimit-Policy", "RateLimit", "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"}},
		{"neither", nil, nil},
	} {
		s, _ := newService(t, rules, tc.opts...)
		resp, err := s.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		var names []string
		for _, h := range resp.ResponseHeadersToAdd {
			got[h.Key] = h.Value
			names = append(names, h.Key)
		}
		if !slices.Equal(names, tc.names) {
			t.Fatalf("%s: headers %v, want %v", tc.name, names, tc.names)
		}
		if tc.names == nil {
			continue
		}
		if p := got["RateLimit-Policy"]; p != `"per_user";q=10;w=60, "d.plan";q=100;w=300` {
			t.Errorf("%s: RateLimit-Policy %q", tc.name, p)
		}
		l := got["RateLimit"]
		var t1, t2 int
		if n, _ := fmt.Sscanf(l, `"per_user";r=9;t=%d, "d.plan";r=99;t=%d`, &t1, &t2); n != 2 || t1 < 1 || t1 > 60 || t2 < 1 || t2 > 300 {
			t.Errorf("%s: RateLimit %q", tc.name, l)
		}
	}
}
