package pipeline

import (
	"context"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// MaxBatchLimit is the most requests one BatchLimit call may hold: a
// thousand decisions are a fraction of a millisecond of CPU (a decision is
// well under a microsecond, docs/BENCHMARKS.md), and the message stays far
// under the 1 MiB cap (a thousand requests with 255-character names take
// about 520 KiB).
const MaxBatchLimit = 1000

// Call is one decision as an adapter hands it over: the request as the
// caller sent it, and what the adapter's protocol allows beyond the
// limiter's own rules.
type Call struct {
	// Request's Identifier is the caller's: overrides match it; the
	// counter is named by CounterIdentifier. Its Workspace is ignored: a
	// call counts in the workspace of the key that made it (see
	// call.PrincipalOf), whatever an adapter puts there.
	Request ratelimit.Request
	// Shadow makes the call a shadow one (see shadow.go): decided and
	// counted as any other, but admitted whatever its limit says.
	Shadow bool
	// Penalty, if not zero, blocks the identifier in its namespace for
	// that long once its limit denies the call; PenaltyMax caps the
	// doubling of a repeat offence (see penalty.go).
	Penalty, PenaltyMax time.Duration
	// Bounds are what the call's sender may ask: the zero value is
	// ratelimit.CallerBounds, a caller's own limits; an operator's rules
	// (an Envoy rule's requests_per_unit: 0 blocks, a year's window) are
	// ratelimit.OperatorBounds. An identifier longer than
	// ratelimit.MaxNameLength (where MaxIdentifier allows one) is counted
	// under its digest.
	Bounds ratelimit.Bounds
}

// Decision is the answer to one Call.
type Decision struct {
	// Response is the limiter's answer; its Limit is the one that applied
	// (an override's, if one did).
	ratelimit.Response
	// Duration is the window that applied (an override's, if one did).
	Duration time.Duration
	// Quota and QuotaWindow are what the IETF's RateLimit-Policy says of
	// the limit that applied (see ratelimit.Request.Policy): a window's
	// limit and duration, a token bucket's burst and its refill.
	Quota       int64
	QuotaWindow time.Duration
	// OverrideID names the override that decided the call, "" if none.
	OverrideID string
	// Reservation is the token that settles an admitted reservation (see
	// Settle), "" for any other call.
	Reservation string
	// Shadow is set for a shadow call, asked so by its caller or made one
	// by an override; ShadowDenied for one its limit would have refused
	// (Success is then true).
	Shadow, ShadowDenied bool
	// Penalized is set for a call a penalty's block denied (its limit
	// was not asked; RetryAfter is what is left of the block).
	Penalized bool
}

// validate checks c by the limiter's rules and the adapter's, and returns
// the request as it is counted: in workspace, under its counter identifier.
// penalties says whether the pipeline keeps penalty boxes.
func (c *Call) validate(workspace string, penalties bool) (ratelimit.Request, error) {
	r := c.Request
	r.Workspace = workspace
	if err := c.Bounds.CheckRequest(&r); err != nil {
		return ratelimit.Request{}, err
	}
	if err := checkShadow(c); err != nil {
		return ratelimit.Request{}, err
	}
	if err := checkPenalty(c, penalties); err != nil {
		return ratelimit.Request{}, err
	}
	r.Identifier = CounterIdentifier(r.Identifier)
	return r, nil
}

// override replaces r's limit and duration (and a token bucket's burst,
// when it names one) by those of the override that matches identifier (as
// the caller sent it), and returns its id: the one place an override
// applies, to every model. A calendar's periods stay, and a concurrency
// limit's lease (the slot's, in Duration): their limit alone is replaced.
// It also reports whether an override makes the call a shadow one: a
// shadow override that matches it, or its namespace's switch (whose id it
// returns when no other override matched). A shadow override without a
// limit of its own leaves r's. A call that cannot be a shadow one (a
// reservation, whose token must settle what it holds; a call that waits
// for what it books; a concurrency limit's, whose lease holds its slots)
// takes no shadow override at all: a limit only tried must never be
// enforced on it.
func (p *Pipeline) override(r *ratelimit.Request, identifier string) (id string, shadow bool) {
	shadowable := !r.Reserve && r.MaxWait == 0 && r.Algorithm != ratelimit.Concurrency
	if o, ok := p.overrides.Lookup(r.Workspace, r.Namespace, identifier); ok && (shadowable || !o.Shadow) {
		id, shadow = o.ID, o.Shadow
		if !o.KeepsLimit() {
			r.Limit = o.Limit
			if r.Calendar.IsZero() && r.Algorithm != ratelimit.Concurrency {
				r.Duration = o.Duration
			}
			if o.Burst > 0 && r.Algorithm == ratelimit.TokenBucket {
				r.Burst = o.Burst
			}
		}
	}
	if sw, ok := p.overrides.Switch(r.Workspace, r.Namespace); ok && shadowable {
		shadow = true
		if id == "" {
			id = sw.ID
		}
	}
	return id, shadow
}

// Limit validates c once (before an override replaces its limit and
// duration, so that a caller's bad values are refused whether or not one
// applies), applies the override that matches it, decides it and counts the
// decision. On an error from the limiter the decision still carries the
// limit and the reset of the request's window.
func (p *Pipeline) Limit(ctx context.Context, c Call) (Decision, error) {
	return p.limit(ctx, c, false)
}

// Namespace is the Limit use case of one call in one namespace, authorized
// once: an adapter whose request decides many limits in one namespace
// (Envoy's descriptors of a domain) authorizes the request, not each limit.
type Namespace struct {
	p    *Pipeline
	name string
}

// Namespace authorizes the call of ctx to decide limits in namespace and
// returns the use case, or the denial. It is a value: a request's
// authorization costs no allocation.
func (p *Pipeline) Namespace(ctx context.Context, namespace string) (Namespace, error) {
	if err := call.Authorize(ctx, access.Limit, namespace); err != nil {
		return Namespace{}, err
	}
	return Namespace{p: p, name: namespace}, nil
}

// Name returns the namespace, for the calls made in it.
func (n Namespace) Name() string { return n.name }

// Limit is Pipeline.Limit for a call in the namespace, not authorized
// again. A call that names another namespace is denied.
func (n Namespace) Limit(ctx context.Context, c Call) (Decision, error) {
	if c.Request.Namespace != n.name {
		return Decision{}, &access.DeniedError{Permission: access.Name(access.Limit, c.Request.Namespace)}
	}
	return n.p.limit(ctx, c, true)
}

// Multi is Pipeline.Multi for calls in the namespace: all admitted and
// counted, or nothing counted (shadow calls apart). A call that names
// another namespace is denied.
func (n Namespace) Multi(ctx context.Context, calls []Call) (MultiDecision, error) {
	for i := range calls {
		if calls[i].Request.Namespace != n.name {
			return MultiDecision{}, &access.DeniedError{Permission: access.Name(access.Limit, calls[i].Request.Namespace)}
		}
	}
	return n.p.Multi(ctx, calls)
}

// Overridden reports whether an override of the call's workspace with a
// limit of its own applies to identifier (as the caller sent it) in the
// namespace: it then replaces every limit an adapter would decide for it
// with its one. (A shadow override that keeps the requests' limits
// replaces none.)
func (n Namespace) Overridden(ctx context.Context, identifier string) bool {
	o, ok := n.p.overrides.Lookup(call.Workspace(ctx), n.name, identifier)
	return ok && !o.KeepsLimit()
}

// limit is Limit, authorizing c unless authorized says its namespace was.
func (p *Pipeline) limit(ctx context.Context, c Call, authorized bool) (Decision, error) {
	r, err := c.validate(call.Workspace(ctx), p.penalties != nil)
	if err != nil {
		return Decision{}, err
	}
	if !authorized {
		if err := call.Authorize(ctx, access.Limit, c.Request.Namespace); err != nil {
			return Decision{}, err
		}
	}
	annotate(ctx, c.Request.Namespace, 1)
	d, err := p.decide(ctx, &r, &c)
	if err != nil {
		return d, err
	}
	if r.Reserve && d.Success && r.Limit > 0 {
		d.Reservation = p.reserve(ctx, &r, d.Response)
	}
	shade(&c, &d)
	p.metrics.decision("Limit", outcomeOf(&d))
	p.record(&r, outcomeOf(&d), d.Wait)
	setDecided(ctx, d.Success)
	return d, nil
}

// record counts a decision of r by its model and in the analytics, a
// shadow denial apart from the denials, and a booked wait (an admission
// of r that waits that long) in its own metrics.
func (p *Pipeline) record(r *ratelimit.Request, o outcome, wait time.Duration) {
	p.metrics.limitDecided(r, o)
	if wait > 0 && o == outcomePassed {
		p.metrics.booked.Inc()
		p.metrics.bookedSeconds.Add(wait.Seconds())
	}
	switch {
	case p.analytics == nil:
	case o == outcomeShadowDenied:
		p.analytics.RecordShadowDenied(r.Workspace, r.Namespace, r.Identifier)
	default:
		p.analytics.Record(r.Workspace, r.Namespace, r.Identifier, o == outcomePassed)
	}
}

// annotate adds to the call's span, if it is traced, the namespace it
// decides in (the first, for a batch) and how many limits it decides.
func annotate(ctx context.Context, namespace string, limits int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attribute.String("ratelimit.namespace", namespace), attribute.Int("ratelimit.limits", limits))
	}
}

