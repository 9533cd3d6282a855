package rlqs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/services/access"
)

// usage returns a report of domain d: one usage of each bucket, allowed
// and denied in elapsed seconds.
func usage(d string, elapsed int64, allowed, denied uint64, ids ...map[string]string) *rlqsv3.RateLimitQuotaUsageReports {
	rep := &rlqsv3.RateLimitQuotaUsageReports{Domain: d}
	for _, id := range ids {
		rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, &rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{
			BucketId: &rlqsv3.BucketId{Bucket: id}, TimeElapsed: durationpb.New(time.Duration(elapsed) * time.Second),
			NumRequestsAllowed: allowed, NumRequestsDenied: denied})
	}
	return rep
}

func user(name string) map[string]string { return map[string]string{"user": name} }

// TestSpentWindowIsPushedToEveryEnvoy: once one Envoy's report spends the
// window, every other Envoy of the bucket on the process is handed
// DENY_ALL at once, until the reset, without waiting for its own report;
// one that holds a denial already is sent nothing again; another
// workspace's bucket of the same id, counted apart, is not.
func TestSpentWindowIsPushedToEveryEnvoy(t *testing.T) {
	now := time.Unix(1_800_000_010, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 100, length: time.Minute, now: clock, counts: map[string]int64{}}, clock)
	a, b, c, other := newStream(svc, "ws"), newStream(svc, "ws"), newStream(svc, "ws"), newStream(svc, "other")
	for _, st := range []*stream{a, b, c, other} {
		if _, err := svc.report(context.Background(), st, usage("d", 0, 0, 0, user("u"))); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := svc.report(context.Background(), a, usage("d", 5, 100, 0, user("u")))
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy(); !isDeny(s) {
		t.Fatalf("the report that spent the window: %v, want DENY_ALL", s)
	}
	for i, st := range []*stream{b, c} {
		select {
		case <-st.wake:
		default:
			t.Fatalf("stream %d: not woken", i)
		}
		pushed, last := svc.pushed(st)
		q := pushed.GetBucketAction()[0].GetQuotaAssignmentAction()
		if last || !isDeny(q.GetRateLimitStrategy()) || q.GetAssignmentTimeToLive().AsDuration() != 51*time.Second {
			t.Fatalf("stream %d was pushed %v, want DENY_ALL for the 50 s to the reset, rounded up", i, pushed)
		}
	}
	select {
	case <-other.wake:
		t.Fatal("another workspace's Envoy of the same bucket id was pushed a denial of this one's limit")
	default:
	}
	// b's own report finds the window spent: it holds the denial already.
	if resp, _ := svc.report(context.Background(), b, usage("d", 5, 0, 3, user("u"))); len(resp.GetBucketAction()) != 0 {
		t.Fatalf("a denial sent again: %v", resp)
	}
}

// TestBoundsRefuseWithAReason: a stream past its buckets, a workspace past
// its buckets across streams, a connection past its streams, and a
// workspace past its streams across connections are each refused with resource_exhausted naming the bound and its setting, and
// counted; a refused bucket is not held.
func TestBoundsRefuseWithAReason(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 100, length: time.Minute, now: clock, counts: map[string]int64{}}, clock,
		WithLimits(Limits{BucketsPerStream: 2, BucketsPerWorkspace: 3, StreamsPerConnection: 2, StreamsPerWorkspace: 3}))
	a, b := newStream(svc, "ws"), newStream(svc, "ws")
	_, err := svc.report(context.Background(), a, usage("d", 0, 0, 0, user("1"), user("2"), user("3")))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "bucket_quota_usages[2]") ||
		!strings.Contains(err.Error(), "UNKEY_RLQS_MAX_BUCKETS_PER_STREAM") {
		t.Fatalf("a third bucket on a stream of two: %v", err)
	}
	if _, err := svc.report(context.Background(), b, usage("d", 0, 0, 0, user("4"))); err != nil {
		t.Fatal(err)
	}
	_, err = svc.report(context.Background(), b, usage("d", 0, 0, 0, user("5")))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "UNKEY_RLQS_MAX_BUCKETS_PER_WORKSPACE") {
		t.Fatalf("a fourth bucket of a workspace of three: %v", err)
	}
	if _, err := svc.report(context.Background(), newStream(svc, "other"), usage("d", 0, 0, 0, user("5"))); err != nil {
		t.Fatalf("another workspace's bucket: %v", err)
	}
	svc.close(a) // gives its two buckets back
	if _, err := svc.report(context.Background(), b, usage("d", 0, 0, 0, user("5"))); err != nil {
		t.Fatalf("once a stream closed: %v", err)
	}
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "conns"})
	for i := range 3 {
		_, err := svc.openStream(ctx, "10.0.0.1:4000", func() {})
		if i < 2 && err != nil || i == 2 && (status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "UNKEY_RLQS_MAX_STREAMS_PER_CONNECTION")) {
			t.Fatalf("stream %d of a connection of two: %v", i, err)
		}
	}
	// Workspace "conns" holds two streams: a third, on another
	// connection, is its last (a bound of three); a fourth is refused.
	if _, err := svc.openStream(ctx, "10.0.0.2:4000", func() {}); err != nil {
		t.Fatalf("a third stream of the workspace: %v", err)
	}
	if _, err := svc.openStream(ctx, "10.0.0.3:4000", func() {}); status.Code(err) != codes.ResourceExhausted ||
		!strings.Contains(err.Error(), "UNKEY_RLQS_MAX_STREAMS_PER_WORKSPACE") {
		t.Fatalf("a fourth stream of a workspace of three: %v", err)
	}
}

