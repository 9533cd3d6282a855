package daemon_test

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/golden"
	"github.com/unkeyed/ratelimit/internal/testkit/rlqsenvoy"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// fleetLimit is the bucket's limit in the fleet measurement: 1,000 a
// minute, a fixed window, so that what each window admitted is exact.
const fleetLimit = 1000

// fleetRules writes the measurement's rule file: domain "fleet", a user's
// bucket 1,000 a minute.
func fleetRules(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/fleet.yaml", []byte("domain: fleet\ndescriptors:\n  - key: user\n"+
		"    rate_limit: {unit: minute, requests_per_unit: 1000, algorithm: fixed_window}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fleetWindows counts, by window (Unix minutes), what a fleet admitted and
// what it was asked.
type fleetWindows struct {
	mu                      sync.Mutex
	admitted, asked, static map[int64]int64
}

func (w *fleetWindows) add(window int64, ok, static bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case static && ok:
		w.static[window]++
	case !static:
		w.asked[window]++
		if ok {
			w.admitted[window]++
		}
	}
}

// runRealFleet runs ten emulated Envoys (Envoy's filter, package
// rlqsenvoy) against the quota service of real processes, Envoy i on
// addrs[i%len(addrs)] over its own gRPC stream, each asking its share of
// rlqsenvoy.SkewedDemand of bucket user=id in real time, until the end of
// the windows-th whole minute after now; beside each, an Envoy holding the whole rate as a
// static quota asks the same. It returns each whole window's counts.
func runRealFleet(t *testing.T, addrs []string, id string, windows int) *fleetWindows {
	t.Helper()
	start := time.Now()
	first := start.Truncate(time.Minute).Add(time.Minute)
	end := first.Add(time.Duration(windows) * time.Minute)
	counts := &fleetWindows{admitted: map[int64]int64{}, asked: map[int64]int64{}, static: map[int64]int64{}}
	bucket := map[string]string{"user": id}
	full := &rlqsv3.RateLimitQuotaResponse{BucketAction: []*rlqsv3.RateLimitQuotaResponse_BucketAction{{
		BucketId: &rlqsv3.BucketId{Bucket: bucket},
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
			QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
				AssignmentTimeToLive: durationpb.New(time.Hour),
				RateLimitStrategy: &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
					MaxTokens: fleetLimit, TokensPerFill: wrapperspb.UInt32(fleetLimit), FillInterval: durationpb.New(time.Minute)}}}}}}}}
	var wg sync.WaitGroup
	for i := range 10 {
		envoy, static := rlqsenvoy.New("fleet"), rlqsenvoy.New("fleet")
		static.Request(bucket, start)
		static.Apply(full, start)
		var mu sync.Mutex // the filter's, between its requests and its answers
		// Envoy opens its stream with its first report, at its first
		// request: an Envoy silent at first has none until then.
		var stream rlqsv3.RateLimitQuotaService_StreamRateLimitQuotasClient
		open := func() {
			stream = quotaStream(t, addrs[i%len(addrs)], tokA)
			go func() {
				for {
					resp, err := stream.Recv()
					if err != nil {
						return
					}
					mu.Lock()
					envoy.Apply(resp, time.Now())
					mu.Unlock()
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var owed float64
			var next time.Time
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			last := start
			for now := range tick.C {
				if !now.Before(end) {
					return
				}
				owed += rlqsenvoy.SkewedDemand(i, now.Sub(first.Add(-time.Hour))) * now.Sub(last).Seconds()
				last = now
				window := now.Unix() / 60
				var reports []*rlqsv3.RateLimitQuotaUsageReports
				mu.Lock()
				for ; owed >= 1; owed-- {
					ok, rep := envoy.Request(bucket, now)
					if rep != nil {
						reports = append(reports, rep)
						next = now.Add(rlqsenvoy.ReportInterval)
					}
					sok, _ := static.Request(bucket, now)
					if !now.Before(first) {
						counts.add(window, ok, false)
						counts.add(window, sok, true)
					}
				}
				if !next.IsZero() && !now.Before(next) {
					reports = append(reports, envoy.Report(now))
					next = now.Add(rlqsenvoy.ReportInterval)
				}
				mu.Unlock()
				for _, rep := range reports {
					if stream == nil {
						open()
					}
					if err := stream.Send(rep); err != nil {
						t.Errorf("envoy %d: %v", i, err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	return counts
}

// fleetBound is what a fleet may admit past the limit in a window, and
// why: once the window is spent, each Envoy holding a token bucket keeps
// admitting at its assigned rate until its next report (5 s) plus lag, the
// time the spending takes to reach its process: at most the limit spread
// over the window, with the idle Envoys' floors (a tenth more), for that
// long, plus each bucket's one fill. Within a region lag is a replay to
// Redis and a refresh from it (2 s, generously); across regions a cell
// that grows by less than a step reaches the other region with the full
// flush (UNKEY_GLOBAL_FULL_FLUSH_INTERVAL, 10 s) and its sync (1 s):
// docs/regions.md.
func fleetBound(lag time.Duration) int64 {
	perSecond := float64(fleetLimit) / 60 * 1.1
	return int64(perSecond*(rlqsenvoy.ReportInterval+lag).Seconds() + 10*perSecond/10 + 1)
}

// TestRLQSFleetAcrossProcessesAndRegions: ten emulated Envoys with skewed
// demand (one at ten times the others, one silent and then bursting), on
// one bucket of 1,000 a minute, over the quota service of two processes of
// a region (one Redis) and of two regions (two Redis, one MariaDB): every
// whole minute admits at most the limit and fleetBound (147 in a region,
// 331 across regions), and at least 80 % of the limit, while the same Envoys each given the whole rate (static
// quotas, what a server without shared counts does) admit up to ten times
// it. It runs in real time, a whole minute or more (UNKEY_RLQS_FLEET_WINDOWS
// sets how many; ACCURACY_REPORT writes docs/ACCURACY.md's table).
func TestRLQSFleetAcrossProcessesAndRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs in real time, a minute or more")
	}
	t.Parallel()
	windows := 1
	if n, err := strconv.Atoi(os.Getenv("UNKEY_RLQS_FLEET_WINDOWS")); err == nil && n > 0 {
		windows = n
	}
	m, _ := dbtest.Start(t)
	ra, rb := testserver.StartRedis(t), testserver.StartRedis(t)
	rules := fleetRules(t)
	start := func(region string, r *testserver.Redis) string {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN,
			"UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_GRPC_ADDR=127.0.0.1:0", "UNKEY_RLS_CONFIG="+rules).grpcAddr
	}
	a1, a2, b1 := start("a", ra), start("a", ra), start("b", rb)
	runs := []struct {
		name  string
		addrs []string
		id    string
		lag   time.Duration
		got   *fleetWindows
	}{
		{"two processes of a region (one Redis)", []string{a1, a2}, "region", 2 * time.Second, nil},
		{"two regions (a Redis each, one MariaDB)", []string{a1, b1}, "regions", 12 * time.Second, nil},
	}
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() { runs[i].got = runRealFleet(t, runs[i].addrs, runs[i].id, windows) })
	}
	wg.Wait()
	var table strings.Builder
	fmt.Fprintf(&table, "| fleet | minute | asked | admitted, shared budget | of the limit | bound | static quotas admitted |\n|---|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range runs {
		bound := fleetBound(r.lag)
		for _, w := range slices.Sorted(maps.Keys(r.got.asked)) {
			asked, admitted, static := r.got.asked[w], r.got.admitted[w], r.got.static[w]
			t.Logf("%s, minute %d: asked %d, admitted %d (static quotas %d)", r.name, w, asked, admitted, static)
			fmt.Fprintf(&table, "| %s | %s | %d | %d | %.1f %% | %d | %d |\n", r.name, time.Unix(w*60, 0).UTC().Format("15:04"),
				asked, admitted, 100*float64(admitted)/fleetLimit, fleetLimit+bound, static)
			if admitted > fleetLimit+bound || admitted < fleetLimit*8/10 {
				t.Errorf("%s, minute %d: admitted %d of a limit of %d (asked %d), want %d to %d", r.name, w, admitted, fleetLimit,
					asked, fleetLimit*8/10, fleetLimit+bound)
			}
		}
	}
	if out := os.Getenv("ACCURACY_REPORT"); out != "" {
		if err := golden.Measured(out, "quota-assignments", table.String()); err != nil {
			t.Fatal(err)
		}
	}
}
