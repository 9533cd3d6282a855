package envoyrls

import (
	"context"
	"errors"
	"slices"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Concurrency limits through Envoy. A rule with algorithm: concurrency
// holds at most requests_per_unit slots at once, leases of its unit (times
// unit_multiplier). A descriptor it matches on the request path acquires
// a slot, and the answer carries the slot's lease id in its dynamic
// metadata under LeaseMetadataKey (ids of several rules joined by ",").
// The route releases it with a rate limit applied on stream done
// (apply_on_stream_done: true) whose descriptor holds an entry of key
// ReleaseKey and the lease ids as its value, which a metadata action reads
// from the rate limit filter's dynamic metadata: a request that was
// refused has no lease, so its stream-done call holds no such descriptor
// and frees nothing. A lease id is signed and frees its slots once; a slot
// whose release never comes frees itself when its lease ends.
const (
	// ReleaseKey is the key of the entry that makes a descriptor a
	// release of the lease ids in its value. Its other entries, if any,
	// name the rule in the metrics.
	ReleaseKey = "unkey.release"
	// LeaseMetadataKey is the key, in an answer's dynamic metadata, of the
	// lease ids of the slots the request acquired.
	LeaseMetadataKey = "unkey.lease"
)

// isConcurrency reports whether p acquires slots: its rule's one limit is
// a concurrency limit.
func (p *plan) isConcurrency() bool {
	return len(p.limits) == 1 && p.limits[0].Algorithm == ratelimit.Concurrency
}

// acquire takes p.cost slots of p's concurrency limit and returns the
// decision as limit does; p.lease is set to the lease of the slots
// taken. A cost of 0 takes none and answers within the limit.
func (s *Service) acquire(ctx context.Context, ns pipeline.Namespace, p *plan) (limitDecision, *ratelimit.CapacityError, error) {
	l := p.limits[0]
	out := limitDecision{name: l.Name, unit: l.Unit, Decision: pipeline.Decision{Duration: l.Duration()}}
	if p.cost == 0 {
		out.Success, out.Limit, out.Remaining = true, int64(l.RequestsPerUnit), int64(l.RequestsPerUnit)
		return out, nil, nil
	}
	lease, err := ns.Acquire(ctx, ratelimit.Acquisition{Namespace: ns.Name(), Identifier: p.identifier,
		Limit: int64(l.RequestsPerUnit), Lease: l.Duration(), Cost: p.cost}, MaxIdentifier)
	var capacity *ratelimit.CapacityError
	if err != nil && !errors.As(err, &capacity) {
		return limitDecision{}, nil, err
	}
	out.Response, out.OverrideID = lease.Response, lease.OverrideID
	if capacity != nil {
		out.Limit = int64(l.RequestsPerUnit)
	}
	// Until reset: when the slots free themselves at the latest (the end
	// of the cell of their lease's grid they are counted in, the
	// limiter's Reset), or, when refused, when held ones do.
	if lease.ID == "" {
		out.Reset = s.now().Add(lease.RetryAfter)
	}
	p.lease = lease
	return out, capacity, nil
}

// release frees the slots of p.releaseIDs, its entry's ids that no
// earlier descriptor of the request named (see uniqueReleases), and none
// once the caller has gone, and answers OK: Envoy ignores the answer of
// a stream-done call. An id this service did not issue to the caller's
// workspace, for the domain, frees nothing, and neither does an empty one
// (an empty value is one): each counts one bad release.
func (s *Service) release(ctx context.Context, ns pipeline.Namespace, domain string, p *plan) *rlsv3.RateLimitResponse_DescriptorStatus {
	for _, id := range p.releaseIDs {
		switch {
		case ctx.Err() != nil:
			// The caller is gone: no work for no one (a lease not
			// released frees itself when it ends).
			return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		case id == "":
			// Nothing named: a bad release, which costs no claim.
			s.metrics.badReleases.Inc()
			continue
		}
		r, err := ns.Release(ctx, id)
		if err != nil {
			s.metrics.badReleases.Inc()
			continue
		}
		if p.rule != nil && r.InFlight >= 0 {
			s.metrics.inFlight.WithLabelValues(domain, truncateLabel(p.rule.Path)).Set(float64(r.InFlight))
		}
	}
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
}

// uniqueReleases leaves each lease id of the plans' release entries,
// trimmed, in the first that names it (an empty one too): an id repeated
// in a request costs one ledger claim, or one bad release, not one a copy.
func uniqueReleases(plans []plan) {
	// At most MaxReleaseIDs ids (validate): a scan of those kept is
	// cheaper than a map.
	var kept []string
	for i := range plans {
		p := &plans[i]
		if !p.releasing {
			continue
		}
		first := len(kept)
		for id := range strings.SplitSeq(p.release, ",") {
			if id = strings.TrimSpace(id); !slices.Contains(kept, id) {
				kept = append(kept, id)
			}
		}
		p.releaseIDs = kept[first:len(kept):len(kept)]
	}
}

// leases returns the lease ids the plans acquired, joined, or "".
func leases(plans []plan) string {
	var ids []string
	for i := range plans {
		if plans[i].lease.ID != "" {
			ids = append(ids, plans[i].lease.ID)
		}
	}
	return strings.Join(ids, ",")
}

// giveBack frees the slots the plans acquired for a request that is
// refused: Envoy may never send its stream-done call, and the request
// holds nothing. Their ids never leave this call, so no ledger records it
// (a refused flood costs no ledger write a request, and a ledger that is
// down frees them all the same), and their releases reach the regional
// store with the next replay, in one write (see pipeline.Namespace.
// GiveBack): a refused request of 99 concurrency rules costs one write,
// not 99 round trips. Each rule's in-flight gauge is set to what its
// give-back saw (from this process's memory), as a release sets it, unless
// it could not count the slots held (see pipeline.Released).
func (s *Service) giveBack(ctx context.Context, ns pipeline.Namespace, domain string, plans []plan) {
	for i := range plans {
		r, err := ns.GiveBack(ctx, &plans[i].lease)
		if err == nil && r.Freed > 0 && r.InFlight >= 0 && plans[i].rule != nil {
			s.metrics.inFlight.WithLabelValues(domain, truncateLabel(plans[i].rule.Path)).Set(float64(r.InFlight))
		}
	}
}

// withLeases adds the lease ids to md (a new struct if nil) and returns it.
func withLeases(md *structpb.Struct, ids string) *structpb.Struct {
	if md == nil {
		md = &structpb.Struct{Fields: map[string]*structpb.Value{}}
	}
	md.Fields[LeaseMetadataKey] = structpb.NewStringValue(ids)
	return md
}