// TestSilentBucketsAreAbandoned: a bucket whose reports count no request
// for AbandonAfter is abandoned (and its place given back), while one
// that keeps asking is not.
func TestSilentBucketsAreAbandoned(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 100_000, length: time.Minute, now: clock, counts: map[string]int64{}}, clock,
		WithLimits(Limits{AbandonAfter: 30 * time.Second}))
	st := newStream(svc, "ws")
	if _, err := svc.report(context.Background(), st, usage("d", 0, 0, 0, user("quiet"), user("busy"))); err != nil {
		t.Fatal(err)
	}
	var abandoned []string
	for range 7 {
		now = now.Add(ReportInterval)
		rep := usage("d", 5, 4, 0, user("busy"))
		if len(abandoned) == 0 { // an Envoy forgets an abandoned bucket
			rep.BucketQuotaUsages = append(rep.BucketQuotaUsages, usage("d", 5, 0, 0, user("quiet")).BucketQuotaUsages...)
		}
		resp, err := svc.report(context.Background(), st, rep)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range resp.BucketAction {
			if a.GetAbandonAction() != nil {
				abandoned = append(abandoned, fmt.Sprint(now.Sub(time.Unix(1_800_000_000, 0)), " ", a.BucketId.Bucket["user"]))
			}
		}
	}
	if fmt.Sprint(abandoned) != "[30s quiet]" {
		t.Fatalf("abandoned %v, want the quiet bucket once, after 30 s", abandoned)
	}
	if len(st.buckets) != 1 || svc.workspaces["ws"] != 1 {
		t.Fatalf("held: %d buckets, workspace %d; want the busy one", len(st.buckets), svc.workspaces["ws"])
	}
}

// pipe is a Stream whose reports the test sends and whose answers it
// reads.
type pipe struct {
	ctx     context.Context
	reports chan *rlqsv3.RateLimitQuotaUsageReports
	answers chan *rlqsv3.RateLimitQuotaResponse
}

func newPipe() *pipe {
	return &pipe{ctx: call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws"}),
		reports: make(chan *rlqsv3.RateLimitQuotaUsageReports), answers: make(chan *rlqsv3.RateLimitQuotaResponse, 16)}
}

func (p *pipe) Context() context.Context { return p.ctx }
func (p *pipe) Recv() (*rlqsv3.RateLimitQuotaUsageReports, error) {
	rep, ok := <-p.reports
	if !ok {
		return nil, io.EOF
	}
	return rep, nil
}
func (p *pipe) Send(r *rlqsv3.RateLimitQuotaResponse) error { p.answers <- r; return nil }

// TestDrainExpiresEveryAssignment: draining sends each stream its
// assignments again with a time to live of 0, ends it, refuses new
// streams as unavailable, and returns once none is left.
func TestDrainExpiresEveryAssignment(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 600, length: time.Minute, now: clock, counts: map[string]int64{}}, clock)
	p := newPipe()
	served := make(chan error, 1)
	go func() { served <- svc.Serve("conn", p) }()
	p.reports <- usage("d", 0, 0, 0, user("a"), map[string]string{"route": "r"})
	first := <-p.answers
	if len(first.BucketAction) != 2 {
		t.Fatalf("first answer %v", first)
	}
	if err := svc.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	last := <-p.answers
	if len(last.BucketAction) != 2 {
		t.Fatalf("drain sent %v, want both buckets", last)
	}
	for _, a := range last.BucketAction {
		if ttl := a.GetQuotaAssignmentAction().GetAssignmentTimeToLive(); ttl == nil || ttl.AsDuration() != 0 {
			t.Fatalf("drain sent %v, want a time to live of 0", a)
		}
	}
	if err := <-served; err != nil {
		t.Fatalf("a drained stream ended with %v, want OK", err)
	}
	if err := svc.Serve("conn", newPipe()); status.Code(err) != codes.Unavailable {
		t.Fatalf("a stream while draining: %v", err)
	}
}

