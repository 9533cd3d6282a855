package envoyrls

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// newBounded returns the adapter on a limiter of at most maxWindows windows
// a workspace, with the rules of yaml, and its metrics' registry.
func newBounded(t *testing.T, yaml string, maxWindows int64) (*Service, *prometheus.Registry, *ratelimit.Service) {
	t.Helper()
	reg := prometheus.NewRegistry()
	limiter, err := ratelimit.New("test", ratelimit.WithMaxWindowsPerWorkspace(maxWindows))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newServiceOn(t, limiter, yaml, reg)
	return s, reg, limiter
}

func descriptor(kv ...string) *rlcommonv3.RateLimitDescriptor {
	d := &rlcommonv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestMetricSeriesAreBounded: requests with fresh 900-byte values on a
// detailed_metric rule, and descriptor-level limits with fresh 900-byte keys,
// grow /metrics by a bounded number of series of bounded labels (before:
// one series per request, labels as long as the request's keys).
func TestMetricSeriesAreBounded(t *testing.T) {
	s, reg, _ := newBounded(t, `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
`, 1<<20)
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	big := strings.Repeat("x", 900)
	for i := range 300 {
		v := big + strings.Repeat("y", i%50) + string(rune('a'+i%26)) + strings.Repeat("z", i/26)
		limited := descriptor("key_"+v, "v")
		limited.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: 2}
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			descriptor("user", v), limited}}); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, mf := range mfs {
		// This service's names, and envoyproxy/ratelimit's beside them.
		if mf.GetName() != "unkey_rls_hits_total" && mf.GetName() != "ratelimit_service_rate_limit_total_hits" {
			continue
		}
		checked++
		if n := len(mf.GetMetric()); n > maxSeriesPerRule+2 {
			t.Fatalf("%d series of %s after 300 requests, want at most %d", n, mf.GetName(), maxSeriesPerRule+2)
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if len(l.GetValue()) > maxLabelBytes+len("…") {
					t.Fatalf("%s: a label of %d bytes", mf.GetName(), len(l.GetValue()))
				}
			}
		}
	}
	if checked != 2 {
		t.Fatalf("%d of the two hit counters found", checked)
	}
}

// TestWindowCapFailsClosed: with the workspace at its window cap, a
// descriptor that needs a new window is OVER_LIMIT on its own, and the
// others keep their verdicts (before: the whole call failed, which Envoy
// with failure_mode_deny off admits).
func TestWindowCapFailsClosed(t *testing.T) {
	s, _, _ := newBounded(t, "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: hour, requests_per_unit: 100}\n", 2)
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
		descriptor("ip", "1"), descriptor("ip", "2"), descriptor("ip", "3")}})
	if err != nil {
		t.Fatalf("a request past the window cap failed: %v", err)
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK ||
		resp.Statuses[1].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[2].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("statuses %v, want OK, OK, OVER_LIMIT", resp.Statuses)
	}
}

// TestRequestBounds: entries over 1 KB, a counter name over MaxIdentifier
// characters, a request's own limit of a year or of 0 are refused, and a
// refused request counts none of its descriptors.
func TestRequestBounds(t *testing.T) {
	s, _, limiter := newBounded(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100}\n"+
		"  - key: wide\n    rate_limit: {unit: hour, requests_per_unit: 100}\n", 1<<20)
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	wide := descriptor()
	for i := range MaxEntries {
		wide.Entries = append(wide.Entries, &rlcommonv3.RateLimitDescriptor_Entry{Key: "wide", Value: strings.Repeat(string(rune('a'+i%26)), 200)})
	}
	wide.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: 3} // HOUR
	year := descriptor("k", "y")
	year.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 10, Unit: 6} // YEAR
	zero := descriptor("k", "z")
	zero.Limit = &rlcommonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 0, Unit: 3} // HOUR
	for _, tc := range []struct {
		name string
		d    *rlcommonv3.RateLimitDescriptor
		want string
	}{
		{"a value over 1 KB", descriptor("k", strings.Repeat("v", MaxEntryBytes+1)), "must be at most 1024 bytes each"},
		{"a counter name over 4096 characters", wide, "at most 4096 characters"},
		{"a request's own year", year, "limit.unit: must be SECOND, MINUTE, HOUR, DAY, WEEK or MONTH"},
		{"a request's own limit of 0", zero, "limit.requests_per_unit: must be at least 1"},
	} {
		_, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			descriptor("k", "first"), tc.d}})
		var ve *invalid.Error
		if !errors.As(err, &ve) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a validation error containing %q", tc.name, err, tc.want)
		}
	}
	if n := limiter.ActiveWindows(); n != 0 {
		t.Fatalf("the refused requests created %d windows, want none counted", n)
	}
}

