// Package rlqs is the adapter of Envoy's Rate Limit Quota Service
// (envoy.service.rate_limit_quota.v3) onto Envoy's rate limit rules: an
// Envoy's rate_limit_quota filter sorts requests into buckets, enforces
// the assignment it holds for each locally, and reports usage on one
// stream; the service counts what was reported in the same cells as every
// other call of the limit (through the rate limit service's decision, so
// that RLS, RLQS, Connect and v2 callers of one limit share it, across
// processes and regions) and answers with assignments.
//
// A bucket's limit is the rule its bucket_id's entries match, taken in
// key order as a descriptor's entries, in the domain the stream's reports
// name. What each Envoy is assigned (see assign.go): a token bucket of its
// share of what remains of the limit until it resets, its share its
// demand over the demand of every Envoy of the fleet on the bucket
// (counted in shared tallies, see fleet.go); DENY_ALL once nothing
// remains (a fixed window's until its reset), pushed at once to the other
// Envoys of the bucket this process serves; the configured default
// (ALLOW_ALL) for a bucket no rule limits.
//
// Each stream is served by one goroutine that both answers its reports
// and writes what other streams push to it (a bounded set of pending
// denials, never a queue that grows), and one that reads: a slow Envoy
// holds its own stream only. The bounds of what one caller may hold
// (streams per connection, buckets per stream and per workspace) are
// Limits; Drain ends every stream with assignments that expire at once.
package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Decider decides a descriptor as the rate limit service does: the limit
// its rule gives it, its hits_addend counted whatever the verdict, and the
// model that decided. envoyrls.Service is one.
type Decider interface {
	Quota(ctx context.Context, domain string, d *rlcommonv3.RateLimitDescriptor) (envoyrls.QuotaDecision, error)
}

// Limits bound what one caller may hold of the service. A bound of 0 is
// its default.
type Limits struct {
	// StreamsPerConnection bounds the quota streams one connection has
	// open (Envoy opens one per server and domain). Default 16.
	StreamsPerConnection int
	// StreamsPerWorkspace bounds the quota streams the keys of one
	// workspace have open on this process, all connections together.
	// Default 1,000.
	StreamsPerWorkspace int
	// BucketsPerStream bounds the buckets one stream reports: Envoy's
	// bucket_id_builder can make one of every header value, and each
	// costs a decision and two tallies a report. Default 1,000.
	BucketsPerStream int
	// BucketsPerWorkspace bounds the buckets the streams of one workspace
	// report to this process, all together. Default 10,000.
	BucketsPerWorkspace int
	// AbandonAfter is how long a bucket may report no request before the
	// service tells its Envoy to abandon it (the Envoy forgets it, and
	// reports it anew on its next request), and how long a stream may
	// send no report before it is ended (an Envoy reports every bucket
	// it holds every 5 s; one that holds none opens a stream again with
	// its next). Default a minute, twelve reports.
	AbandonAfter time.Duration
	// DrainTimeout bounds how long Drain waits for the streams to take
	// their expiry and end before it ends those left. Default 2 s.
	DrainTimeout time.Duration
}

// withDefaults returns l with each unset bound at its default.
func (l Limits) withDefaults() Limits {
	if l.StreamsPerConnection <= 0 {
		l.StreamsPerConnection = 16
	}
	if l.StreamsPerWorkspace <= 0 {
		l.StreamsPerWorkspace = 1000
	}
	if l.DrainTimeout <= 0 {
		l.DrainTimeout = 2 * time.Second
	}
	if l.BucketsPerStream <= 0 {
		l.BucketsPerStream = 1000
	}
	if l.BucketsPerWorkspace <= 0 {
		l.BucketsPerWorkspace = 10_000
	}
	if l.AbandonAfter <= 0 {
		l.AbandonAfter = 12 * ReportInterval
	}
	return l
}

// Service serves StreamRateLimitQuotas.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	decide  Decider
	fleet   Fleet
	now     func() time.Time
	logger  *slog.Logger
	limits  Limits
	noRule  typev3.RateLimitStrategy_BlanketRule
	metrics *metrics
	subs    subscribers

	mu         sync.Mutex
	conns      map[string]int // open streams by connection
	open       map[string]int // open streams by workspace
	workspaces map[string]int // buckets by workspace
	streams    map[*stream]struct{}
	draining   bool
	drained    chan struct{} // closed once draining and no stream is left
}

