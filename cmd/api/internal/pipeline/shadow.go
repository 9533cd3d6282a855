package pipeline

import (
	"context"
	"slices"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Shadow limits. A shadow call is decided and counted as any other (a
// request its limit refuses counts nothing; a report counts whatever the
// verdict, as every report), but its answer admits it and says the limit
// would have refused it (Decision.ShadowDenied): a new limit's rollout,
// watching whom it would refuse before it does. The metrics and the
// analytics count such a decision as shadow_denied, apart from the real
// denials.

// outcome is how a decision ended, as the metrics count it.
type outcome uint8

const (
	outcomeDenied outcome = iota
	outcomePassed
	outcomeShadowDenied
)

// outcomeNames label the outcomes, by outcome.
var outcomeNames = [...]string{"denied", "passed", "shadow_denied"}

// outcomeOf is d's outcome.
func outcomeOf(d *Decision) outcome {
	switch {
	case d.ShadowDenied:
		return outcomeShadowDenied
	case d.Success:
		return outcomePassed
	}
	return outcomeDenied
}

// checkShadow refuses a shadow call that reserves (a refused reservation
// gives no token to settle, and an admitted one would hold its estimate)
// or may wait (a booking holds capacity its caller does not wait for).
func checkShadow(c *Call) error {
	switch {
	case c.Shadow && c.Request.Reserve:
		return &invalid.Error{Field: "shadow", Rule: "must not be set with reserve: a shadow decision reserves nothing"}
	case c.Shadow && c.Request.MaxWait > 0:
		return &invalid.Error{Field: "shadow", Rule: "must not be set with max_wait: a shadow decision books nothing"}
	}
	return nil
}

// shade turns the decision d of c, made as any other, into a shadow
// call's: admitted, and marked where the limit refused it.
func shade(c *Call, d *Decision) {
	d.Shadow = c.Shadow
	if c.Shadow && !d.Success {
		d.Success, d.ShadowDenied, d.RetryAfter = true, true, 0
	}
}

// multiWithShadows decides a Multi: its calls together, all or nothing,
// as the limiter's DecideAll does, when none is a shadow call; otherwise
// the others together, then each shadow call on its own after them,
// counted only if they passed (a failed Multi counts nothing anywhere) and
// otherwise asked, without counting, whether its cost would fit. A shadow
// call never fails the others: one the limiter cannot decide (its
// workspace at its window cap) is shadow-denied, as a Batch's entry is
// denied, never an error once the others are counted.
func (p *Pipeline) multiWithShadows(ctx context.Context, calls []Call, reqs []ratelimit.Request, out *MultiDecision) error {
	if !slices.ContainsFunc(calls, func(c Call) bool { return c.Shadow }) {
		resp, err := p.limiter.DecideAll(ctx, reqs)
		if err != nil {
			return err
		}
		out.Passed = resp.Passed
		for i := range resp.Results {
			out.Results[i].Response = resp.Results[i]
		}
		return nil
	}
	var enforced []ratelimit.Request
	var at []int
	for i := range calls {
		if !calls[i].Shadow {
			enforced = append(enforced, reqs[i])
			at = append(at, i)
		}
	}
	out.Passed = true
	if len(enforced) > 0 {
		resp, err := p.limiter.DecideAll(ctx, enforced)
		if err != nil {
			return err
		}
		out.Passed = resp.Passed
		for j, i := range at {
			out.Results[i].Response = resp.Results[j]
		}
	}
	for i := range calls {
		if !calls[i].Shadow {
			continue
		}
		r := reqs[i]
		if !out.Passed && r.Cost > 0 {
			r.Cost, r.Report = 0, false // asked, not counted
		}
		resp, err := p.limiter.Decide(ctx, r)
		switch {
		case err != nil:
			resp.Success = false
		case !out.Passed && reqs[i].Cost > 0:
			resp.Success = resp.Remaining >= reqs[i].Cost
		}
		out.Results[i].Response = resp
		shade(&calls[i], &out.Results[i])
	}
	return nil
}