// flaky decides as d, but fails while down; deciding a concurrency limit
// for "lease".
type flaky struct {
	*windowCounter
	down bool
}

func (f *flaky) Quota(ctx context.Context, domain string, d *rlcommonv3.RateLimitDescriptor) (envoyrls.QuotaDecision, error) {
	switch {
	case f.down:
		return envoyrls.QuotaDecision{}, errors.New("redis: connection refused")
	case d.Entries[0].Key == "lease":
		return envoyrls.QuotaDecision{Concurrent: true}, nil
	}
	return f.windowCounter.Quota(ctx, domain, d)
}

// TestFailuresLeaveAssignmentsStanding: a decision that fails for want of
// a store answers nothing for the bucket (the Envoy keeps what it holds)
// and keeps the stream; a bucket of a concurrency rule gets the no-rule
// behaviour, as configured.
func TestFailuresLeaveAssignmentsStanding(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	d := &flaky{windowCounter: &windowCounter{limit: 600, length: time.Minute, now: clock, counts: map[string]int64{}}}
	svc := newService(t, d, clock, WithNoRule(typev3.RateLimitStrategy_DENY_ALL))
	st := newStream(svc, "ws")
	resp, err := svc.report(context.Background(), st, usage("d", 0, 0, 0, user("a"), map[string]string{"lease": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.BucketAction) != 2 || resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetTokenBucket() == nil ||
		!isDeny(resp.BucketAction[1].GetQuotaAssignmentAction().GetRateLimitStrategy()) {
		t.Fatalf("answer %v: want a token bucket, then the no-rule DENY_ALL for the concurrency rule's bucket", resp)
	}
	d.down = true
	now = now.Add(TTL)
	resp, err = svc.report(context.Background(), st, usage("d", 5, 3, 0, user("a")))
	if err != nil || len(resp.BucketAction) != 0 {
		t.Fatalf("with the store down: %v, %v; want no action and no error", resp, err)
	}
}

// TestBucketIDsAreDescriptors: a bucket id the rate limit service could
// not take as a descriptor, or a count past the largest cost, ends the stream with invalid_argument naming
// the report's entry and the rule, and nothing of it is held.
func TestBucketIDsAreDescriptors(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 100, length: time.Minute, now: clock, counts: map[string]int64{}}, clock)
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprint("k", i)] = "v"
	}
	for _, tc := range []struct {
		id   map[string]string
		want string
	}{
		{map[string]string{}, "bucket_quota_usages[1].bucket_id.bucket: must hold 1 to 32 entries"},
		{many, "bucket_quota_usages[1].bucket_id.bucket: must hold 1 to 32 entries"},
		{map[string]string{"": "v"}, "must not hold an empty key"},
		{map[string]string{"unkey.release": "l1"}, `bucket_quota_usages[1].bucket_id.bucket["unkey.release"]: must not be a release entry`},
		{map[string]string{"user": strings.Repeat("x", 1025)}, `bucket_quota_usages[1].bucket_id.bucket["user"]: key and value must be at most 1024 bytes each`},
		{nil, "bucket_quota_usages[1].num_requests_denied: must be at most 9007199254740992"},
	} {
		st := newStream(svc, "ws")
		rep := usage("d", 0, 0, 0, user("ok"), tc.id)
		if tc.id == nil {
			rep = usage("d", 5, 0, 0, user("ok"), user("x"))
			rep.BucketQuotaUsages[1].NumRequestsDenied = 1 << 60
		}
		_, err := svc.report(context.Background(), st, rep)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bucket id of %d entries: %v, want %q", len(tc.id), err, tc.want)
		}
		svc.close(st)
	}
	if n := svc.workspaces["ws"]; n != 0 {
		t.Fatalf("%d buckets held after the refusals and closes", n)
	}
}

// stuck is a Stream whose Envoy never reads: every Send blocks until the
// test ends it.
type stuck struct {
	*pipe
	release chan struct{}
	sending chan struct{} // closed once a Send blocks
	once    sync.Once
}

func newStuck() *stuck {
	return &stuck{pipe: newPipe(), release: make(chan struct{}), sending: make(chan struct{})}
}