// setDecided records a decision as the call's outcome.
func setDecided(ctx context.Context, passed bool) {
	if !passed {
		call.SetOutcome(ctx, call.OutcomeDenied)
	}
}

// decide applies the override of c's validated request r and decides it;
// an override that makes c a shadow call marks c so.
func (p *Pipeline) decide(ctx context.Context, r *ratelimit.Request, c *Call) (Decision, error) {
	var d Decision
	var shadow bool
	d.OverrideID, shadow = p.override(r, c.Request.Identifier)
	c.Shadow = c.Shadow || shadow
	var err error
	if d.Response, d.Penalized = p.blocked(r); !d.Penalized {
		// A limit of 0 (an override that blocks) is the limiter's to
		// answer; with an error the response still holds the limit and
		// the reset.
		d.Response, err = p.limiter.Decide(ctx, *r)
		if err == nil && offends(c, r, &d.Response) {
			p.offend(c, r, &d.Response)
		}
	}
	resp := d.Response
	d.Duration = r.Window(resp.Reset)
	d.Quota, d.QuotaWindow = r.Policy(resp.Reset)
	return d, err
}

// validateEach validates a batch of at most max calls, naming an offending
// one by its place ("limits[2].cost").
func validateEach(calls []Call, max int, workspace string, penalties bool) ([]ratelimit.Request, error) {
	if err := ratelimit.CheckBatchSize("limits", len(calls), max); err != nil {
		return nil, err
	}
	reqs := make([]ratelimit.Request, len(calls))
	for i := range calls {
		r, err := calls[i].validate(workspace, penalties)
		if err == nil {
			err = ratelimit.CheckInBatch(&r, false)
		}
		if err != nil {
			return nil, invalid.InEntry("limits", i, err)
		}
		reqs[i] = r
	}
	return reqs, nil
}

