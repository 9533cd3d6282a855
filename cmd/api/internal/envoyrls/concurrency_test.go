package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
	"github.com/unkeyed/ratelimit/services/reservation"
	ledgermem "github.com/unkeyed/ratelimit/services/reservation/memstore"
	ledgerstore "github.com/unkeyed/ratelimit/services/reservation/store"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// TestReleaseInAProcessThatCannotCount: Envoy's stream-done call may reach
// another process than its request-path call did. One whose workspace
// holds the most windows it may, none of them the rule's, frees the slot
// all the same: it is no bad release, and the rule's in-flight gauge keeps
// what the last count saw rather than a made-up figure.
func TestReleaseInAProcessThatCannotCount(t *testing.T) {
	cfg, err := rlsconfig.Load(rlsconfig.File{Name: "llm.yaml", Data: []byte(`domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 10}
`)})
	if err != nil {
		t.Fatal(err)
	}
	keyring := reservation.NewKeyring(nil, slog.New(slog.DiscardHandler))
	ledger := ledgermem.New(ledgermem.DefaultRecords, time.Now)
	process := func(opts ...ratelimit.Option) *Service {
		limiter, err := ratelimit.New("test", opts...)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := newPipeline(t, limiter, pipeline.WithReservations(keyring, ledger, ""))
		return newServiceOnPipeline(t, p, cfg, prometheus.NewRegistry())
	}
	a, b := process(), process(ratelimit.WithMaxWindowsPerWorkspace(1))
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	ask := func(s *Service, descs ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		t.Helper()
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: descs})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// b's one window is the plan rule's.
	if resp := ask(b, one("plan", "free")...); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("fill b's windows: %v", resp)
	}
	resp := ask(a, one("user", "u")...)
	lease := resp.GetDynamicMetadata().GetFields()[LeaseMetadataKey].GetStringValue()
	if resp.OverallCode != rlsv3.RateLimitResponse_OK || lease == "" {
		t.Fatalf("acquire in a: %v", resp)
	}
	gauge := b.metrics.inFlight.WithLabelValues("llm", "llm.user")
	gauge.Set(7) // what an earlier count saw
	release := []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
		{Key: "user", Value: "u"}, {Key: ReleaseKey, Value: lease}}}}
	if resp := ask(b, release...); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("release in b: %v", resp)
	}
	if n := testutil.ToFloat64(b.metrics.badReleases); n != 0 {
		t.Errorf("b counted %v bad releases of a lease it freed", n)
	}
	if v := testutil.ToFloat64(gauge); v != 7 {
		t.Errorf("b set the in-flight gauge to %v without a count", v)
	}
	// The release was recorded: a second one, in a, frees nothing there.
	if resp := ask(a, release...); resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Fatalf("release again in a: %v", resp)
	}
	if v := testutil.ToFloat64(a.metrics.inFlight.WithLabelValues("llm", "llm.user")); v != 1 {
		t.Errorf("a's gauge after a repeated release: %v, want its slot still counted (1)", v)
	}
}

// countingLedger counts the claims made of a ledger.
type countingLedger struct {
	ledgerstore.Ledger
	claims atomic.Int64
}