func (s *stuck) Send(*rlqsv3.RateLimitQuotaResponse) error {
	s.once.Do(func() { close(s.sending) })
	<-s.release
	return errors.New("ended")
}

// TestASlowEnvoyBlocksNoOther: an Envoy that stops reading holds its own
// stream's writer only: another Envoy of the same bucket on the process
// is answered, and the denial its report causes is pushed without
// waiting on the stuck one; the denials it reports reach the analytics.
func TestASlowEnvoyBlocksNoOther(t *testing.T) {
	now := time.Unix(1_800_000_010, 0)
	clock := func() time.Time { return now }
	fleet := newTallies(clock)
	svc, err := New(&windowCounter{limit: 100, length: time.Minute, now: clock, counts: map[string]int64{}}, fleet,
		prometheus.NewRegistry(), WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	slow := newStuck()
	defer close(slow.release)
	go svc.Serve("slow", slow)
	slow.reports <- usage("d", 0, 0, 0, user("u")) // its answer is never read
	fast := newPipe()
	go svc.Serve("fast", fast)
	for i, rep := range []*rlqsv3.RateLimitQuotaUsageReports{usage("d", 0, 0, 0, user("u")), usage("d", 5, 100, 7, user("u"))} {
		select {
		case fast.reports <- rep:
		case <-time.After(5 * time.Second):
			t.Fatalf("report %d: the fast Envoy's stream does not read", i)
		}
		select {
		case <-fast.answers:
		case <-time.After(5 * time.Second):
			t.Fatalf("report %d: the fast Envoy is not answered while another is stuck", i)
		}
	}
	fleet.mu.Lock()
	defer fleet.mu.Unlock()
	if n := fleet.denied["envoy:d user=u"]; n != 7 {
		t.Fatalf("denials in the analytics: %v, want 7 of user=u", fleet.denied)
	}
}

// TestStreamsEnd: a stream that reports nothing for AbandonAfter is ended
// (an Envoy holding a bucket reports it every 5 s), and a drain that runs
// out of time ends the streams left, one whose Envoy does not read among
// them, and says how many.
func TestStreamsEnd(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 100, length: time.Minute, now: clock, counts: map[string]int64{}}, clock,
		WithLimits(Limits{AbandonAfter: 50 * time.Millisecond, DrainTimeout: 50 * time.Millisecond}))
	quiet := newPipe()
	ended := make(chan error, 1)
	go func() { ended <- svc.Serve("quiet", quiet) }()
	quiet.reports <- usage("d", 0, 0, 0, user("u"))
	<-quiet.answers
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("a silent stream ended with %v, want OK", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stream silent past AbandonAfter was not ended")
	}

	slow := newStuck()
	go func() { ended <- svc.Serve("slow", slow) }()
	slow.reports <- usage("d", 0, 0, 0, user("u")) // its answer is never read
	<-slow.sending
	err := svc.Drain(context.Background())
	if err == nil || !strings.Contains(err.Error(), "1 did not end") {
		t.Fatalf("drain with a stuck stream: %v, want it counted", err)
	}
	close(slow.release) // the Envoy's connection drops: its Send fails
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the stuck stream did not end once drained")
	}
}

// TestShadowRulesAreNotEnforced: a bucket of a rule in shadow mode is
// allowed whatever its count, as ShouldRateLimit answers it OK.
func TestShadowRulesAreNotEnforced(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, shadowed{&windowCounter{limit: 1, length: time.Minute, now: clock, counts: map[string]int64{}}}, clock)
	st := newStream(svc, "ws")
	for i, rep := range []*rlqsv3.RateLimitQuotaUsageReports{usage("d", 0, 0, 0, user("u")), usage("d", 5, 50, 0, user("u"))} {
		resp, err := svc.report(context.Background(), st, rep)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && resp.BucketAction[0].GetQuotaAssignmentAction().GetRateLimitStrategy().GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL {
			t.Fatalf("a shadow rule's bucket: %v, want ALLOW_ALL", resp)
		}
		if i == 1 && len(resp.BucketAction) != 0 {
			t.Fatalf("a shadow rule's bucket 50 over its limit: %v, want ALLOW_ALL to stand", resp)
		}
	}
}

// shadowed decides as its counter, in shadow mode.
type shadowed struct{ *windowCounter }

func (s shadowed) Quota(ctx context.Context, domain string, d *rlcommonv3.RateLimitDescriptor) (envoyrls.QuotaDecision, error) {
	q, err := s.windowCounter.Quota(ctx, domain, d)
	q.Shadow, q.Over = true, false
	return q, err
}
