package envoyrls

import (
	"context"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
)

// Negative hits. A descriptor with is_negative_hits (Envoy since 1.37:
// hits sent back, such as a request that turned out cheaper than its
// estimate, or concurrency emulated by hits on stream end) gives its hits
// back to every limit it counts in, as envoyproxy/ratelimit decrements
// its counters, and is answered OK. Each limit takes them as
// ratelimit.Service.Refund gives: a window in the cell of now (a sliding
// window's remainder in the cell before), never below zero as the process
// knows it after reading the store; a concurrency rule's slots from the
// cells that end first; a token bucket's tokens, up to its burst (counted
// as the tokens given back to it, which every process and region gives
// back to its own bucket). Envoy sends no token of the hits it gives
// back, so the cell they were counted in is not known:
// hits counted just before a window's end and given back after it are
// given back to the new window only as far as it holds as much. A refund
// reaches the other processes and regions as every give-back does,
// written as this process's total (a write replayed after a timeout is
// counted once); Envoy's own retry of a negative-hits call is a second
// refund.

// refund gives p.cost back to each of p's limits, as a hit of it is
// counted (see calls: with WithFixedWindows every limit a fixed window; an
// override's one window once), and answers OK with the tightest limit
// after it.
func (s *Service) refund(ctx context.Context, ns pipeline.Namespace, p *plan, now time.Time) (*rlsv3.RateLimitResponse_DescriptorStatus, error) {
	var out limitDecision
	var one [1]pipeline.Call
	for i, c := range s.calls(ctx, ns, p, one[:0]) {
		c.Request.Report = false
		c.Penalty, c.PenaltyMax = 0, 0 // a refund offends nobody
		d, given, err := ns.Refund(ctx, c)
		if err != nil {
			return nil, err
		}
		s.metrics.refunded.Add(float64(given))
		l := p.limits[i]
		if i == 0 || tighter(d, out.Decision) {
			out = limitDecision{Decision: d, name: l.Name, unit: unitOf(l, d.Duration)}
		}
	}
	if len(p.limits) == 0 {
		return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}, nil
	}
	return out.status(now), nil
}
