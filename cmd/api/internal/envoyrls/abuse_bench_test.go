package envoyrls

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
	ledgermem "github.com/unkeyed/ratelimit/services/reservation/memstore"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// BenchmarkVictimUnderReleaseAttack measures another caller's decisions
// (a victim's p50, and its ratio to the quiet p50 of the same run) while
// two attackers send, as fast as they are answered, the release calls and
// refusals that cost the most: forged lease ids of 150 characters, as
// many as an entry holds; one valid id as often as an entry holds; and a
// refused request of 99 concurrency descriptors.
func BenchmarkVictimUnderReleaseAttack(b *testing.B) {
	cfg, err := rlsconfig.Load(rlsconfig.File{Name: "r.yaml", Data: []byte(`domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000000000}
  - key: slot
    rate_limit: {unit: minute, requests_per_unit: 1000000, algorithm: concurrency}
  - key: blocked
    rate_limit: {unit: minute, requests_per_unit: 0}
`)})
	if err != nil {
		b.Fatal(err)
	}
	limiter, err := ratelimit.New("bench")
	if err != nil {
		b.Fatal(err)
	}
	p, _ := newPipeline(b, limiter, pipeline.WithReservations(reservation.NewKeyring(nil, slog.New(slog.DiscardHandler)),
		ledgermem.New(ledgermem.DefaultRecords, time.Now), ""))
	s := newServiceOnPipeline(b, p, cfg, prometheus.NewRegistry())
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	ask := func(descs ...*rlcommonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
		resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: descs})
		if err != nil {
			b.Fatal(err)
		}
		return resp
	}
	release := func(ids string) *rlcommonv3.RateLimitDescriptor {
		return &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "slot", Value: "s"}, {Key: ReleaseKey, Value: ids}}}
	}
	var forged []string
	for i := range min(MaxReleaseIDs, MaxReleaseBytes/151) { // as many as one entry holds
		forged = append(forged, fmt.Sprintf("%0150d", i))
	}
	valid := ask(one("slot", "s")...).GetDynamicMetadata().GetFields()[LeaseMetadataKey].GetStringValue()
	var refused []*rlcommonv3.RateLimitDescriptor
	for i := range 99 {
		refused = append(refused, one("slot", fmt.Sprint(i))...)
	}
	refused = append(refused, one("blocked", "x")...)
	attacks := []struct {
		name string
		send func()
	}{
		{"quiet", nil},
		{"forged_ids", func() { ask(release(strings.Join(forged, ","))) }},
		{"one_id_repeated", func() {
			ask(release(strings.TrimSuffix(strings.Repeat(valid+",", min(MaxReleaseIDs, MaxReleaseBytes/(len(valid)+1))), ",")))
		}},
		{"refused_99_slots", func() { ask(refused...) }},
	}
	const calls = 2000
	p50 := func(attack func()) time.Duration {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		if attack != nil {
			for range 2 {
				wg.Go(func() {
					for {
						select {
						case <-stop:
							return
						default:
							attack()
						}
					}
				})
			}
		}
		took := make([]time.Duration, calls)
		victim := one("user", "victim")
		for i := range took {
			start := time.Now()
			ask(victim...)
			took[i] = time.Since(start)
		}
		close(stop)
		wg.Wait()
		slices.Sort(took)
		return took[calls/2]
	}
	sums := make([]time.Duration, len(attacks))
	for range b.N {
		for i, a := range attacks {
			sums[i] += p50(a.send)
		}
	}
	for i, a := range attacks {
		avg := sums[i] / time.Duration(b.N)
		b.ReportMetric(float64(avg.Nanoseconds()), "p50-ns-"+a.name)
		if i > 0 {
			b.ReportMetric(float64(sums[i])/float64(sums[0]), "x-quiet-"+a.name)
		}
	}
}
