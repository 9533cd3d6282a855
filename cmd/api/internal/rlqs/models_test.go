package rlqs

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/testkit/rlqsenvoy"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// clockFunc is a ratelimit.Clock of a function.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// onRules returns a backend of the real rate limit service (its rules
// from yaml, the limiter, the pipeline and its tallies) on the test's
// clock, the Envoys calling with a key of workspace ws.
func onRules(t *testing.T, yaml string) backend {
	return func(clock func() time.Time) (Decider, Fleet, context.Context) {
		t.Helper()
		limiter, err := ratelimit.New("test", ratelimit.WithClock(clockFunc(clock)))
		if err != nil {
			t.Fatal(err)
		}
		ov, err := overrides.New()
		if err != nil {
			t.Fatal(err)
		}
		p, err := pipeline.New(limiter, ov, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := rlsconfig.Load(rlsconfig.File{Name: "rules.yaml", Data: []byte(yaml)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := transport.NewLayer(access.Tokens{}, transport.NewBudget(transport.DefaultBudget, transport.DefaultShare),
			slog.New(slog.DiscardHandler), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		rls, err := envoyrls.New(l, p, func() *rlsconfig.Config { return cfg }, prometheus.NewRegistry(), envoyrls.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
		return rls, p, ctx
	}
}

// TestEveryModelSharesOneBudget: the simulated fleet of
// TestFleetSharesOneBudget on the rate limit service itself, its bucket's
// rule each model in turn, 1,000 a minute, two processes: a sliding or
// fixed window admits each minute at most the limit and a tenth, and at
// least 80 % of it; a token bucket (a burst of 1,000 that refills 1,000 a
// minute) at most its burst and its refill in the first minute and its
// refill and a tenth in each after, at least 80 % of it; a calendar day
// of 1,000 at most 1,100 in all, its day never over.
func TestEveryModelSharesOneBudget(t *testing.T) {
	demand := rlqsenvoy.SkewedDemand
	for _, m := range []struct {
		name, limit string
		most        func(minute int) int64 // what a minute may admit
		least       int64
	}{
		{"sliding window", "{unit: minute, requests_per_unit: 1000}", func(int) int64 { return 1100 }, 800},
		{"fixed window", "{unit: minute, requests_per_unit: 1000, algorithm: fixed_window}", func(int) int64 { return 1100 }, 800},
		{"token bucket", "{unit: minute, requests_per_unit: 1000, algorithm: token_bucket}", func(m int) int64 {
			if m == 0 {
				return 2100
			}
			return 1100
		}, 800},
		{"calendar day", "{requests_per_unit: 1000, calendar: {unit: day}}", func(int) int64 { return 1100 }, 0},
	} {
		yaml := "domain: d\ndescriptors:\n  - key: user\n    rate_limit: " + m.limit + "\n"
		run := runFleetOn(t, 10, 5, demand, 2, onRules(t, yaml))
		var total int64
		for w, a := range run.admitted {
			total += a
			t.Logf("%s, minute %d: asked %d, admitted %d", m.name, w, run.asked[w], a)
			if a > m.most(w) || a < m.least {
				t.Errorf("%s, minute %d: admitted %d (asked %d), want %d to %d", m.name, w, a, run.asked[w], m.least, m.most(w))
			}
		}
		if m.least == 0 && total > 1100 {
			t.Errorf("%s: admitted %d in all, want at most 1,100", m.name, total)
		}
	}
}
