package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/audit"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Penalties. A call that asks for a penalty and that its limit denies
// starts a block of its identifier in its namespace (see package
// penalties): until the block ends, every decision of the identifier in
// the namespace is denied, whatever its window says, with nothing counted
// and retryAfter what is left of the block (Decision.Penalized). The
// offence itself is answered with the block's retryAfter (or its window's
// wait, if longer). A shadow call never starts a block, and one the block
// holds is shadow-denied; a limit of 0 (an override that blocks) is a
// block already and starts none; a call of cost 0 asks, it offends
// nobody; a call booked ahead (maxWait) was admitted, not denied.

// WithPenalties keeps the penalty boxes in b; without it a pipeline
// refuses calls that ask for a penalty.
func WithPenalties(b *penalties.Box) Option { return func(p *Pipeline) { p.penalties = b } }

// checkPenalty checks the penalty a call asks for.
func checkPenalty(c *Call, enabled bool) error {
	top := penalties.MaxPenalty
	switch {
	case c.Penalty == 0 && c.PenaltyMax == 0:
		return nil
	case !enabled:
		return &invalid.Error{Field: "penalty", Rule: "is not available on this server"}
	case c.Penalty < time.Millisecond || c.Penalty > top:
		return &invalid.Error{Field: "penalty", Rule: fmt.Sprintf("must be between 1 and %d milliseconds", top.Milliseconds())}
	case c.PenaltyMax != 0 && (c.PenaltyMax < c.Penalty || c.PenaltyMax > top):
		return &invalid.Error{Field: "penalty_max", Rule: fmt.Sprintf("must be between penalty and %d milliseconds, or 0 (doubling up to %d)", top.Milliseconds(), top.Milliseconds())}
	}
	return nil
}

// penaltyKey names the box of r's counter.
func penaltyKey(r *ratelimit.Request) penalties.Key {
	return penalties.Key{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier}
}

// blocked returns the answer of r if a block holds its identifier: denied,
// nothing left, reset and retryAfter at the block's end.
func (p *Pipeline) blocked(r *ratelimit.Request) (ratelimit.Response, bool) {
	if p.penalties == nil || p.penalties.Empty() {
		return ratelimit.Response{}, false
	}
	now := p.penalties.Now()
	b, ok := p.penalties.Blocked(penaltyKey(r), now)
	if !ok {
		return ratelimit.Response{}, false
	}
	return penalized(r, b, now), true
}

// penalized is the answer of r under block b at now.
func penalized(r *ratelimit.Request, b penalties.Block, now int64) ratelimit.Response {
	return ratelimit.Response{Limit: r.Limit, Reset: time.UnixMilli(b.Until),
		RetryAfter: time.Duration(b.Until-now) * time.Millisecond, Algorithm: r.Model()}
}

// offends reports whether d, the limit's answer to c's request r, starts
// a block.
func offends(c *Call, r *ratelimit.Request, d *ratelimit.Response) bool {
	return c.Penalty > 0 && !c.Shadow && !d.Success && r.Cost > 0 && r.Limit > 0
}

// offend starts (or finds) the block of c's denied request r, and answers
// d with it: retryAfter and reset at the block's end.
func (p *Pipeline) offend(c *Call, r *ratelimit.Request, d *ratelimit.Response) {
	now := p.penalties.Now()
	b := p.penalties.Offend(penaltyKey(r), c.Penalty, c.PenaltyMax, now)
	if b.Until > now { // none if memory had no room for it
		d.RetryAfter = max(d.RetryAfter, time.Duration(b.Until-now)*time.Millisecond)
		if until := time.UnixMilli(b.Until); until.After(d.Reset) {
			d.Reset = until
		}
	}
}

// maxPenaltyIdentifier is the longest identifier a block can hold: the
// longest a route that starts blocks takes (Envoy's counter names,
// envoyrls.MaxIdentifier). One longer than ratelimit.MaxNameLength is
// counted, and so blocked and listed, under its digest (see
// CounterIdentifier).
const maxPenaltyIdentifier = 4096

// recordPenalty writes the audit entry of a lifted block.
func (p *Pipeline) recordPenalty(ctx context.Context, namespace, identifier string, before Penalty) {
	p.audited(ctx, audit.PenaltyDelete, audit.OverrideTarget(namespace, identifier),
		audit.JSON(map[string]any{"start": before.Start, "until": before.Until}), "")
}