// TestMetricSeriesAreSharedFairly: a rule's labels of request values are
// bounded per workspace. Before, the 100 values of a detailed_metric rule
// were one pool: workspace A's fresh values took it, and B's then went to
// the overflow label. Now A's 150 values take A's 100, and B's 5 values
// have their own labels.
func TestMetricSeriesAreSharedFairly(t *testing.T) {
	s, reg, _ := newBounded(t, `
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
`, 1<<20)
	send := func(workspace, value string) {
		ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: workspace, Permissions: access.All(), KeyID: "k"})
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d",
			Descriptors: []*rlcommonv3.RateLimitDescriptor{descriptor("user", value)}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 150 {
		send("ws_a", fmt.Sprint("a_", i))
	}
	for i := range 5 {
		send("ws_b", fmt.Sprint("b_", i))
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	labelled, key1 := map[string]bool{}, map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				switch {
				case mf.GetName() == "unkey_rls_hits_total" && l.GetName() == "rule":
					labelled[l.GetValue()] = true
				case mf.GetName() == "ratelimit_service_rate_limit_total_hits" && l.GetName() == "key1":
					key1[l.GetValue()] = true
				}
			}
		}
	}
	// envoyproxy/ratelimit's names, bounded alike: past the bound, the
	// rule's own level.
	if len(key1) != len(labelled) || !key1["user_b_4"] || !key1["user"] || key1["user_a_149"] {
		t.Errorf("key1 of ratelimit_service_rate_limit_total_hits: %d values (user_b_4 %v, user %v, user_a_149 %v), want %d as the rule label",
			len(key1), key1["user_b_4"], key1["user"], key1["user_a_149"], len(labelled))
	}
	for i := range 5 {
		if want := fmt.Sprint("d.user_b_", i); !labelled[want] {
			t.Errorf("B's value b_%d has no label of its own (labels: %d)", i, len(labelled))
		}
	}
	if !labelled["d.user_overflow"] || labelled["d.user_a_149"] {
		t.Errorf("A's values past its 100: want them in d.user_overflow")
	}
}

// seriesOf counts the series of the metric name in reg.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// TestSeriesBoundCountsEveryLabel: with a first value longer than a label
// (every request's rule label cut to the same 256 bytes) and a second value
// new each time, the series are bounded by what all three labels make
// together (before: the cut rule label was seen once, and key2 made a
// series per request, 3,001 of 3,000 requests).
func TestSeriesBoundCountsEveryLabel(t *testing.T) {
	s, reg, _ := newBounded(t, `
domain: d
descriptors:
  - key: tenant
    descriptors:
      - key: user
        detailed_metric: true
        rate_limit: {unit: hour, requests_per_unit: 100}
`, 1<<20)
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	long := strings.Repeat("t", 400)
	for i := range 300 {
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			descriptor("tenant", long, "user", fmt.Sprint("u", i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if n := seriesOf(t, reg, "ratelimit_service_rate_limit_total_hits"); n > maxSeriesPerRule+1 {
		t.Fatalf("%d series of ratelimit_service_rate_limit_total_hits after 300 requests, want at most %d", n, maxSeriesPerRule+1)
	}
}

// TestRemovedRulesTakeTheirSeries: once a reload drops a rule, its series
// (its own and those of the request's values, under both names) leave
// /metrics; a rule that stays keeps its own, and counts on.
func TestRemovedRulesTakeTheirSeries(t *testing.T) {
	load := func(yaml string) *rlsconfig.Config {
		c, err := rlsconfig.Load(rlsconfig.File{Name: "r.yaml", Data: []byte(yaml)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	both := load("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 9}\n" +
		"  - key: b\n    detailed_metric: true\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
	onlyA := load("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 9}\n")
	var current atomic.Pointer[rlsconfig.Config]
	current.Store(both)
	limiter, err := ratelimit.New("test")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	s, _ := newServiceWith(t, limiter, both, reg)
	s.config = current.Load
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	ask := func(key, value string) {
		t.Helper()
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			descriptor(key, value)}}); err != nil {
			t.Fatal(err)
		}
	}
	ask("a", "1")
	for i := range 5 {
		ask("b", fmt.Sprint(i))
	}
	if ours, theirs := seriesOf(t, reg, "unkey_rls_hits_total"), seriesOf(t, reg, "ratelimit_service_rate_limit_total_hits"); ours != 6 || theirs != 6 {
		t.Fatalf("before the reload: %d and %d series, want 6 of each (a's, and b's five values)", ours, theirs)
	}
	current.Store(onlyA)
	ask("a", "2")
	if ours, theirs := seriesOf(t, reg, "unkey_rls_hits_total"), seriesOf(t, reg, "ratelimit_service_rate_limit_total_hits"); ours != 1 || theirs != 1 {
		t.Fatalf("after the reload: %d and %d series, want a's alone", ours, theirs)
	}
	if v := testutil.ToFloat64(s.metrics.ours[statHits].WithLabelValues("d", "d.a")); v != 2 {
		t.Fatalf("a's hits: %v, want 2 (the series kept)", v)
	}
	// A request that read the configuration before the reload, decided
	// after it: b's series stay gone.
	s.config = func() *rlsconfig.Config { return both }
	ask("b", "9")
	ask("b", "1")
	if ours, theirs := seriesOf(t, reg, "unkey_rls_hits_total"), seriesOf(t, reg, "ratelimit_service_rate_limit_total_hits"); ours != 1 || theirs != 1 {
		t.Fatalf("after a request on the older configuration: %d and %d series, want a's alone", ours, theirs)
	}
}

// TestUnlimitedRulesAreBoundedToo: an unlimited rule with detailed_metric
// labels its hits within the same bounds (before: a series a value, each
// label as long as the request's, 3,000 of 3,000 requests).
func TestUnlimitedRulesAreBoundedToo(t *testing.T) {
	s, reg, _ := newBounded(t, "domain: d\ndescriptors:\n  - key: user\n    detailed_metric: true\n    rate_limit: {unlimited: true}\n", 1<<20)
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	for i := range 300 {
		if _, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*rlcommonv3.RateLimitDescriptor{
			descriptor("user", strings.Repeat("v", 900)+fmt.Sprint(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"unkey_rls_hits_total", "ratelimit_service_rate_limit_total_hits"} {
		if n := seriesOf(t, reg, name); n > maxSeriesPerRule+1 {
			t.Errorf("%d series of %s, want at most %d", n, name, maxSeriesPerRule+1)
		}
	}
}
