package rlqs

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/internal/testkit/rlqsenvoy"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// windowCounter is a Decider of one rule: limit requests a window of
// length, counted from the epoch, for descriptors whose first entry is
// key "user"; no rule for any other. A count is a hit whatever the
// verdict, as the rate limit service counts one.
type windowCounter struct {
	mu     sync.Mutex
	limit  int64
	length time.Duration
	now    func() time.Time
	counts map[string]int64 // by descriptor and window
}

func (c *windowCounter) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := req.Descriptors[0]
	if d.Entries[len(d.Entries)-1].Key != "user" {
		return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
			Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{{Code: rlsv3.RateLimitResponse_OK}}}, nil
	}
	now := c.now()
	window := now.UnixNano() / int64(c.length)
	k := fmt.Sprint(d.Entries, window)
	c.counts[k] += int64(d.GetHitsAddend().GetValue())
	n := c.counts[k]
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: uint32(c.limit), Unit: rlsv3.RateLimitResponse_RateLimit_MINUTE},
		LimitRemaining:     uint32(max(c.limit-n, 0)),
		DurationUntilReset: durationpb.New(time.Duration((window+1)*int64(c.length) - now.UnixNano()))}
	if n > c.limit {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	return &rlsv3.RateLimitResponse{OverallCode: st.Code, Statuses: []*rlsv3.RateLimitResponse_DescriptorStatus{st}}, nil
}

func (c *windowCounter) Quota(ctx context.Context, domain string, d *rlcommonv3.RateLimitDescriptor) (envoyrls.QuotaDecision, error) {
	resp, err := c.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlcommonv3.RateLimitDescriptor{d}})
	if err != nil {
		return envoyrls.QuotaDecision{}, err
	}
	st := resp.Statuses[0]
	return envoyrls.QuotaDecision{Limited: st.CurrentLimit != nil, Over: st.Code == rlsv3.RateLimitResponse_OVER_LIMIT,
		Remaining: int64(st.LimitRemaining), UntilReset: st.DurationUntilReset.AsDuration(),
		Algorithm: ratelimit.FixedWindow, Quota: c.limit, Window: c.length}, nil
}

// tallies is a Fleet in memory: exact sliding windows of what was added,
// on the test's clock.
type tallies struct {
	mu     sync.Mutex
	now    func() time.Time
	added  map[string][]added
	denied map[string]uint64
}

type added struct {
	at time.Time
	n  int64
}

func newTallies(now func() time.Time) *tallies {
	return &tallies{now: now, added: map[string][]added{}, denied: map[string]uint64{}}
}

func (f *tallies) Tally(_ context.Context, namespace, identifier string, n int64, window time.Duration) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	k, now := namespace+" "+identifier, f.now()
	kept := f.added[k][:0]
	var sum int64
	for _, a := range f.added[k] {
		if now.Sub(a.at) < window {
			kept = append(kept, a)
			sum += a.n
		}
	}
	f.added[k] = append(kept, added{now, n})
	return sum + n, nil
}

func (f *tallies) RecordDenied(_ context.Context, namespace, identifier string, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.denied[namespace+" "+identifier] += n
}