// heldEntries reports which of a MultiLimit's requests a block holds, or
// nil if none.
func (p *Pipeline) heldEntries(reqs []ratelimit.Request) []bool {
	if p.penalties == nil || p.penalties.Empty() {
		return nil
	}
	var held []bool
	now := p.penalties.Now()
	for i := range reqs {
		if _, ok := p.penalties.Blocked(penaltyKey(&reqs[i]), now); ok {
			if held == nil {
				held = make([]bool, len(reqs))
			}
			held[i] = true
		}
	}
	return held
}

// penalizeMulti answers a decided MultiLimit's held entries with their
// blocks, and starts a block for each entry its own limit denied in a
// MultiLimit that failed.
func (p *Pipeline) penalizeMulti(calls []Call, reqs []ratelimit.Request, held []bool, out *MultiDecision) {
	if p.penalties == nil || held == nil && (out.Passed || !slices.ContainsFunc(calls, func(c Call) bool { return c.Penalty > 0 })) {
		return // none held, and none offends
	}
	now := p.penalties.Now()
	for i := range reqs {
		d := &out.Results[i]
		switch {
		case held != nil && held[i]:
			if b, ok := p.penalties.Blocked(penaltyKey(&reqs[i]), now); ok {
				d.Response = penalized(&reqs[i], b, now)
			} else { // the block ended meanwhile: a limit of 0's answer, with the request's limit
				d.Limit = reqs[i].Limit
			}
			d.Penalized = true
			shade(&calls[i], d)
		case !out.Passed && offends(&calls[i], &reqs[i], &d.Response):
			p.offend(&calls[i], &reqs[i], &d.Response)
		}
	}
}

// Penalty is a block in force, as the API shows it.
type Penalty = penalties.Block

// GetPenalty returns the block in force on identifier in namespace of the
// caller's workspace, if the caller may read the namespace's overrides,
// or penalties.ErrNotFound.
func (p *Pipeline) GetPenalty(ctx context.Context, namespace, identifier string) (Penalty, error) {
	k, err := p.penaltyOf(ctx, access.ReadOverride, namespace, identifier)
	if err != nil {
		return Penalty{}, err
	}
	return p.penalties.Get(ctx, k)
}

// ListPenalties returns up to limit (1 to 100, 10 if 0) of the blocks in
// force in namespace, after the identifier after as a block lists it (the
// previous page's last), in identifier order.
func (p *Pipeline) ListPenalties(ctx context.Context, namespace, after string, limit int) ([]Penalty, error) {
	if err := p.mayPenalize(ctx, access.ReadOverride, namespace); err != nil {
		return nil, err
	}
	if limit == 0 {
		limit = 10
	}
	if limit < 1 || limit > 100 {
		return nil, &invalid.Error{Field: "limit", Rule: "must be between 1 and 100, or 0 (10)"}
	}
	return p.penalties.List(ctx, call.Workspace(ctx), namespace, after, limit)
}

// DeletePenalty lifts the block in force on identifier in namespace, if
// the caller may set the namespace's overrides, and records it in the
// audit log; penalties.ErrNotFound if none holds it.
func (p *Pipeline) DeletePenalty(ctx context.Context, namespace, identifier string) error {
	k, err := p.penaltyOf(ctx, access.SetOverride, namespace, identifier)
	if err != nil {
		return err
	}
	before, err := p.penalties.Get(ctx, k)
	if err != nil {
		return err
	}
	if err := p.admitChange(ctx); err != nil {
		return err
	}
	if err := p.penalties.Lift(ctx, k); err != nil {
		return err
	}
	p.recordPenalty(ctx, namespace, identifier, before)
	return nil
}

// penaltyOf checks a penalty's names and the caller's permission, and
// returns its box's key: identifier as the limits are asked with it, or
// as a block lists it (a long one's digest, which the limits would count
// under the digest of that digest).
func (p *Pipeline) penaltyOf(ctx context.Context, action access.Action, namespace, identifier string) (penalties.Key, error) {
	if err := ratelimit.CheckName("identifier", identifier, maxPenaltyIdentifier); err != nil {
		return penalties.Key{}, err
	}
	if err := p.mayPenalize(ctx, action, namespace); err != nil {
		return penalties.Key{}, err
	}
	if !isDigest(identifier) {
		identifier = CounterIdentifier(identifier)
	}
	return penalties.Key{Workspace: call.Workspace(ctx), Namespace: namespace, Identifier: identifier}, nil
}

// mayPenalize checks that the caller may do action in namespace and that
// the server keeps penalties.
func (p *Pipeline) mayPenalize(ctx context.Context, action access.Action, namespace string) error {
	if err := authorizeNamespace(ctx, action, namespace); err != nil {
		return err
	}
	if p.penalties == nil {
		return &invalid.Error{Field: "namespace", Rule: "has no penalties on this server"}
	}
	return nil
}
