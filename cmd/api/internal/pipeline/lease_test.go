package pipeline

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
	ledgermem "github.com/unkeyed/ratelimit/services/reservation/memstore"
)

// TestReleaseStandsWhenTheCountFails: a lease acquired in one process and
// released in another whose workspace holds the most windows it may (none
// of them the lease's limit) is freed there, and the release says so,
// with the slots held left uncounted (-1), rather than an error a caller
// would retry into "not released".
func TestReleaseStandsWhenTheCountFails(t *testing.T) {
	keyring := reservation.NewKeyring(nil, slog.New(slog.DiscardHandler))
	ledger := ledgermem.New(ledgermem.DefaultRecords, time.Now)
	process := func(opts ...ratelimit.Option) *Pipeline {
		limiter, err := ratelimit.New("test", opts...)
		if err != nil {
			t.Fatal(err)
		}
		ov, err := overrides.New()
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(limiter, ov, prometheus.NewRegistry(), WithReservations(keyring, ledger, ""))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := process(), process(ratelimit.WithMaxWindowsPerWorkspace(1))
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})

	// b's one window is another limit's.
	if d, err := b.Limit(ctx, Call{Request: req("other", 10)}); err != nil || !d.Success {
		t.Fatalf("fill b's windows: %+v, %v", d, err)
	}
	acquire := func(p *Pipeline) Lease {
		t.Helper()
		l, err := p.Acquire(ctx, ratelimit.Acquisition{Namespace: "n", Identifier: "slots", Limit: 2, Lease: time.Minute, Cost: 1})
		if err != nil || !l.Success {
			t.Fatalf("acquire: %+v, %v", l, err)
		}
		return l
	}
	if _, err := b.Acquire(ctx, ratelimit.Acquisition{Namespace: "n", Identifier: "slots", Limit: 2, Lease: time.Minute, Cost: 1}); err == nil {
		t.Fatal("b made a second window for its workspace")
	}

	l := acquire(a)
	r, err := b.Release(ctx, l.ID)
	if err != nil || r.Freed != 1 || r.InFlight != -1 || r.Limit != 2 {
		t.Fatalf("release in b: %+v, %v; want 1 freed, -1 in flight, limit 2", r, err)
	}
	if r, err := b.Release(ctx, l.ID); err != nil || r.Freed != 0 || r.InFlight != -1 {
		t.Errorf("release again: %+v, %v; want nothing freed", r, err)
	}
	// Where the limit's window is, the count is there.
	if r, err := a.Release(ctx, acquire(a).ID); err != nil || r.Freed != 1 || r.InFlight != 1 {
		t.Errorf("release in a: %+v, %v; want 1 freed, 1 in flight (b's refund is b's)", r, err)
	}
}