// Option configures a Service.
type Option func(*Service)

// WithClock makes the service read the time from now (tests move it).
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithLogger logs the streams refused and the buckets whose decision
// failed to logger (discarded by default).
func WithLogger(logger *slog.Logger) Option { return func(s *Service) { s.logger = logger } }

// WithLimits sets the bounds on what one caller may hold.
func WithLimits(l Limits) Option { return func(s *Service) { s.limits = l } }

// WithNoRule assigns rule to a bucket no rule limits (ALLOW_ALL by
// default; DENY_ALL makes a bucket without a rule a mistake that shows).
func WithNoRule(rule typev3.RateLimitStrategy_BlanketRule) Option {
	return func(s *Service) { s.noRule = rule }
}

// New returns the service that decides buckets with d and shares their
// budgets through fleet, registering its metrics with reg. It starts
// nothing: each stream is served by the call that opened it.
func New(d Decider, fleet Fleet, reg prometheus.Registerer, opts ...Option) (*Service, error) {
	s := &Service{decide: d, fleet: fleet, now: time.Now, logger: slog.New(slog.DiscardHandler),
		noRule: typev3.RateLimitStrategy_ALLOW_ALL, conns: map[string]int{}, open: map[string]int{}, workspaces: map[string]int{},
		streams: map[*stream]struct{}{}, drained: make(chan struct{}), subs: subscribers{byKey: map[string]*subscription{}}}
	for _, o := range opts {
		o(s)
	}
	s.limits = s.limits.withDefaults()
	m, err := newMetrics(reg, s)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// Stream is one Envoy's stream as a transport hands it over: grpc-go's
// server stream is one.
type Stream interface {
	Context() context.Context
	Recv() (*rlqsv3.RateLimitQuotaUsageReports, error)
	Send(*rlqsv3.RateLimitQuotaResponse) error
}

// StreamRateLimitQuotas serves a stream of the grpc-go server: Serve, the
// connection named by the peer's address.
func (s *Service) StreamRateLimitQuotas(srv rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasServer) error {
	return s.Serve(peerOf(srv.Context()), srv)
}

// Serve serves one Envoy's stream over connection conn (any name that
// tells connections apart) until the Envoy ends it, it breaks a rule or
// the service drains: it reads the Envoy's usage reports and answers each
// with the assignments of its buckets that changed or are due again (see
// assign.go), and writes what other streams push to it. The first report
// names the domain; a report of another domain, or past a bound of
// Limits, ends the stream with invalid_argument or resource_exhausted
// naming it.
func (s *Service) Serve(conn string, srv Stream) error {
	ctx, cancel := context.WithCancel(srv.Context())
	defer cancel()
	st, err := s.openStream(ctx, conn, cancel)
	if err != nil {
		return err
	}
	defer s.close(st)
	idle := time.NewTimer(s.limits.AbandonAfter)
	defer idle.Stop()
	reports, failed := make(chan *rlqsv3.RateLimitQuotaUsageReports), make(chan error, 1)
	go func() {
		for {
			rep, err := srv.Recv()
			if err != nil {
				failed <- err
				return
			}
			select {
			case reports <- rep:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		var resp *rlqsv3.RateLimitQuotaResponse
		var last bool
		select {
		case rep := <-reports:
			idle.Reset(s.limits.AbandonAfter)
			if resp, err = s.report(ctx, st, rep); err != nil {
				s.metrics.refused(err)
				return err
			}
		case <-idle.C:
			return nil // no bucket reported: the Envoy holds none
		case <-st.wake:
			resp, last = s.pushed(st)
		case err := <-failed:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-ctx.Done():
			// The Envoy's reset, the first report's deadline (see
			// transport.awaitFirst), or a drain that ran out of time.
			return status.FromContextError(context.Cause(ctx)).Err()
		}
		if len(resp.GetBucketAction()) > 0 {
			if err := srv.Send(resp); err != nil {
				return err
			}
			s.metrics.sent(resp)
		}
		if last {
			return nil
		}
	}
}

// stream is what the service keeps of one Envoy's stream. Its buckets are
// its serving goroutine's alone; what other goroutines hand it (denials,
// the drain) waits under mu until wake is read.
type stream struct {
	workspace, conn string
	domain          string
	cancel          context.CancelFunc // ends the stream
	buckets         map[string]*bucket // by bucket id (keyOf)
	wake            chan struct{}      // one pending signal at most

	mu     sync.Mutex
	denied map[string]time.Duration // bucket id (keyOf) → how long it stays denied
	drain  bool
}

// openStream registers a new stream of the call of ctx over conn, which
// cancel ends, unless conn or the call's workspace holds as many as it
// may, or the service is draining.
func (s *Service) openStream(ctx context.Context, conn string, cancel context.CancelFunc) (*stream, error) {
	workspace := call.Workspace(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.draining:
		s.metrics.refusedFor("draining")
		return nil, status.Error(codes.Unavailable, "the server is shutting down: open the stream again (another server answers)")
	case s.conns[conn] >= s.limits.StreamsPerConnection:
		s.metrics.refusedFor("streams_per_connection")
		return nil, status.Errorf(codes.ResourceExhausted, "a connection may have at most %d quota streams open (UNKEY_RLQS_MAX_STREAMS_PER_CONNECTION)",
			s.limits.StreamsPerConnection)
	case s.open[workspace] >= s.limits.StreamsPerWorkspace:
		s.metrics.refusedFor("streams_per_workspace")
		return nil, status.Errorf(codes.ResourceExhausted, "a workspace may have at most %d quota streams open on one server (UNKEY_RLQS_MAX_STREAMS_PER_WORKSPACE)",
			s.limits.StreamsPerWorkspace)
	}
	s.conns[conn]++
	s.open[workspace]++
	st := &stream{workspace: workspace, conn: conn, cancel: cancel, buckets: map[string]*bucket{}, wake: make(chan struct{}, 1),
		denied: map[string]time.Duration{}}
	s.streams[st] = struct{}{}
	return st, nil
}

// close forgets st: its connection's count, its buckets and its
// subscriptions.
func (s *Service) close(st *stream) {
	for _, b := range st.buckets {
		s.subs.leave(b.key, st)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns[st.conn]--; s.conns[st.conn] <= 0 {
		delete(s.conns, st.conn)
	}
	if s.open[st.workspace]--; s.open[st.workspace] <= 0 {
		delete(s.open, st.workspace)
	}
	s.forget(st.workspace, len(st.buckets))
	delete(s.streams, st)
	if s.draining && len(s.streams) == 0 {
		close(s.drained)
	}
}

// forget gives back n buckets of workspace. It is called with s.mu held.
func (s *Service) forget(workspace string, n int) {
	if s.workspaces[workspace] -= n; s.workspaces[workspace] <= 0 {
		delete(s.workspaces, workspace)
	}
}

// admit counts a new bucket of st, unless st or its workspace holds as
// many as they may.
func (s *Service) admit(st *stream, field string) error {
	if len(st.buckets) >= s.limits.BucketsPerStream {
		return &refusal{reason: "buckets_per_stream", err: status.Errorf(codes.ResourceExhausted,
			"%s: a stream may report at most %d buckets (UNKEY_RLQS_MAX_BUCKETS_PER_STREAM)", field, s.limits.BucketsPerStream)}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.workspaces[st.workspace] >= s.limits.BucketsPerWorkspace {
		return &refusal{reason: "buckets_per_workspace", err: status.Errorf(codes.ResourceExhausted,
			"%s: a workspace's streams may report at most %d buckets to one server (UNKEY_RLQS_MAX_BUCKETS_PER_WORKSPACE)", field,
			s.limits.BucketsPerWorkspace)}
	}
	s.workspaces[st.workspace]++
	return nil
}

// Drain ends every stream, each after sending its Envoy its assignments
// again with a time to live of 0 (the Envoy then falls back to its
// filter's expired-assignment behaviour at once, rather than enforcing a
// share this server no longer counts), and refuses new streams. It waits
// for the streams to end up to Limits.DrainTimeout (or ctx's end), then
// ends those left (one whose Envoy does not read, or whose report waits on
// a store) and returns an error counting them.
func (s *Service) Drain(ctx context.Context) error {
	s.mu.Lock()
	if !s.draining {
		s.draining = true
		if len(s.streams) == 0 {
			close(s.drained)
		}
		for st := range s.streams {
			st.mu.Lock()
			st.drain = true
			st.mu.Unlock()
			st.signal()
		}
	}
	s.mu.Unlock()
	wait := time.NewTimer(s.limits.DrainTimeout)
	defer wait.Stop()
	select {
	case <-s.drained:
		return nil
	case <-ctx.Done():
	case <-wait.C:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for st := range s.streams {
		st.cancel()
	}
	return fmt.Errorf("drain quota streams: %d did not end within %v, ended", len(s.streams), s.limits.DrainTimeout)
}

// signal wakes st's serving goroutine, unless a signal is pending.
func (st *stream) signal() {
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// deny hands st a denial of its bucket idKey for ttl, pushed by another stream.
func (st *stream) deny(idKey string, ttl time.Duration) {
	st.mu.Lock()
	st.denied[idKey] = ttl
	st.mu.Unlock()
	st.signal()
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
		keys := slices.Sorted(maps.Keys(id))
		if err := checkUsage(i, u, keys); err != nil {
			return nil, err
		}
		k := keyOf(id, keys)
		b, ok := st.buckets[k]
		if !ok {
			if err := s.admit(st, fmt.Sprintf("bucket_quota_usages[%d]", i)); err != nil {
				return nil, err
			}
			b = newBucket(st.workspace, st.domain, k, id, keys, now)
			st.buckets[k] = b
			s.subs.join(b.key, st, now)
		}
		s.metrics.reported(u.GetNumRequestsAllowed(), u.GetNumRequestsDenied())
		a, err := s.usage(ctx, st, b, u, now)
		if err != nil {
			return nil, fmt.Errorf("bucket_quota_usages[%d]: %w", i, err)
		}
		if a != nil {
			resp.BucketAction = append(resp.BucketAction, a)
		}
	}
	resp.BucketAction = append(resp.BucketAction, s.abandon(st, now)...)
	return resp, nil
}

// checkUsage refuses a report's i-th usage, whose bucket id's keys in
// order are keys, unless its counts are at most ratelimit.MaxCost and its
// bucket id can be a descriptor of the rate limit service: 1 to
// envoyrls.MaxEntries entries, each key set, keys and values of at most
// envoyrls.MaxEntryBytes, and no release entry (a quota filter holds no
// lease to release). A usage that passes costs no allocation.
func checkUsage(i int, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, keys []string) error {
	count := func(name string) error {
		return &invalid.Error{Field: fmt.Sprintf("bucket_quota_usages[%d].%s", i, name), Rule: fmt.Sprintf("must be at most %d", int64(ratelimit.MaxCost))}
	}
	switch {
	case u.GetNumRequestsAllowed() > ratelimit.MaxCost:
		return count("num_requests_allowed")
	case u.GetNumRequestsDenied() > ratelimit.MaxCost:
		return count("num_requests_denied")
	}
	id := u.GetBucketId().GetBucket()
	field := func() string { return fmt.Sprintf("bucket_quota_usages[%d].bucket_id.bucket", i) }
	if len(id) == 0 || len(id) > envoyrls.MaxEntries {
		return &invalid.Error{Field: field(), Rule: fmt.Sprintf("must hold 1 to %d entries", envoyrls.MaxEntries)}
	}
	for _, k := range keys {
		switch {
		case k == "":
			return &invalid.Error{Field: field(), Rule: "must not hold an empty key"}
		case k == envoyrls.ReleaseKey:
			return &invalid.Error{Field: fmt.Sprintf("%s[%q]", field(), k), Rule: "must not be a release entry: a quota bucket holds no lease"}
		case len(k) > envoyrls.MaxEntryBytes || len(id[k]) > envoyrls.MaxEntryBytes:
			return &invalid.Error{Field: fmt.Sprintf("%s[%.32q]", field(), k), Rule: fmt.Sprintf("key and value must be at most %d bytes each", envoyrls.MaxEntryBytes)}
		}
	}
	return nil
}

// usage counts u, the usage of b reported on st, and returns b's action,
// nil if what it holds stands. A failure to decide that is not the
// bucket's fault (a store that does not answer) leaves b's assignment as
// it is, to be decided again at the next report; one that is (entries
// the rules refuse) is returned.
func (s *Service) usage(ctx context.Context, st *stream, b *bucket, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, now time.Time) (*rlqsv3.RateLimitQuotaResponse_BucketAction, error) {
	allowed, denied := u.GetNumRequestsAllowed(), u.GetNumRequestsDenied()
	if allowed+denied > 0 {
		b.lastActive = now
	}
	q, err := s.decide.Quota(ctx, st.domain, b.descriptor(allowed))
	var bad *invalid.Error
	var denial *access.DeniedError
	switch {
	case errors.As(err, &bad), errors.As(err, &denial):
		return nil, err // the caller's: its key, its entries
	case err != nil:
		s.logger.Warn("a quota bucket's limit could not be decided: its assignment stands until the next report",
			"domain", st.domain, "error", err)
		return nil, nil
	}
	if denied > 0 && q.Limited {
		s.fleet.RecordDenied(ctx, namespaceOf(st.domain), b.identifier, denied)
	}
	share := 1.0
	if paced(q) {
		share = s.share(ctx, st, b, u, now)
	}
	b.observe(u)
	return s.assign(st, b, q, share, now), nil
}

// descriptor returns b's entries as a descriptor of allowed hits (the
// rate limit service reads the entries, never changes them).
func (b *bucket) descriptor(allowed uint64) *rlcommonv3.RateLimitDescriptor {
	return &rlcommonv3.RateLimitDescriptor{Entries: b.entries, HitsAddend: wrapperspb.UInt64(allowed)}
}

// pushed returns what others handed st since it last looked: a denial of
// each bucket whose window was spent elsewhere, or, once the service
// drains, every assignment again with a time to live of 0 (last is then
// set: the stream ends after it).
func (s *Service) pushed(st *stream) (resp *rlqsv3.RateLimitQuotaResponse, last bool) {
	st.mu.Lock()
	denied, drain := st.denied, st.drain
	st.denied = map[string]time.Duration{}
	st.mu.Unlock()
	resp = &rlqsv3.RateLimitQuotaResponse{}
	now := s.now()
	if drain {
		for _, b := range st.buckets {
			if b.sent != nil {
				resp.BucketAction = append(resp.BucketAction, b.action(b.sent, 0))
			}
		}
		return resp, true
	}
	for key, ttl := range denied {
		if b := st.buckets[key]; b != nil && !isDeny(b.sent) {
			deny := blanket(typev3.RateLimitStrategy_DENY_ALL)
			b.sent, b.sentAt, b.ttl = deny, now, ttl
			resp.BucketAction = append(resp.BucketAction, b.action(deny, ttl))
		}
	}
	return resp, false
}

// abandon returns an abandon action for each of st's buckets that has
// reported no request for AbandonAfter, and forgets them.
func (s *Service) abandon(st *stream, now time.Time) []*rlqsv3.RateLimitQuotaResponse_BucketAction {
	var out []*rlqsv3.RateLimitQuotaResponse_BucketAction
	for k, b := range st.buckets {
		if now.Sub(b.lastActive) < s.limits.AbandonAfter {
			continue
		}
		out = append(out, &rlqsv3.RateLimitQuotaResponse_BucketAction{BucketId: &rlqsv3.BucketId{Bucket: b.id},
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
				AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}})
		delete(st.buckets, k)
		s.subs.leave(b.key, st)
	}
	if len(out) > 0 {
		s.mu.Lock()
		s.forget(st.workspace, len(out))
		s.mu.Unlock()
	}
	return out
}

// refusal is a stream ended for a bound: the status the Envoy gets, and
// the reason the metrics count.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string              { return r.err.Error() }
func (r *refusal) GRPCStatus() *status.Status { return status.Convert(r.err) }
