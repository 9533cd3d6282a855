package rlqsenvoy

import (
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

var (
	t0    = time.Unix(1_800_000_000, 0)
	alice = map[string]string{"user": "alice", "route": "api"}
)

// assign returns a response assigning s to id for ttl.
func assign(id map[string]string, s *typev3.RateLimitStrategy, ttl *durationpb.Duration) *rlqsv3.RateLimitQuotaResponse {
	return &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: id},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: ttl, RateLimitStrategy: s}}}}}
}

// bucketOf returns a token bucket strategy.
func bucketOf(maxTokens, perFill uint32, fill time.Duration) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens: maxTokens, TokensPerFill: wrapperspb.UInt32(perFill), FillInterval: durationpb.New(fill)}}}
}

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

// passed counts how many of n requests of id at now pass.
func passed(f *Filter, id map[string]string, n int, now time.Time) (ok int) {
	for range n {
		if a, _ := f.Request(id, now); a {
			ok++
		}
	}
	return ok
}

// TestReports: a bucket's first request is reported at once, with no time
// elapsed; after that, every bucket in one message with the counts since
// the last and the time elapsed in whole seconds, the domain on each.
func TestReports(t *testing.T) {
	f := New("d")
	if r := f.Report(t0); r != nil {
		t.Fatalf("a filter with no buckets reported %v", r)
	}
	ok, first := f.Request(alice, t0)
	if !ok || first == nil || first.Domain != "d" || len(first.BucketQuotaUsages) != 1 {
		t.Fatalf("the first request: %v, %v", ok, first)
	}
	if u := first.BucketQuotaUsages[0]; u.NumRequestsAllowed != 1 || u.TimeElapsed.AsDuration() != 0 || u.BucketId.Bucket["user"] != "alice" {
		t.Fatalf("the first report: %v", u)
	}
	if _, again := f.Request(alice, t0); again != nil {
		t.Fatal("a second request reported at once")
	}
	f.Request(map[string]string{"user": "bob"}, t0)
	r := f.Report(t0.Add(ReportInterval + 700*time.Millisecond))
	if r.Domain != "d" || len(r.BucketQuotaUsages) != 2 {
		t.Fatalf("the periodic report: %v", r)
	}
	for _, u := range r.BucketQuotaUsages {
		if u.TimeElapsed.AsDuration() != ReportInterval {
			t.Fatalf("time elapsed %v, want whole seconds: %v", u.TimeElapsed.AsDuration(), ReportInterval)
		}
	}
	if a := r.BucketQuotaUsages[0]; a.BucketId.Bucket["user"] != "alice" || a.NumRequestsAllowed != 1 {
		t.Fatalf("alice's usage since the first report: %v", a)
	}
	if r := f.Report(t0.Add(2 * ReportInterval)); r.BucketQuotaUsages[0].NumRequestsAllowed != 0 {
		t.Fatalf("an idle bucket's report: %v", r.BucketQuotaUsages[0])
	}
}

// TestTokenBucketAssignment: an assigned token bucket starts full, refills
// continuously at tokens_per_fill per whole second of fill_interval, and
// is kept with its tokens when assigned again the same (the seconds of
// fill_interval are not compared), started full again when changed.
func TestTokenBucketAssignment(t *testing.T) {
	f := New("d")
	f.Request(alice, t0)
	ttl := durationpb.New(time.Minute)
	f.Apply(assign(alice, bucketOf(10, 5, time.Second), ttl), t0)
	if n := passed(f, alice, 12, t0); n != 10 {
		t.Fatalf("a full bucket of 10 let %d of 12 through", n)
	}
	if n := passed(f, alice, 5, t0.Add(500*time.Millisecond)); n != 2 {
		t.Fatalf("half a second at 5 a second let %d through, want 2", n)
	}
	// The same bucket again: its tokens stay; a fill interval of 7 s
	// compares the same (nanoseconds only) and is kept too.
	f.Apply(assign(alice, bucketOf(10, 5, time.Second), ttl), t0.Add(500*time.Millisecond))
	f.Apply(assign(alice, bucketOf(10, 5, 7*time.Second), ttl), t0.Add(500*time.Millisecond))
	if n := passed(f, alice, 5, t0.Add(500*time.Millisecond)); n != 0 {
		t.Fatalf("a bucket assigned again the same let %d through: it refilled", n)
	}
	// Another bucket: full again.
	f.Apply(assign(alice, bucketOf(3, 5, time.Second), ttl), t0.Add(time.Second))
	if n := passed(f, alice, 5, t0.Add(time.Second)); n != 3 {
		t.Fatalf("a changed bucket of 3 let %d of 5 through, want 3 (it starts full)", n)
	}
	// A fill interval under a second lets everything through.
	f.Apply(assign(alice, bucketOf(3, 5, 500*time.Millisecond), ttl), t0.Add(time.Second))
	if n := passed(f, alice, 50, t0.Add(time.Second)); n != 50 {
		t.Fatalf("a bucket filled every half second let %d of 50 through", n)
	}
}

