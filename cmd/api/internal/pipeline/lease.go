package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// Lease is the answer to Acquire and Extend.
type Lease struct {
	// Response is the limiter's: Success whether the slots are held,
	// Limit the limit that applied (an override's, if one did), Remaining
	// the slots left free, RetryAfter when held ones expire if none is
	// released first.
	ratelimit.Response
	// InFlight is how many slots are held, these included when held: the
	// limit less the free ones.
	InFlight int64
	// ID names the slots to release or extend them, "" when refused.
	ID string
	// ExpiresAt is the lease's end: when it was acquired or extended, plus
	// the lease. The slots are held until then; if they are neither
	// released nor extended they free themselves when the cell of the
	// lease's grid it falls in ends, less than a second or a tenth of the
	// lease later (never earlier). So an extension answers the end it
	// asked for, although it moves the slots to another cell only when
	// that end is in another one.
	ExpiresAt time.Time
	// OverrideID names the override whose limit applied, "" if none.
	OverrideID string
	// slot names the slots held, for GiveBack.
	slot ratelimit.Slot
}

// Released is the answer to Release and GiveBack.
type Released struct {
	// Freed is how many slots the release freed: 0 when they were released
	// or extended before, or had expired.
	Freed int64
	// InFlight and Limit are the limit's after the release. InFlight is
	// -1 when this process could not count the slots held (it holds no
	// window of the limit, and its workspace the most windows it may):
	// the release stands all the same.
	InFlight, Limit int64
}

// Lease outcomes, as metric labels.
const (
	leaseAcquired = "acquired"
	leaseDenied   = "denied"
	leaseReleased = "released"
	leaseExtended = "extended"
	leaseExpired  = "expired"
	leaseRepeated = "repeated"
	leaseUnrecord = "unrecorded"
)

// expiredLease answers the extension of a lease that expired.
var expiredLease = &invalid.Error{Field: "lease_id", Rule: "expired: its slots are free; acquire them again (Acquire), under today's limit"}

// Acquire takes a.Cost slots of the concurrency limit a names, in the
// caller's workspace (a.Workspace is ignored), if the caller may decide
// limits in its namespace. An override that matches the identifier (as
// sent) replaces the limit; the lease is the slot's own.
func (p *Pipeline) Acquire(ctx context.Context, a ratelimit.Acquisition) (Lease, error) {
	return p.acquire(ctx, a, false, 0)
}

// Acquire is Pipeline.Acquire for slots in the namespace, not authorized
// again, whose limit may be 0 (an operator's rule that blocks), and whose
// identifier may be up to maxIdentifier characters (ratelimit.MaxNameLength
// if 0; a longer one than that is counted under its digest, see
// CounterIdentifier). An acquisition that names another namespace is
// denied.
func (n Namespace) Acquire(ctx context.Context, a ratelimit.Acquisition, maxIdentifier int) (Lease, error) {
	if a.Namespace != n.name {
		return Lease{}, &access.DeniedError{Permission: access.Name(access.Limit, a.Namespace)}
	}
	return n.p.acquire(ctx, a, true, maxIdentifier)
}

// Release is Pipeline.Release for a lease of the namespace, not authorized
// again: a lease of another namespace is refused as one this service did
// not issue.
func (n Namespace) Release(ctx context.Context, id string) (Released, error) {
	return n.p.release(ctx, id, n.name)
}

// GiveBack frees the slots of *l, a lease of n that Acquire answered and
// whose id the caller never passed on (Envoy's request that another rule
// refused), and empties *l, so that they are given back once: since no
// one else holds the id, no ledger records it, which costs the counts
// alone however the ledger fares. The release reaches the regional store
// with the next replay, in one write with the others (see
// ratelimit.Service.ReleaseLater): a refused request of many concurrency
// rules costs one write, not one a rule. It answers as Release does, the
// slots held after it counted from what this process knows (no read). A
// refused lease holds nothing to give back (a zero answer). It must not
// be called for an id that left the caller, which Release frees once.
func (n Namespace) GiveBack(ctx context.Context, l *Lease) (Released, error) {
	if l.ID == "" {
		return Released{}, nil
	}
	if l.slot.Namespace != n.name {
		return Released{}, fmt.Errorf("give back a lease of namespace %q in %q", l.slot.Namespace, n.name)
	}
	slot := l.slot
	*l = Lease{}
	ret, err := n.p.limiter.ReleaseLater(ctx, slot)
	if err != nil {
		return Released{}, err
	}
	n.p.metrics.leases.WithLabelValues(leaseReleased).Inc()
	return released(ctx, slot.Limit, ret), nil
}