// enterBatch waits for the workspace's turn to decide a batch of n entries
// (see batchGate) and returns the function that ends it.
func (p *Pipeline) enterBatch(ctx context.Context, workspace string, n int) (func(), error) {
	if p.batches == nil {
		return func() {}, nil
	}
	return p.batches.enter(ctx, workspace, n)
}

// Batch decides each call on its own, as Limit would, in one go: a call
// that breaks a rule fails the whole batch before anything is counted; one
// the limiter refuses (a workspace at its window cap) is denied. The batch
// waits for its workspace's turn and stops between entries once ctx ends;
// the entries decided by then stay counted.
func (p *Pipeline) Batch(ctx context.Context, calls []Call) ([]Decision, error) {
	workspace := call.Workspace(ctx)
	reqs, err := validateEach(calls, MaxBatchLimit, workspace, p.penalties != nil)
	if err != nil {
		return nil, err
	}
	if err := authorizeAll(ctx, calls); err != nil {
		return nil, err
	}
	annotate(ctx, calls[0].Request.Namespace, len(calls))
	leave, err := p.enterBatch(ctx, workspace, len(reqs))
	if err != nil {
		return nil, err
	}
	defer leave()
	out := make([]Decision, len(reqs))
	for i := range reqs {
		if err := ctx.Err(); err != nil {
			// The client is gone or out of time: the rest would be wasted.
			return nil, fmt.Errorf("stopped after %d of %d limits: %w", i, len(reqs), err)
		}
		c := calls[i]
		d, err := p.decide(ctx, &reqs[i], &c)
		if err != nil {
			d.Success, d.Remaining, d.RetryAfter = false, 0, 0
		}
		shade(&c, &d)
		p.metrics.decision("Limit", outcomeOf(&d))
		p.record(&reqs[i], outcomeOf(&d), d.Wait)
		setDecided(ctx, d.Success) // a batch with any entry denied is denied
		out[i] = d
	}
	return out, nil
}

