package envoyrls

import (
	"context"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// TestRuleModels: a rule names its model. "10 a second, bursts of 20" as
// a token bucket admits its burst and then 10 a second; the same rule as
// a sliding window admits 10 and then, a second later, what the sliding
// window leaves; with UNKEY_RLS_FIXED_WINDOWS every rule is a counter per
// window of its length, envoyproxy/ratelimit's counts; a calendar day in
// Berlin resets at the next Berlin midnight, named DAY.
func TestRuleModels(t *testing.T) {
	const rules = `domain: d
descriptors:
  - key: bucket
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: token_bucket, burst: 20}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: day
    rate_limit: {requests_per_unit: 3, calendar: {unit: day, time_zone: Europe/Berlin}}
`
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, opts ...Option) (admit func(key string, n int) int, clock *manualClock, s *Service) {
		clock = &manualClock{now: time.Date(2026, 3, 28, 22, 30, 0, 0, berlin)} // the night the clocks go forward
		limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		s, _ = newServiceOn(t, limiter, rules, prometheus.NewRegistry(), append(opts, WithClock(clock.Now), WithOverLimitHitsCounted(false))...)
		ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
		admit = func(key string, n int) (ok int) {
			for range n {
				resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one(key, "v")})
				if err != nil {
					t.Fatal(err)
				}
				if resp.OverallCode == rlsv3.RateLimitResponse_OK {
					ok++
				}
			}
			return ok
		}
		return admit, clock, s
	}
	t.Run("rules' models", func(t *testing.T) {
		admit, clock, _ := run(t)
		if b, s := admit("bucket", 30), admit("sliding", 30); b != 20 || s != 10 {
			t.Fatalf("at once: bucket %d (want its burst, 20), sliding %d (want 10)", b, s)
		}
		clock.advance(time.Second)
		if b := admit("bucket", 30); b != 10 {
			t.Fatalf("a second later the bucket admitted %d, want the 10 it refilled", b)
		}
		if d := admit("day", 5); d != 3 {
			t.Fatalf("the day admitted %d of 3", d)
		}
		// 01:30 in Berlin is still the same day; 00:00 of the 29th was
		// the reset (a 23-hour day follows).
		clock.now = time.Date(2026, 3, 28, 23, 59, 0, 0, berlin)
		if d := admit("day", 1); d != 0 {
			t.Fatalf("before midnight the day admitted %d", d)
		}
		clock.now = time.Date(2026, 3, 29, 0, 0, 0, 0, berlin)
		if d := admit("day", 5); d != 3 {
			t.Fatalf("after midnight in Berlin the day admitted %d, want 3 again", d)
		}
	})
	t.Run("UNKEY_RLS_FIXED_WINDOWS", func(t *testing.T) {
		admit, clock, _ := run(t, WithFixedWindows(true))
		clock.now = time.Date(2026, 3, 28, 22, 30, 0, 900_000_000, berlin) // 100 ms before a second's end
		if b, s := admit("bucket", 30), admit("sliding", 30); b != 10 || s != 10 {
			t.Fatalf("fixed windows: bucket rule %d, sliding rule %d; want 10 and 10", b, s)
		}
		clock.advance(100 * time.Millisecond)
		// A new fixed window counts from zero: envoyproxy/ratelimit
		// admits 10 again, where a sliding window would still weigh
		// nearly all of the last second.
		if b, s := admit("bucket", 30), admit("sliding", 30); b != 10 || s != 10 {
			t.Fatalf("the next fixed window: bucket rule %d, sliding rule %d; want 10 and 10", b, s)
		}
	})
}

// TestRuleModelErrors: the YAML's model fields are refused naming the
// field and the rule.
func TestRuleModelErrors(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{"{unit: second, requests_per_unit: 1, algorithm: leaky}", `rate_limit.algorithm: "leaky" is not one of sliding_window, fixed_window, token_bucket`},
		{"{unit: second, requests_per_unit: 1, burst: 5}", "rate_limit.burst: must be given only with algorithm token_bucket"},
		{"{unit: day, requests_per_unit: 1, calendar: {unit: day}}", "rate_limit.calendar: must be given without unit and unit_multiplier"},
		{"{requests_per_unit: 1, calendar: {unit: fortnight}}", `rate_limit.calendar.unit: "fortnight" is not one of day, week, month, year`},
		{"{requests_per_unit: 1, calendar: {unit: day, time_zone: Mars/Olympus}}", "rate_limit.calendar.time_zone: must be a time zone of the IANA database"},
		{"{requests_per_unit: 1, algorithm: token_bucket, calendar: {unit: day}}", "rate_limit.calendar: must not be given with algorithm token_bucket"},
		{"{unlimited: true, algorithm: fixed_window}", "rate_limit: algorithm, burst and calendar must not be given when unlimited is true"},
	} {
		_, err := loadRules("domain: d\ndescriptors:\n  - key: k\n    rate_limit: " + tc.rule + "\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.rule, err, tc.want)
		}
	}
	// Two limits of one descriptor need two windows: two calendars of one
	// unit and zone are one.
	_, err := loadRules(`domain: d
descriptors:
  - key: k
    rate_limits:
      - {requests_per_unit: 1, calendar: {unit: month, time_zone: Europe/Berlin}}
      - {requests_per_unit: 2, calendar: {unit: month, time_zone: Europe/Berlin}}
`)
	if err == nil || !strings.Contains(err.Error(), "two limits span a month in Europe/Berlin") {
		t.Errorf("two Berlin months: %v", err)
	}
}