// acquire is Acquire; authorized says the namespace was authorized, by an
// operator's rule whose limit may be 0; maxIdentifier is as
// Namespace.Acquire's.
func (p *Pipeline) acquire(ctx context.Context, a ratelimit.Acquisition, authorized bool, maxIdentifier int) (Lease, error) {
	a.Workspace = call.Workspace(ctx)
	// Overrides match the identifier as sent; the counter is named by it,
	// or its digest.
	sent := a.Identifier
	bounds := ratelimit.Bounds{MaxIdentifier: maxIdentifier, ZeroBlocks: authorized}
	if err := bounds.CheckAcquisition(&a); err != nil {
		return Lease{}, err
	}
	a.Identifier = CounterIdentifier(sent)
	if !authorized {
		if err := call.Authorize(ctx, access.Limit, a.Namespace); err != nil {
			return Lease{}, err
		}
	}
	annotate(ctx, a.Namespace, 1)
	var out Lease
	r := ratelimit.Request{Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier,
		Limit: a.Limit, Duration: a.Lease, Algorithm: ratelimit.Concurrency}
	out.OverrideID, _ = p.override(&r, sent) // a lease is never a shadow call
	a.Limit = r.Limit
	resp, err := p.limiter.Acquire(ctx, a)
	if err != nil {
		return Lease{}, err
	}
	p.answer(ctx, &out, a, resp, "")
	return out, nil
}

// answer fills out with the limiter's answer resp to an acquisition (an
// extension of a lease whose id was extended, when extended is not "") of
// a, signs the lease of held slots, and counts the outcome.
func (p *Pipeline) answer(ctx context.Context, out *Lease, a ratelimit.Acquisition, resp ratelimit.Response, extended string) {
	out.Response = resp
	out.InFlight = resp.Limit - resp.Remaining
	outcome := leaseDenied
	if resp.Success && resp.Limit > 0 {
		seq := ratelimit.LeaseCell(resp, a.Lease)
		now := p.now()
		t := reservation.Token{
			IssuedAt: now.UnixMilli(), Scope: p.scope, ID: reservation.NewID(), Kind: reservation.KindLease,
			Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier,
			Duration: a.Lease, Limit: resp.Limit, Sequence: seq, Reserved: a.Cost,
		}
		out.ID, out.slot = p.keyring.Sign(ctx, &t), slotOf(&t)
		out.ExpiresAt = now.Add(a.Lease).Truncate(time.Millisecond)
		outcome = leaseAcquired
		if extended != "" {
			outcome = leaseExtended
		}
	} else {
		out.Success = false
	}
	p.metrics.leases.WithLabelValues(outcome).Inc()
	o := outcomeDenied
	if out.Success {
		o = outcomePassed
	}
	p.metrics.limitDecided(&ratelimit.Request{Algorithm: ratelimit.Concurrency}, o)
	if p.analytics != nil {
		p.analytics.Record(a.Workspace, a.Namespace, a.Identifier, out.Success)
	}
	setDecided(ctx, out.Success)
}

// slotOf returns the slots lease t names.
func slotOf(t *reservation.Token) ratelimit.Slot {
	return ratelimit.Slot{Workspace: t.Workspace, Namespace: t.Namespace, Identifier: t.Identifier,
		Limit: t.Limit, Lease: t.Duration, Sequence: t.Sequence, Cost: t.Reserved}
}

// claim records that lease t is used up (released or extended), once in
// the ledger's scope, and returns the metric label of the outcome when it
// is not the first: repeated, expired, or unrecorded (the ledger failed:
// then nothing is freed, and the slots free themselves at their expiry).
func (p *Pipeline) claim(ctx context.Context, t *reservation.Token) (string, bool) {
	if !p.now().Before(t.ExpiresAt()) {
		return leaseExpired, false
	}
	first, _, err := p.claimInLedger(ctx, t.ID, t.Workspace, 0, t.ExpiresAt())
	switch {
	case err != nil:
		p.logger.WarnContext(ctx, "record a lease's release: nothing freed, its slots free themselves when it expires", "error", err)
		return leaseUnrecord, false
	case !first:
		return leaseRepeated, false
	}
	return "", true
}

// Release frees the slots of lease id, once: a second release, or one of
// a lease extended or expired, frees nothing and is no error. An id this
// service did not issue to the caller's workspace, or that was changed,
// is refused.
func (p *Pipeline) Release(ctx context.Context, id string) (Released, error) {
	return p.release(ctx, id, "")
}