// Claim counts the claim and makes it of the ledger.
func (l *countingLedger) Claim(ctx context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (bool, int64, error) {
	l.claims.Add(1)
	return l.Ledger.Claim(ctx, id, workspace, cost, expires)
}

// TestReleaseWorkIsBounded: a stream-done call's release entries cost a
// ledger claim a distinct lease id, whatever they repeat: one id sent 10
// times in two descriptors (and empty ids between them) is one claim, one
// slot freed and one bad release (the empty id). More ids than a request can hold leases (one a
// descriptor) are refused before any is claimed, naming the descriptor.
func TestReleaseWorkIsBounded(t *testing.T) {
	cfg, err := rlsconfig.Load(rlsconfig.File{Name: "llm.yaml", Data: []byte(`domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: concurrency}
`)})
	if err != nil {
		t.Fatal(err)
	}
	ledger := &countingLedger{Ledger: ledgermem.New(ledgermem.DefaultRecords, time.Now)}
	limiter, err := ratelimit.New("test")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := newPipeline(t, limiter, pipeline.WithReservations(reservation.NewKeyring(nil, slog.New(slog.DiscardHandler)), ledger, ""))
	s := newServiceOnPipeline(t, p, cfg, prometheus.NewRegistry())
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	ask := func(descs ...*rlcommonv3.RateLimitDescriptor) (*rlsv3.RateLimitResponse, error) {
		return s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "llm", Descriptors: descs})
	}
	resp, err := ask(one("user", "u")...)
	lease := resp.GetDynamicMetadata().GetFields()[LeaseMetadataKey].GetStringValue()
	if err != nil || lease == "" {
		t.Fatalf("acquire: %v, %v", resp, err)
	}
	release := func(ids string) *rlcommonv3.RateLimitDescriptor {
		return &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "user", Value: "u"}, {Key: ReleaseKey, Value: ids}}}
	}
	repeated := strings.TrimSuffix(strings.Repeat(lease+",,", 5), ",")
	if _, err := ask(release(repeated), release(repeated)); err != nil {
		t.Fatal(err)
	}
	if n := ledger.claims.Load(); n != 1 {
		t.Errorf("one lease id sent 10 times: %d ledger claims, want 1", n)
	}
	if n := testutil.ToFloat64(s.metrics.inFlight.WithLabelValues("llm", "llm.user")); n != 0 {
		t.Errorf("in flight after the release: %v, want 0", n)
	}
	if n := testutil.ToFloat64(s.metrics.badReleases); n != 1 {
		t.Errorf("bad releases: %v, want 1 (the empty id, once)", n)
	}
	ledger.claims.Store(0)
	_, err = ask(release(strings.TrimSuffix(strings.Repeat("x,", MaxReleaseIDs), ",")), release("y"))
	var bad *invalid.Error
	if !errors.As(err, &bad) || !strings.Contains(bad.Error(), "descriptors[1]") || ledger.claims.Load() != 0 {
		t.Errorf("%d lease ids in one request: %v after %d claims, want refused naming descriptors[1] before any", MaxReleaseIDs+1, err, ledger.claims.Load())
	}
}

// TestRefusedRequestGivesBackInOneWrite: a request of 99 concurrency
// descriptors and one over its limit is refused; its 99 slots are given
// back with the next replay, in one write, not in a release and a read
// each (198 round trips before); another process then sees every slot
// free.
func TestRefusedRequestGivesBackInOneWrite(t *testing.T) {
	cfg, err := rlsconfig.Load(rlsconfig.File{Name: "r.yaml", Data: []byte(`domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: concurrency}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`)})
	if err != nil {
		t.Fatal(err)
	}
	mem := storetest.NewCountingRegional()
	limiter, err := ratelimit.New("a", ratelimit.WithRegionalStore(mem))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- limiter.Run(runCtx) }()
	defer func() { stop(); <-done }()
	s, _ := newServiceWith(t, limiter, cfg, prometheus.NewRegistry())
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	var descs []*rlcommonv3.RateLimitDescriptor
	for i := range 99 {
		descs = append(descs, one("user", fmt.Sprint(i))...)
	}
	descs = append(descs, one("blocked", "x")...)
	resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs})
	if err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("the request: %v, %v; want refused", resp, err)
	}
	if takes, rel, reads := mem.Takes.Load(), mem.Releases.Load(), mem.Reads.Load(); takes != 99 || rel != 0 || reads != 0 {
		t.Fatalf("the refused request made %d takes, %d releases and %d reads; want its 99 takes alone", takes, rel, reads)
	}
	// Another process sees the 99 slots free once the replay has run.
	other, err := ratelimit.New("b", ratelimit.WithRegionalStore(mem.MemRegional))
	if err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 5*time.Second, "the 99 slots free in the store", func() bool {
		free := 0
		for i := range 99 {
			n, err := other.InFlight(ctx, ratelimit.Acquisition{Workspace: call.Workspace(ctx), Namespace: "envoy:d",
				Identifier: "user=" + fmt.Sprint(i), Limit: 1, Lease: time.Minute, Cost: 1})
			if err == nil && n == 0 {
				free++
			}
		}
		return free == 99
	})
	t.Logf("the give-backs of 99 slots took %d writes", mem.Increments.Load())
}