// loadRules compiles one rules file.
func loadRules(yaml string) (*rlsconfig.Config, error) {
	return rlsconfig.Load(rlsconfig.File{Name: "test.yaml", Data: []byte(yaml)})
}

// TestRuleBurstZeroIsTheLimit: a token bucket's burst of 0 in a rule file
// is its requests_per_unit, as the API's burst of 0 is its limit: the
// field takes the same values wherever a limit is written.
func TestRuleBurstZeroIsTheLimit(t *testing.T) {
	c, err := loadRules("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 7, algorithm: token_bucket, burst: 0}\n")
	if err != nil {
		t.Fatalf("burst 0: %v", err)
	}
	m, ok := c.Match("d", []rlsconfig.Entry{{Key: "k", Value: "v"}})
	if !ok || len(m.Rule.Limits) != 1 || m.Rule.Limits[0].Burst != 0 {
		t.Fatalf("burst 0: %+v %v, want one limit whose burst is its requests_per_unit (0)", m.Rule, ok)
	}
	req := ratelimit.Request{Limit: 7, Burst: m.Rule.Limits[0].Burst, Algorithm: ratelimit.TokenBucket}
	if q, _ := req.Policy(time.Now()); q != 7 {
		t.Errorf("a burst of 0 holds %d tokens, want 7, its limit", q)
	}
}

// TestCalendarUnits: with calendar units (UNKEY_RLS_CALENDAR_UNITS, the
// zone UNKEY_RLS_TIME_ZONE), an Envoy Gateway policy's unit of MONTH,
// which says no more over xDS, is the calendar month in the zone: a
// budget spent on the 31st of January admits again at midnight of the
// 1st of February in that zone, not 30 days later; named MONTH. A token
// bucket's DAY stays a rate; a multiplier with a calendar unit is
// refused naming the setting.
func TestCalendarUnits(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	zone := "Europe/Berlin"
	calendarUnits := rlsconfig.Compiler{Bounds: rlsconfig.DefaultBounds, CalendarZone: &zone}
	month := uint32(3)
	cfg, err := calendarUnits.LoadXDS(&rlsconfv3.RateLimitConfig{Name: "eg", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "budget", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MONTH, RequestsPerUnit: month}},
		{Key: "daily", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_DAY, RequestsPerUnit: 24}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if m := cfg.Models(); m["calendar"] != 2 {
		t.Fatalf("models %v: want both limits calendar periods (a MONTH and a DAY)", m)
	}
	clock := &manualClock{now: time.Date(2027, 1, 31, 23, 0, 0, 0, berlin)}
	limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newServiceWith(t, limiter, cfg, prometheus.NewRegistry(), WithClock(clock.Now), WithOverLimitHitsCounted(false))
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	admit := func(n int) (ok int, last *rlsv3.RateLimitResponse) {
		for range n {
			resp, err := s.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: one("budget", "v")})
			if err != nil {
				t.Fatal(err)
			}
			if resp.OverallCode == rlsv3.RateLimitResponse_OK {
				ok++
			}
			last = resp
		}
		return ok, last
	}
	ok, last := admit(5)
	st := last.Statuses[0]
	if ok != 3 || st.CurrentLimit.Unit != rlsv3.RateLimitResponse_RateLimit_MONTH || st.DurationUntilReset.AsDuration() != time.Hour {
		t.Fatalf("on the 31st at 23:00 in Berlin: %d admitted of 3, %v; want 3, MONTH, reset in an hour (midnight of the 1st)", ok, st)
	}
	clock.now = time.Date(2027, 2, 1, 0, 0, 0, 0, berlin)
	if ok, _ := admit(5); ok != 3 {
		t.Fatalf("at midnight of the 1st in Berlin %d admitted, want the month's 3 again", ok)
	}

	// A token bucket keeps its rate; a multiplier is refused.
	c, err := calendarUnits.Load(rlsconfig.File{Name: "t.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: day, requests_per_unit: 24, algorithm: token_bucket}\n")})
	if err != nil || c.Models()["token_bucket"] != 1 {
		t.Fatalf("a token bucket's day: %v, %v; want a token bucket", c, err)
	}
	_, err = calendarUnits.Load(rlsconfig.File{Name: "t.yaml", Data: []byte("domain: d\ndescriptors:\n  - key: m\n    rate_limit: {unit: month, unit_multiplier: 3, requests_per_unit: 1}\n")})
	if err == nil || !strings.Contains(err.Error(), "rate_limit.unit_multiplier") || !strings.Contains(err.Error(), "UNKEY_RLS_CALENDAR_UNITS") {
		t.Fatalf("a quarter as 3 months with calendar units: %v; want refused naming unit_multiplier and the setting", err)
	}
	// Without calendar units, a MONTH is 30 days, as envoyproxy/ratelimit
	// counts it.
	plain, err := rlsconfig.LoadXDS(&rlsconfv3.RateLimitConfig{Name: "eg", Domain: "d", Descriptors: []*rlsconfv3.RateLimitDescriptor{
		{Key: "budget", RateLimit: &rlsconfv3.RateLimitPolicy{Unit: rlsconfv3.RateLimitUnit_MONTH, RequestsPerUnit: month}}}})
	if err != nil || plain.Models()["sliding_window"] != 1 {
		t.Fatalf("without calendar units: %v, %v; want a sliding window", plain.Models(), err)
	}
}