// TestTimeToLive: an assignment lasts whole seconds of its time to live,
// an unset or zero one not at all; expired, the bucket behaves as with no
// assignment. requests_per_time_unit and an unset strategy are ignored,
// keeping what was in force; an action for a bucket the filter does not
// hold is ignored; an abandon action forgets the bucket, whose next
// request reports it at once.
func TestTimeToLive(t *testing.T) {
	f := New("d")
	f.Request(alice, t0)
	deny := blanket(typev3.RateLimitStrategy_DENY_ALL)
	f.Apply(assign(alice, deny, durationpb.New(2900*time.Millisecond)), t0)
	if n := passed(f, alice, 3, t0.Add(1999*time.Millisecond)); n != 0 {
		t.Fatalf("a DENY_ALL of 2.9 s let %d through after 2 s", n)
	}
	if n := passed(f, alice, 3, t0.Add(2*time.Second)); n != 3 {
		t.Fatalf("a DENY_ALL of 2.9 s (2 whole seconds) still denied %d of 3 at 2 s", 3-n)
	}
	f.Apply(assign(alice, deny, nil), t0.Add(3*time.Second))
	if n := passed(f, alice, 3, t0.Add(3*time.Second)); n != 3 {
		t.Fatalf("a DENY_ALL with no time to live denied %d of 3: it expires at once", 3-n)
	}
	f.Apply(assign(alice, deny, durationpb.New(time.Minute)), t0.Add(4*time.Second))
	perUnit := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_RequestsPerTimeUnit_{
		RequestsPerTimeUnit: &typev3.RateLimitStrategy_RequestsPerTimeUnit{RequestsPerTimeUnit: 100, TimeUnit: typev3.RateLimitUnit_SECOND}}}
	f.Apply(assign(alice, perUnit, durationpb.New(time.Minute)), t0.Add(4*time.Second))
	f.Apply(assign(alice, &typev3.RateLimitStrategy{}, durationpb.New(time.Minute)), t0.Add(4*time.Second))
	if n := passed(f, alice, 3, t0.Add(5*time.Second)); n != 0 {
		t.Fatalf("requests_per_time_unit or no strategy replaced a DENY_ALL: %d let through", n)
	}
	f.Apply(assign(map[string]string{"user": "carol"}, deny, durationpb.New(time.Minute)), t0.Add(5*time.Second))
	if f.Buckets() != 1 {
		t.Fatalf("an action for a bucket the filter does not hold made one: %d buckets", f.Buckets())
	}
	f.Apply(&rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId:     &rlqsv3.BucketId{Bucket: alice},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{}}}}},
		t0.Add(6*time.Second))
	if f.Buckets() != 0 {
		t.Fatal("an abandoned bucket stayed")
	}
	if ok, first := f.Request(alice, t0.Add(7*time.Second)); !ok || first == nil {
		t.Fatalf("an abandoned bucket's next request: %v, %v (want it let through and reported at once)", ok, first)
	}
}

// TestNoAssignment: with no_assignment_behavior DENY_ALL, a bucket's first
// request and every one until an assignment is refused, and is again once
// the assignment expires.
func TestNoAssignment(t *testing.T) {
	f := New("d", WithNoAssignment(blanket(typev3.RateLimitStrategy_DENY_ALL)))
	if ok, first := f.Request(alice, t0); ok || first.BucketQuotaUsages[0].NumRequestsDenied != 1 {
		t.Fatalf("the first request under DENY_ALL: %v, %v", ok, first)
	}
	f.Apply(assign(alice, blanket(typev3.RateLimitStrategy_ALLOW_ALL), durationpb.New(5*time.Second)), t0)
	if n := passed(f, alice, 3, t0.Add(4*time.Second)); n != 3 {
		t.Fatalf("ALLOW_ALL let %d of 3 through", n)
	}
	if n := passed(f, alice, 3, t0.Add(5*time.Second)); n != 0 {
		t.Fatalf("after ALLOW_ALL expired, %d of 3 let through under DENY_ALL", n)
	}
}