// release is Release, of a lease of namespace (authorized) if not "".
func (p *Pipeline) release(ctx context.Context, id, namespace string) (Released, error) {
	t, err := p.open(ctx, id, reservation.KindLease, namespace)
	if err != nil {
		return Released{}, err
	}
	slot := slotOf(&t)
	if outcome, ok := p.claim(ctx, &t); !ok {
		p.metrics.leases.WithLabelValues(outcome).Inc()
		return Released{Limit: t.Limit, InFlight: p.inFlight(ctx, slot)}, nil
	}
	ret, err := p.limiter.Release(ctx, slot)
	if err != nil {
		return Released{}, err
	}
	p.metrics.leases.WithLabelValues(leaseReleased).Inc()
	return released(ctx, slot.Limit, ret), nil
}

// released answers the release of slots of limit that the limiter
// answered ret: the slots freed, and those held after it, read with the
// release (-1 when the limiter could not count them: the release stands
// all the same).
func released(ctx context.Context, limit int64, ret ratelimit.Returned) Released {
	out := Released{Freed: ret.Given, Limit: limit, InFlight: -1}
	if after, err := ret.After(ctx); err == nil && after.Limit > 0 {
		out.InFlight = after.Limit - after.Remaining
	}
	return out
}

// inFlight returns how many slots of sl's limit are held now, as far as
// this process knows, or -1 if it cannot count them: the limiter refuses
// a window for the limit when the workspace holds the most it may, and
// the limit's window may be gone, or never have been in this process
// (slots acquired in another). A release has freed its slots by then, or
// found them freed, so a failed count must not turn it into an error: a
// caller would take a release that stands for one that failed.
func (p *Pipeline) inFlight(ctx context.Context, sl ratelimit.Slot) int64 {
	n, err := p.limiter.InFlight(ctx, ratelimit.Acquisition{Workspace: sl.Workspace, Namespace: sl.Namespace,
		Identifier: sl.Identifier, Limit: sl.Limit, Lease: sl.Lease, Cost: 1})
	if err != nil {
		return -1
	}
	return n
}

// Extend keeps the slots of lease id for lease from now (the lease they
// were acquired or last extended with, if lease is 0) and answers a new id
// for them; the old one is used up. A lease that expired is refused (an
// [*invalid.Error] naming lease_id): its slots are free, and the caller
// acquires them again under today's limit and overrides. Slots whose old
// id the ledger cannot record as used are acquired anew, and may be
// refused (the old slots then stay counted until they expire).
func (p *Pipeline) Extend(ctx context.Context, id string, lease time.Duration) (Lease, error) {
	t, err := p.open(ctx, id, reservation.KindLease, "")
	if err != nil {
		return Lease{}, err
	}
	if lease == 0 {
		lease = t.Duration
	}
	if err := ratelimit.CheckLease("lease", lease); err != nil {
		return Lease{}, err
	}
	sl := slotOf(&t)
	a := ratelimit.Acquisition{Workspace: t.Workspace, Namespace: t.Namespace, Identifier: t.Identifier,
		Limit: t.Limit, Lease: lease, Cost: t.Reserved}
	outcome, first := p.claim(ctx, &t)
	var resp ratelimit.Response
	switch {
	case first:
		resp, err = p.limiter.Extend(ctx, sl, lease)
		if errors.Is(err, ratelimit.ErrLeaseExpired) {
			p.metrics.leases.WithLabelValues(leaseExpired).Inc()
			return Lease{}, expiredLease
		}
	case outcome == leaseRepeated:
		p.metrics.leases.WithLabelValues(outcome).Inc()
		return Lease{}, &invalid.Error{Field: "lease_id", Rule: "was released or extended already: extend the lease its extension answered"}
	case outcome == leaseExpired:
		// Its slots are free: what holds them again is a new acquisition,
		// under the caller's limit and the overrides of today, not the
		// limit the lease was acquired under.
		p.metrics.leases.WithLabelValues(outcome).Inc()
		return Lease{}, expiredLease
	default:
		// Not recorded (the ledger failed): the slots may still be held,
		// and are acquired anew beside them, which errs strict.
		p.metrics.leases.WithLabelValues(outcome).Inc()
		resp, err = p.limiter.Acquire(ctx, a)
	}
	if err != nil {
		return Lease{}, err
	}
	var out Lease
	p.answer(ctx, &out, a, resp, id)
	return out, nil
}

// Seconds converts a lease in seconds from the API. One outside the valid
// range stays outside it (the conversion saturates instead of
// overflowing), so validation reports it.
func Seconds(n int64) time.Duration {
	n = min(max(n, -1), int64(ratelimit.MaxLease/time.Second)+1)
	return time.Duration(n) * time.Second
}
