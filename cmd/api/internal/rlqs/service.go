// Package rlqs is the adapter of Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3) onto Envoy's rate limit rules: an
// Envoy's rate_limit_quota filter sorts requests into buckets, enforces
// the assignment it holds for each locally, and reports usage on one
// stream; the service counts what was reported in the same cells as every
// other call of the limit (through the rate limit service's decision, so
// that RLS, RLQS, Connect and v2 callers of one limit share it) and
// answers each report with assignments.
//
// A bucket's limit is the rule its bucket_id's entries match, taken in
// key order as a descriptor's entries, in the domain the stream's reports
// name. What each Envoy is assigned (see assign.go): a token bucket of its
// share of what remains of the limit until it resets, in proportion to its
// demand; DENY_ALL until the reset once nothing remains; ALLOW_ALL for a
// bucket no rule limits.
//
// This is the first step of the service: it is not yet served on a port
// (the gRPC transports give every stream a deadline, and count a stream
// unread until its message arrives, both for unary calls), and shares a
// limit among the Envoys of one process only.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// MaxBucketsPerStream bounds the buckets one stream reports: Envoy's
// bucket_id_builder can make one of every header value, and each costs
// the service a decision per report and the state of its share.
const MaxBucketsPerStream = 1000

// Decider decides a descriptor as the rate limit service does: the
// limit its rule gives it, its hits_addend counted whatever the verdict.
// envoyrls.Service is one.
type Decider interface {
	ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error)
}

// Service serves StreamRateLimitQuotas.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	decide Decider
	now    func() time.Time
	shares *shares
}

// Option configures a Service.
type Option func(*Service)

// WithClock makes the service read the time from now (tests move it).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// New returns the service that decides buckets with d.
func New(d Decider, opts ...Option) *Service {
	s := &Service{decide: d, now: time.Now, shares: newShares()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// stream is what the service keeps of one Envoy's stream.
type stream struct {
	domain  string
	buckets map[string]*bucket
}

// StreamRateLimitQuotas reads an Envoy's usage reports and answers each
// with the assignments of its buckets that changed or are due again (see
// assign.go). The first report names the domain; a report of another
// domain, or of more than MaxBucketsPerStream buckets, ends the stream
// with invalid_argument or resource_exhausted naming it.
func (s *Service) StreamRateLimitQuotas(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	st := &stream{buckets: map[string]*bucket{}}
	defer s.shares.leave(st)
	for {
		rep, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		resp, err := s.report(srv.Context(), st, rep)
		if err != nil {
			return err
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := srv.Send(resp); err != nil {
				return err
			}
		}
	}
}

// report counts rep, one report of st's Envoy, and returns the actions to
// send it.
func (s *Service) report(ctx context.Context, st *stream, rep *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	switch {
	case rep.GetDomain() == "":
		return nil, status.Error(codes.InvalidArgument, "domain: must be set")
	case st.domain == "":
		st.domain = rep.GetDomain()
	case rep.GetDomain() != st.domain:
		return nil, status.Errorf(codes.InvalidArgument, "domain: must stay %q on one stream, got %q", st.domain, rep.GetDomain())
	}
	now := s.now()
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for i, u := range rep.GetBucketQuotaUsages() {
		id := u.GetBucketId().GetBucket()
		if len(id) == 0 {
			return nil, status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: must name at least one entry", i)
		}
		k := keyOf(id)
		b, ok := st.buckets[k]
		if !ok {
			if len(st.buckets) >= MaxBucketsPerStream {
				return nil, status.Errorf(codes.ResourceExhausted, "bucket_quota_usages[%d]: a stream reports at most %d buckets", i, MaxBucketsPerStream)
			}
			b = &bucket{key: st.domain + "\x00" + k, id: maps.Clone(id)}
			st.buckets[k] = b
		}
		lim, err := s.limitOf(ctx, st.domain, id, u.GetNumRequestsAllowed())
		if err != nil {
			return nil, fmt.Errorf("bucket_quota_usages[%d]: %w", i, err)
		}
		b.observe(u, now)
		if a := s.assign(st, b, lim, now); a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	return resp, nil
}

// limitOf counts allowed against the limit of bucket id in domain and
// returns it after: the entries in key order are the descriptor.
func (s *Service) limitOf(ctx context.Context, domain string, id map[string]string, allowed uint64) (limit, error) {
	d := &rlcommonv3.RateLimitDescriptor{HitsAddend: wrapperspb.UInt64(allowed)}
	for _, k := range slices.Sorted(maps.Keys(id)) {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: k, Value: id[k]})
	}
	resp, err := s.decide.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if err != nil {
		return limit{}, err
	}
	st := resp.GetStatuses()[0]
	if st.GetCurrentLimit() == nil {
		return limit{}, nil // no rule: unlimited
	}
	return limit{limited: true, over: st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT,
		remaining: int64(st.GetLimitRemaining()), untilReset: st.GetDurationUntilReset().AsDuration()}, nil
}

// keyOf names a bucket id: equal maps name one bucket.
func keyOf(id map[string]string) string {
	var b []byte
	for _, k := range slices.Sorted(maps.Keys(id)) {
		b = append(b, k...)
		b = append(b, 0)
		b = append(b, id[k]...)
		b = append(b, 0)
	}
	return string(b)
}
