package pipeline

import (
	"context"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// Results of a settle, as metric labels.
const (
	settleRefunded   = "refunded"
	settleExact      = "exact"
	settleReported   = "reported"
	settleRepeated   = "repeated"
	settleUnrecorded = "unrecorded"
)

// SettleDecision is the answer to Settle.
type SettleDecision struct {
	// Response is the key's state after the settle: Success is false once
	// the budget is spent, as a report answers.
	ratelimit.Response
	// Refunded is what was given back to the cell the estimate was counted
	// in: the estimate less the cost, or 0 (a cost at or above it, a cell
	// whose windows have passed, a ledger that failed).
	Refunded int64
}

// reserve returns the token of an admitted reservation r, answered resp.
func (p *Pipeline) reserve(ctx context.Context, r *ratelimit.Request, resp ratelimit.Response) string {
	return p.keyring.Sign(ctx, &reservation.Token{
		IssuedAt:   p.now().UnixMilli(),
		Scope:      p.scope,
		ID:         reservation.NewID(),
		Workspace:  r.Workspace,
		Namespace:  r.Namespace,
		Identifier: r.Identifier,
		Duration:   r.Duration,
		Limit:      r.Limit,
		Sequence:   ratelimit.CellOf(resp, r.Duration),
		Reserved:   r.Cost,
	})
}

// Settle settles a reservation at cost, what the call really spent: less
// than the estimate gives the difference back to the cell it was counted
// in; more counts the extra as a report (counted whatever the verdict). A
// reservation settles once, in whatever process or region: a second settle
// is refused with a *SettledError and changes nothing. If the ledger that
// records settlements fails, nothing is given back (the reservation stays
// spent) and any extra is still counted: a failing store never fails the
// call, and never lets a reservation be given back twice.
func (p *Pipeline) Settle(ctx context.Context, token string, cost *int64) (SettleDecision, error) {
	if cost == nil {
		return SettleDecision{}, &invalid.Error{Field: "cost", Rule: "missing: the tokens the call spent, 0 to 2^53"}
	}
	if err := ratelimit.CheckCost("cost", *cost); err != nil {
		return SettleDecision{}, err
	}
	t, err := p.open(ctx, token, reservation.KindReservation, "")
	if err != nil {
		return SettleDecision{}, err
	}
	if p.now().After(t.ExpiresAt()) {
		return SettleDecision{}, &invalid.Error{Field: "reservation",
			Rule: "expired: a reservation settles until an hour after the end of the window after its own, and a day after it was made at the latest; report a later cost with report: true"}
	}
	var out SettleDecision
	first, firstCost, err := p.claimInLedger(ctx, t.ID, t.Workspace, *cost, t.ExpiresAt())
	result := settleExact
	switch {
	case err != nil:
		p.logger.WarnContext(ctx, "record a settlement: nothing given back, any extra counted", "error", err)
		result = settleUnrecorded
	case !first:
		p.metrics.settlements.WithLabelValues(settleRepeated).Inc()
		return SettleDecision{}, &reservation.SettledError{Cost: firstCost}
	case *cost < t.Reserved:
		result = settleRefunded
		ret, err := p.limiter.GiveBack(ctx, ratelimit.Hold{Kind: ratelimit.Reserved, Workspace: t.Workspace, Namespace: t.Namespace,
			Identifier: t.Identifier, Duration: t.Duration, Limit: t.Limit, Sequence: t.Sequence, Amount: t.Reserved - *cost})
		if err != nil {
			return SettleDecision{}, err
		}
		out.Refunded = ret.Given
	case *cost > t.Reserved:
		result = settleReported
	}
	p.metrics.settlements.WithLabelValues(result).Inc()
	req := ratelimit.Request{Workspace: t.Workspace, Namespace: t.Namespace, Identifier: t.Identifier,
		Limit: t.Limit, Duration: t.Duration}
	if *cost > t.Reserved {
		req.Cost, req.Report = *cost-t.Reserved, true
	}
	resp, err := p.limiter.Decide(ctx, req)
	if err != nil {
		return SettleDecision{}, err
	}
	out.Response = resp
	setDecided(ctx, resp.Success)
	return out, nil
}
