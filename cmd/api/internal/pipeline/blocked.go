package pipeline

import (
	"context"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// An override with limit 0 blocks its identifiers, as Unkey documents it: a
// request it applies to is denied and nothing is counted.

// blockedResponse is the answer to a request of duration d that an
// override with limit 0 blocks at now: denied, nothing left, reset at the
// end of the current fixed window. No wait helps, so RetryAfter is zero.
func blockedResponse(d time.Duration, now time.Time) ratelimit.Response {
	return ratelimit.Response{Reset: windowEnd(d, now)}
}

// windowEnd returns the end of the fixed window of duration d that holds
// now: the reset of a decision at now.
func windowEnd(d time.Duration, now time.Time) time.Time {
	ms := d.Milliseconds()
	if ms <= 0 {
		return now
	}
	return time.UnixMilli((now.UnixMilli()/ms + 1) * ms)
}

// multiLimit decides reqs all or nothing, as the limiter's MultiLimit does,
// where blocked[i] says that an override with limit 0 blocks reqs[i]: then
// the batch fails and nothing is counted; the other entries report what is
// left for them.
func (p *Pipeline) multiLimit(ctx context.Context, reqs []ratelimit.Request, blocked []bool) (ratelimit.MultiResponse, error) {
	anyBlocked := false
	for _, b := range blocked {
		anyBlocked = anyBlocked || b
	}
	if !anyBlocked {
		return p.limiter.DecideAll(ctx, reqs)
	}
	now := p.now()
	out := ratelimit.MultiResponse{Results: make([]ratelimit.Response, len(reqs))}
	var peeks []ratelimit.Request
	var at []int
	for i, r := range reqs {
		if blocked[i] {
			out.Results[i] = blockedResponse(r.Duration, now)
			continue
		}
		r.Cost = 0
		peeks = append(peeks, r)
		at = append(at, i)
	}
	if len(peeks) > 0 {
		resp, err := p.limiter.DecideAll(ctx, peeks)
		if err != nil {
			return ratelimit.MultiResponse{}, err
		}
		for j, i := range at {
			out.Results[i] = resp.Results[j]
		}
	}
	return out, nil
}
