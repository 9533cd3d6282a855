package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
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

// stuckLedger is a ledger that never answers: a MySQL that stopped, its
// connections hanging. Claim returns when its context is done, and
// records the longest deadline it was given.
type stuckLedger struct {
	longest time.Duration
}

func (l *stuckLedger) Claim(ctx context.Context, _ [16]byte, _ string, _ int64, _ time.Time) (bool, int64, error) {
	if deadline, ok := ctx.Deadline(); ok {
		l.longest = max(l.longest, time.Until(deadline))
	} else {
		l.longest = time.Hour
	}
	<-ctx.Done()
	return false, 0, ctx.Err()
}

// TestReleaseDoesNotWaitOnAStuckLedger: a release, and a settle, wait on a
// ledger that does not answer no longer than the ledger's budget, and free
// or give back nothing (the slots free themselves at their expiry). Before,
// a release waited for as long as its caller let it (141 of 146 releases
// ran into a caller's 2 s deadline with MariaDB stopped).
func TestReleaseDoesNotWaitOnAStuckLedger(t *testing.T) {
	keyring := reservation.NewKeyring(nil, slog.New(slog.DiscardHandler))
	ledger := &stuckLedger{}
	const budget = 20 * time.Millisecond
	p, _ := newPipeline(t, WithReservations(keyring, ledger, ""), WithLedgerTimeout(budget))
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	l, err := p.Acquire(ctx, ratelimit.Acquisition{Namespace: "n", Identifier: "slots", Limit: 2, Lease: time.Minute, Cost: 1})
	if err != nil || !l.Success {
		t.Fatalf("acquire: %+v, %v", l, err)
	}
	rel, err := p.Release(ctx, l.ID)
	if err != nil || rel.Freed != 0 || rel.InFlight != 1 {
		t.Fatalf("release with the ledger stuck: %+v, %v; want nothing freed, 1 held", rel, err)
	}
	if ledger.longest > budget {
		t.Fatalf("the release gave the ledger %v, more than its budget of %v", ledger.longest, budget)
	}
	r := req("budget", 100)
	r.Reserve, r.Cost = true, 50
	d, err := p.Limit(ctx, Call{Request: r})
	if err != nil || !d.Success || d.Reservation == "" {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	ledger.longest = 0
	spent := int64(10)
	settled, err := p.Settle(ctx, d.Reservation, &spent)
	if err != nil || settled.Refunded != 0 {
		t.Fatalf("settle with the ledger stuck: %+v, %v; want nothing given back", settled, err)
	}
	if ledger.longest > budget {
		t.Fatalf("the settle gave the ledger %v, more than its budget of %v", ledger.longest, budget)
	}
}

// TestExpiredLeaseIsNotExtended: a lease that expired is refused by
// Extend, naming lease_id, and holds nothing: an override of limit 0 set
// since blocks the caller's next Acquire. Before, the expired lease was
// acquired anew at the limit it was taken under, past the override (5 of
// 8 extended).
func TestExpiredLeaseIsNotExtended(t *testing.T) {
	p, ov := newPipeline(t)
	now := time.Now()
	p.now = func() time.Time { return now }
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	a := ratelimit.Acquisition{Namespace: "n", Identifier: "slots", Limit: 5, Lease: time.Minute, Cost: 1}
	l, err := p.Acquire(ctx, a)
	if err != nil || !l.Success {
		t.Fatalf("acquire: %+v, %v", l, err)
	}
	if _, err := ov.Set(ctx, overrides.Override{Workspace: "ws", Namespace: "n", Identifier: "slots", Limit: 0, Duration: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// Past the end of the cell the slots were counted in (the limiter's
	// Reset), when they freed themselves; ExpiresAt, the lease's end, is
	// up to a cell of its grid earlier.
	if l.Reset.Before(l.ExpiresAt) || l.Reset.Sub(l.ExpiresAt) > 6*time.Second {
		t.Fatalf("a lease of a minute ends at %v and frees itself at %v: want at most a cell (4 s) later", l.ExpiresAt, l.Reset)
	}
	now = l.Reset.Add(time.Millisecond)
	_, err = p.Extend(ctx, l.ID, 0)
	var bad *invalid.Error
	if !errors.As(err, &bad) || bad.Field != "lease_id" || !strings.Contains(bad.Rule, "expired") {
		t.Fatalf("extend of an expired lease: %v, want an invalid lease_id that says it expired", err)
	}
	if again, err := p.Acquire(ctx, a); err != nil || again.Success {
		t.Fatalf("acquire under an override of 0: %+v, %v; want refused", again, err)
	}
}

// TestExtendAnswersTheNewEnd: an extension answers the end of the lease
// it asked for, the time of the extension plus the lease, although a
// second's extension of a lease of a minute keeps the slots in the cell
// they were counted in (a cell of its grid lasts 4 s), and the slots free
// themselves less than a second or a tenth of the lease after that end. Before, the answer
// was that cell's end, the expiry of the lease it replaced.
func TestExtendAnswersTheNewEnd(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_500) // half a second into a cell of the 4 s grid
	clock := clockFunc(func() time.Time { return now })
	limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(limiter, ov, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	p.now = clock.Now
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	a := ratelimit.Acquisition{Namespace: "n", Identifier: "slots", Limit: 5, Lease: time.Minute, Cost: 1}
	l, err := p.Acquire(ctx, a)
	if err != nil || !l.Success || !l.ExpiresAt.Equal(now.Add(time.Minute)) || !l.Reset.Equal(now.Add(63500*time.Millisecond)) {
		t.Fatalf("acquire at %v: %+v, %v; want it to end a minute later", now, l, err)
	}
	for _, lease := range []time.Duration{0, time.Minute, 2 * time.Minute, 10 * time.Second} {
		now = now.Add(time.Second)
		prev := l
		l, err = p.Extend(ctx, prev.ID, lease)
		want := lease
		if want == 0 {
			want = time.Minute // the lease it was acquired with
		}
		if err != nil || !l.Success || !l.ExpiresAt.Equal(now.Add(want)) || l.InFlight != 1 {
			t.Fatalf("extend by %v at %v: %+v, %v; want it to end at %v, one slot held", lease, now, l, err, now.Add(want))
		}
		if late := l.Reset.Sub(l.ExpiresAt); late < 0 || late >= max(time.Second, want/10) {
			t.Fatalf("extend by %v: the slots free themselves at %v, want less than a second or a tenth of the lease after the lease's end %v", lease, l.Reset, l.ExpiresAt)
		}
	}
}

// clockFunc is a clock that reads the time from a function.
type clockFunc func() time.Time

// Now returns f().
func (f clockFunc) Now() time.Time { return f() }
