package envoyrls

import (
	"context"
	"math"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// QuotaDecision is ShouldRateLimit's decision of one descriptor with what
// its status does not carry: the model that decided and its quota in its
// window. Envoy's quota service (package rlqs) shapes each Envoy's
// assignment by it: a fixed window frees all at its reset, a sliding
// window a little at every moment, a token bucket at its refill.
type QuotaDecision struct {
	// Limited is set when a rule limits the descriptor; Unlimited when
	// its rule says it is unlimited; neither when no rule matches.
	Limited, Unlimited bool
	// Concurrent is set, and nothing decided or counted, when a
	// concurrency limit decides the descriptor: it takes slots, which a
	// quota filter has no way to give back.
	Concurrent bool
	// Over is set when the descriptor is over its limit; never in shadow
	// mode (Shadow: the service's, the rule's shadow_mode, or a shadow
	// override's), which answers OK to everything it counts.
	Over, Shadow bool
	// Remaining is what is left of the limit after the decision, and
	// UntilReset how long until it resets (a token bucket: until it is
	// full again).
	Remaining  int64
	UntilReset time.Duration
	// Algorithm is the model that decided, and Quota and Window its
	// quota in its window (see ratelimit.Request.Policy): a window's limit
	// and length, a token bucket's burst and the time its refill takes.
	Algorithm ratelimit.Algorithm
	Quota     int64
	Window    time.Duration
}

// decidedKey carries, in a call's context, where decide records the model
// that decided a descriptor.
type decidedKey struct{}

// decided is what decide records of a limited descriptor's decision.
type decided struct {
	algorithm ratelimit.Algorithm
	quota     int64
	window    time.Duration
	shadow    bool // the rule's shadow_mode, or an override's shadow
}

// record records d, the decision of p, into the decided of ctx, if it
// carries one.
func record(ctx context.Context, d *limitDecision, p *plan) {
	if out, ok := ctx.Value(decidedKey{}).(*decided); ok {
		*out = decided{algorithm: d.Algorithm, quota: d.Quota, window: d.QuotaWindow, shadow: p.shadow || d.Shadow}
	}
}

// Quota decides descriptor d of domain as ShouldRateLimit does (its
// hits_addend counted whatever the verdict, under the rules, overrides
// and cells every caller shares), and returns the decision with the model
// that made it.
func (s *Service) Quota(ctx context.Context, domain string, d *rlcommonv3.RateLimitDescriptor) (QuotaDecision, error) {
	if p, err := s.plan(s.config(), &rlsv3.RateLimitRequest{Domain: domain}, d); err == nil && p.isConcurrency() {
		return QuotaDecision{Concurrent: true}, nil
	}
	var got decided
	resp, err := s.ShouldRateLimit(context.WithValue(ctx, decidedKey{}, &got),
		&rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if err != nil {
		return QuotaDecision{}, err
	}
	st := resp.GetStatuses()[0]
	return QuotaDecision{
		Limited:    st.GetCurrentLimit() != nil,
		Unlimited:  st.GetCurrentLimit() == nil && st.GetLimitRemaining() == math.MaxUint32,
		Over:       resp.GetOverallCode() == rlsv3.RateLimitResponse_OVER_LIMIT,
		Shadow:     s.shadow || got.shadow,
		Remaining:  int64(st.GetLimitRemaining()),
		UntilReset: st.GetDurationUntilReset().AsDuration(),
		Algorithm:  got.algorithm,
		Quota:      got.quota,
		Window:     got.window,
	}, nil
}
