package connectapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/connectapi"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// BenchmarkDecisionWithPatterns: one Limit decision through the handler
// (override lookup and limiter, no wire), for an identifier no override
// matches, in a namespace without patterns and with 1,000 (half filed by
// a literal prefix, half by a literal suffix). The patterns that cannot
// match are never tried: the second costs a few map reads more.
func BenchmarkDecisionWithPatterns(b *testing.B) {
	for _, n := range []int{0, 1000} {
		b.Run(fmt.Sprint(n, " patterns"), func(b *testing.B) {
			h, _, ov := newHandler(b)
			ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
			for i := range n {
				id := fmt.Sprint("user_", i, "_*")
				if i%2 == 1 {
					id = fmt.Sprint("*_", i, ".example")
				}
				if _, err := ov.Set(ctx, overrides.Override{Workspace: access.OpenWorkspace, Namespace: "ns", Identifier: id,
					Limit: 5, Duration: time.Minute}); err != nil {
					b.Fatal(err)
				}
			}
			req := connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "customer_4242_eu-west", Limit: 1 << 40, Duration: 60_000})
			for b.Loop() {
				if _, err := h.Limit(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// newHandler returns the service on an in-memory limiter and overrides,
// wired as package daemon wires a process without stores, for the tests
// that call its methods directly.
func newHandler(t testing.TB) (*connectapi.Handler, *ratelimit.Service, *overrides.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	limiter, err := ratelimit.New("test", ratelimit.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New(overrides.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.New(limiter, ov, reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := transport.NewLayer(access.Tokens{}, transport.NewBudget(transport.DefaultBudget, transport.DefaultShare), slog.New(slog.DiscardHandler), reg)
	if err != nil {
		t.Fatal(err)
	}
	return connectapi.New(l, p), limiter, ov
}

// BenchmarkLeaseThroughHandler: one Acquire and its Release through the
// handler (no wire): the limiter's pair plus signing the lease, verifying
// it and recording it in the process's ledger; beside it one Limit.
func BenchmarkLeaseThroughHandler(b *testing.B) {
	h, _, _ := newHandler(b)
	ctx := call.WithPrincipal(context.Background(), access.OpenPrincipal())
	b.Run("Limit", func(b *testing.B) {
		req := connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "user_1", Limit: 1 << 40, Duration: 60_000})
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.Limit(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Acquire+Release", func(b *testing.B) {
		acquire := connect.NewRequest(&ratelimitv1.AcquireRequest{Namespace: "ns", Identifier: "user_1", Limit: 1 << 40, Lease: 60})
		b.ReportAllocs()
		for b.Loop() {
			res, err := h.Acquire(ctx, acquire)
			if err != nil || !res.Msg.Success {
				b.Fatal(res, err)
			}
			if _, err := h.Release(ctx, connect.NewRequest(&ratelimitv1.ReleaseRequest{LeaseId: res.Msg.LeaseId})); err != nil {
				b.Fatal(err)
			}
		}
	})
}