// MultiDecision is the answer to Multi.
type MultiDecision struct {
	// Passed reports whether every call but the shadow ones was admitted,
	// and so counted.
	Passed  bool
	Results []Decision
}

// Multi decides calls together: either every one is admitted and all are
// counted, or nothing is counted anywhere. A call blocked by an override
// (limit 0) fails the whole batch; the others are then only checked. A
// shadow call takes no part in the verdict: it is decided after the others
// (see multiWithShadows).
func (p *Pipeline) Multi(ctx context.Context, calls []Call) (MultiDecision, error) {
	workspace := call.Workspace(ctx)
	reqs, err := validateEach(calls, ratelimit.MaxBatch, workspace, p.penalties != nil)
	if err != nil {
		return MultiDecision{}, err
	}
	for i := range reqs {
		if err := ratelimit.CheckInBatch(&reqs[i], true); err != nil {
			return MultiDecision{}, invalid.InEntry("limits", i, err)
		}
	}
	if err := authorizeAll(ctx, calls); err != nil {
		return MultiDecision{}, err
	}
	annotate(ctx, calls[0].Request.Namespace, len(calls))
	out := MultiDecision{Results: make([]Decision, len(reqs))}
	copied := false
	for i := range reqs {
		var shadow bool
		out.Results[i].OverrideID, shadow = p.override(&reqs[i], calls[i].Request.Identifier)
		if shadow && !calls[i].Shadow {
			if !copied { // the caller's calls stay as it made them
				calls, copied = slices.Clone(calls), true
			}
			calls[i].Shadow = true
		}
	}
	leave, err := p.enterBatch(ctx, workspace, len(reqs))
	if err != nil {
		return MultiDecision{}, err
	}
	defer leave()
	held := p.heldEntries(reqs)
	decided := reqs
	if held != nil {
		// A held entry is decided as a limit of 0: it fails the others,
		// and counts nothing.
		decided = slices.Clone(reqs)
		for i := range held {
			if held[i] {
				decided[i].Limit = 0
			}
		}
	}
	if err := p.multiWithShadows(ctx, calls, decided, &out); err != nil {
		return MultiDecision{}, err
	}
	p.penalizeMulti(calls, reqs, held, &out)
	for i := range out.Results {
		d := &out.Results[i]
		d.Duration = reqs[i].Window(d.Reset)
		d.Quota, d.QuotaWindow = reqs[i].Policy(d.Reset)
		o := outcomeOf(d)
		if !out.Passed && !calls[i].Shadow {
			d.Wait = 0 // nothing was booked: the batch failed
		}
		if o == outcomePassed && !out.Passed {
			o = outcomeDenied // admitted alone, not counted: the batch failed
		}
		p.record(&reqs[i], o, d.Wait)
	}
	o := outcomeDenied
	if out.Passed {
		o = outcomePassed
	}
	p.metrics.decision("MultiLimit", o)
	setDecided(ctx, out.Passed)
	return out, nil
}