// newService returns a service deciding with d and tallying in memory, on
// clock.
func newService(t *testing.T, d Decider, clock func() time.Time, opts ...Option) *Service {
	t.Helper()
	s, err := New(d, newTallies(clock), prometheus.NewRegistry(), append([]Option{WithClock(clock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// newStream returns a stream of workspace ws as the service opens one.
func newStream(s *Service, ws string) *stream {
	st, err := s.openStream(call.WithPrincipal(context.Background(), access.Principal{Workspace: ws}), fmt.Sprint(ws, len(s.streams)), func() {})
	if err != nil {
		panic(err)
	}
	return st
}

// TestStreamAnswersReports: over a real gRPC stream, a report of a bucket
// no rule limits is answered ALLOW_ALL, one of a limited bucket a token
// bucket, both with a time to live of whole seconds; a report of another
// domain ends the stream with invalid_argument naming the field.
func TestStreamAnswersReports(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	svc := newService(t, &windowCounter{limit: 600, length: time.Minute, now: clock, counts: map[string]int64{}}, clock)
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	rlqsv3.RegisterRateLimitQuotaServiceServer(srv, svc)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///rlqs", grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		return lis.DialContext(ctx)
	}), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := rlqsv3.NewRateLimitQuotaServiceClient(conn).StreamRateLimitQuotas(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	envoy := rlqsenvoy.New("d")
	_, first := envoy.Request(map[string]string{"route": "api"}, now)
	_, second := envoy.Request(map[string]string{"user": "alice"}, now)
	for _, rep := range []*rlqsv3.RateLimitQuotaUsageReports{first, second} {
		if err := stream.Send(rep); err != nil {
			t.Fatal(err)
		}
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		a := resp.BucketAction[0].GetQuotaAssignmentAction()
		if ttl := a.GetAssignmentTimeToLive(); ttl.GetSeconds() < 1 || ttl.GetNanos() != 0 {
			t.Fatalf("time to live %v: want whole seconds, at least one", ttl)
		}
		_, limited := rep.BucketQuotaUsages[0].BucketId.Bucket["user"]
		switch s := a.GetRateLimitStrategy(); {
		case !limited && s.GetBlanketRule() != typev3.RateLimitStrategy_ALLOW_ALL:
			t.Fatalf("a bucket no rule limits: %v", s)
		case limited && s.GetTokenBucket().GetTokensPerFill().GetValue() == 0:
			t.Fatalf("a limited bucket: %v", s)
		}
		envoy.Apply(resp, now)
	}
	stream.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: "other", BucketQuotaUsages: first.BucketQuotaUsages})
	if _, err := stream.Recv(); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "domain") {
		t.Fatalf("a report of another domain: %v", err)
	}
}

// fleetRun is one simulated fleet on one bucket of 1,000 a minute: what
// it admitted in each window and what it asked.
type fleetRun struct {
	admitted, asked []int64
}

// runFleet simulates n Envoys for windows minutes, in steps of 10 ms,
// each asking at its rate (demand a second, by Envoy and time), reporting
// when Envoy's filter does and applying every answer at once, Envoy i on
// process i%processes of a fleet whose processes share one limit's counts
// and one set of tallies. With processes 0 no service is asked: every
// Envoy holds the whole rate (1,000 a minute) as its own token bucket, as
// static quotas do.
func runFleet(t *testing.T, n, windows int, demand func(envoy int, at time.Duration) float64, processes int) fleetRun {
	t.Helper()
	return runFleetOn(t, n, windows, demand, processes, func(clock func() time.Time) (Decider, Fleet, context.Context) {
		return &windowCounter{limit: 1000, length: time.Minute, now: clock, counts: map[string]int64{}}, newTallies(clock),
			context.Background()
	})
}

// backend builds what the processes of a simulated fleet share, on clock:
// the decider of the bucket's rule (1,000 a minute), the fleet's tallies,
// and the context of the Envoys' calls.
type backend func(clock func() time.Time) (Decider, Fleet, context.Context)

// runFleetOn is runFleet on the decider and tallies of newBackend.
func runFleetOn(t *testing.T, n, windows int, demand func(envoy int, at time.Duration) float64, processes int, newBackend backend) fleetRun {
	t.Helper()
	start := time.Unix(1_800_000_000, 0)
	now := start
	clock := func() time.Time { return now }
	static := processes == 0
	decider, fleet, ctx := newBackend(clock)
	svcs := make([]*Service, max(processes, 1))
	for i := range svcs {
		s, err := New(decider, fleet, prometheus.NewRegistry(), WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		svcs[i] = s
	}
	id := map[string]string{"user": "shared"}
	envoys := make([]*rlqsenvoy.Filter, n)
	streams := make([]*stream, n)
	owed := make([]float64, n) // requests asked and not yet sent, fractions
	for i := range envoys {
		envoys[i] = rlqsenvoy.New("d")
		streams[i] = newStream(svcs[i%len(svcs)], "ws")
	}
	if static {
		full := &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
			MaxTokens: 1000, TokensPerFill: wrapperspb.UInt32(1000), FillInterval: durationpb.New(time.Minute)}}}
		for _, e := range envoys {
			e.Request(id, now)
			e.Apply(&rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
				BucketId: &rlqsv3.BucketId{Bucket: id},
				BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
					QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
						AssignmentTimeToLive: durationpb.New(time.Hour), RateLimitStrategy: full}}}}}, now)
		}
	}
	send := func(i int, rep *rlqsv3.RateLimitQuotaUsageReports) {
		if static || rep == nil {
			return
		}
		svc := svcs[i%len(svcs)]
		resp, err := svc.report(ctx, streams[i], rep)
		if err != nil {
			t.Fatal(err)
		}
		envoys[i].Apply(resp, now)
		// What other streams pushed to this one's Envoy, at once.
		for j, st := range streams {
			select {
			case <-st.wake:
				resp, _ := svcs[j%len(svcs)].pushed(st)
				envoys[j].Apply(resp, now)
			default:
			}
		}
	}
	run := fleetRun{admitted: make([]int64, windows), asked: make([]int64, windows)}
	step := 10 * time.Millisecond
	nextReport := make([]time.Time, n)
	for now.Before(start.Add(time.Duration(windows) * time.Minute)) {
		w := int(now.Sub(start) / time.Minute)
		for i, e := range envoys {
			owed[i] += demand(i, now.Sub(start)) * step.Seconds()
			for ; owed[i] >= 1; owed[i]-- {
				run.asked[w]++
				ok, first := e.Request(id, now)
				if ok {
					run.admitted[w]++
				}
				if first != nil {
					send(i, first)
					nextReport[i] = now.Add(rlqsenvoy.ReportInterval)
				}
			}
			if !nextReport[i].IsZero() && !now.Before(nextReport[i]) {
				send(i, e.Report(now))
				nextReport[i] = now.Add(rlqsenvoy.ReportInterval)
			}
		}
		now = now.Add(step)
	}
	return run
}

// TestFleetSharesOneBudget: ten Envoys on one bucket of 1,000 a minute,
// one asking ten times what each other asks, one silent for the first
// half minute of each window and then bursting, all together asking
// about two and a half times the limit, for five minutes, on one, two and
// three processes sharing one count and one set of tallies. Each window
// admits at most the limit and what the Envoys' assignments let through
// between two reports once it is spent (a report interval at the rate
// they were assigned: under a tenth of the limit), and at least 80 % of
// the limit; every Envoy holding the whole rate, as static quotas do,
// admits all it asks.
func TestFleetSharesOneBudget(t *testing.T) {
	demand := rlqsenvoy.SkewedDemand
	static := runFleet(t, 10, 5, demand, 0)
	for _, processes := range []int{1, 2, 3} {
		shared := runFleet(t, 10, 5, demand, processes)
		for w := range shared.admitted {
			t.Logf("%d processes, window %d: asked %d; shared budget admitted %d, static quotas %d", processes, w, shared.asked[w],
				shared.admitted[w], static.admitted[w])
			if a := shared.admitted[w]; a > 1100 || a < 800 {
				t.Errorf("%d processes, window %d: the shared budget admitted %d of a limit of 1,000 (asked %d), want 800 to 1,100",
					processes, w, a, shared.asked[w])
			}
		}
	}
}
