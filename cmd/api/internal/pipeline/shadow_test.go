package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TestShadowAdmitsAndSays: a shadow call is decided and counted as any
// other (within its limit it spends it; past it, nothing), but always
// admitted, shadowDenied where the limit refused it; the metrics count
// those apart from real denials; a shadow reservation is refused.
func TestShadowAdmitsAndSays(t *testing.T) {
	limiter, err := ratelimit.New("test")
	if err != nil {
		t.Fatal(err)
	}
	ov, _ := overrides.New()
	reg := prometheus.NewRegistry()
	p, err := New(limiter, ov, reg, WithBatchEntriesInFlight(1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	for i, want := range []struct {
		shadowDenied bool
		remaining    int64
	}{{false, 1}, {false, 0}, {true, 0}, {true, 0}} {
		d, err := p.Limit(ctx, Call{Request: req("s", 2), Shadow: true})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Success || d.ShadowDenied != want.shadowDenied || d.Remaining != want.remaining || d.RetryAfter != 0 {
			t.Fatalf("shadow call %d: %+v, want admitted, shadowDenied %v, %d remaining", i, d, want.shadowDenied, want.remaining)
		}
	}
	// The same limit enforced: the shadow calls spent it, no more.
	if d, _ := p.Limit(ctx, Call{Request: req("s", 2)}); d.Success {
		t.Fatalf("the enforced call after two shadow admissions and two shadow denials: %+v, want denied", d)
	}
	if d, _ := p.Limit(ctx, Call{Request: req("s", 4)}); !d.Success || d.Remaining != 1 {
		t.Fatalf("a limit of 4 on the same counter: %+v, want 1 left (the denied shadow calls counted nothing)", d)
	}
	if got := testutil.ToFloat64(p.metrics.limit[outcomeShadowDenied]); got != 2 {
		t.Fatalf("shadow_denied decisions: %v, want 2", got)
	}
	if got := testutil.ToFloat64(p.metrics.limit[outcomeDenied]); got != 1 {
		t.Fatalf("denied decisions: %v, want 1 (the enforced one)", got)
	}
	r := req("r", 2)
	r.Reserve = true
	if _, err := p.Limit(ctx, Call{Request: r, Shadow: true}); err == nil || !strings.Contains(err.Error(), "shadow: must not be set with reserve") {
		t.Fatalf("a shadow reservation: %v", err)
	}
	// A batch: each entry on its own.
	ds, err := p.Batch(ctx, []Call{{Request: req("b", 1), Shadow: true}, {Request: req("b", 1), Shadow: true}, {Request: req("b", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	if !ds[0].Success || ds[0].ShadowDenied || !ds[1].Success || !ds[1].ShadowDenied || ds[2].Success || ds[2].ShadowDenied {
		t.Fatalf("batch: %+v", ds)
	}
}

// TestShadowEntriesNeverFailAMulti: a MultiLimit's shadow entries are
// decided after the others: counted when the others pass, only asked when
// they fail; a shadow entry past its limit never fails the others.
func TestShadowEntriesNeverFailAMulti(t *testing.T) {
	p, _ := newPipeline(t)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	remaining := func(id string, limit int64) int64 {
		r := req(id, limit)
		r.Cost = 0
		d, err := p.Limit(ctx, Call{Request: r})
		if err != nil {
			t.Fatal(err)
		}
		return d.Remaining
	}
	// The shadow entry's limit is 1 and already spent: the others pass.
	p.Limit(ctx, Call{Request: req("full", 1)})
	m, err := p.Multi(ctx, []Call{{Request: req("a", 5)}, {Request: req("full", 1), Shadow: true}, {Request: req("c", 5), Shadow: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !m.Passed || !m.Results[1].Success || !m.Results[1].ShadowDenied || m.Results[2].ShadowDenied {
		t.Fatalf("a multi with a spent shadow entry: %+v", m)
	}
	if remaining("a", 5) != 4 || remaining("c", 5) != 4 {
		t.Fatal("the passing multi did not count its enforced and shadow entries")
	}
	// An enforced entry fails: nothing is counted, the shadow entry only
	// asked.
	p.Limit(ctx, Call{Request: req("blocked", 1)})
	m, err = p.Multi(ctx, []Call{{Request: req("blocked", 1)}, {Request: req("c", 5), Shadow: true}, {Request: req("full", 1), Shadow: true}})
	if err != nil {
		t.Fatal(err)
	}
	if m.Passed || !m.Results[1].Success || m.Results[1].ShadowDenied || !m.Results[2].ShadowDenied {
		t.Fatalf("a failed multi with shadow entries: %+v", m)
	}
	if remaining("c", 5) != 4 {
		t.Fatal("a failed multi counted its shadow entry")
	}
	// Shadow entries alone: each counted on its own.
	if m, _ := p.Multi(ctx, []Call{{Request: req("c", 5), Shadow: true}}); !m.Passed || remaining("c", 5) != 3 {
		t.Fatalf("a multi of one shadow entry: %+v", m)
	}
}

// TestShadowEntryBeyondTheWindowCap: a MultiLimit's shadow entry that the
// limiter cannot decide (its workspace at its window cap) is shadow-denied,
// never an error once the others were counted.
func TestShadowEntryBeyondTheWindowCap(t *testing.T) {
	limiter, err := ratelimit.New("test", ratelimit.WithMaxWindowsPerWorkspace(1))
	if err != nil {
		t.Fatal(err)
	}
	ov, _ := overrides.New()
	p, err := New(limiter, ov, prometheus.NewRegistry(), WithBatchEntriesInFlight(1000))
	if err != nil {
		t.Fatal(err)
	}
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	if d, err := p.Limit(ctx, Call{Request: req("a", 5)}); err != nil || !d.Success {
		t.Fatalf("the workspace's one window: %+v, %v", d, err)
	}
	m, err := p.Multi(ctx, []Call{{Request: req("a", 5)}, {Request: req("new", 5), Shadow: true}})
	if err != nil {
		t.Fatalf("a multi whose shadow entry is past the window cap: %v, want no error", err)
	}
	if !m.Passed || !m.Results[1].Success || !m.Results[1].ShadowDenied {
		t.Fatalf("multi %+v: want passed, the shadow entry shadow-denied", m)
	}
	r := req("a", 5)
	r.Cost = 0
	if d, _ := p.Limit(ctx, Call{Request: r}); d.Remaining != 3 {
		t.Fatalf("the enforced entry: %d remaining, want 3 (counted once by the multi)", d.Remaining)
	}
}

// TestShadowRollout: a namespace's switch (a shadow override of "*" that
// keeps the callers' limits) makes every call of the namespace a shadow
// one, over every other override, in Limit, Batch and MultiLimit alike,
// but for a reservation; a shadow override of one identifier with a limit
// of its own decides at that limit, in shadow; deleting the switch
// enforces the limits again (the rollout's end, or its undoing).
func TestShadowRollout(t *testing.T) {
	p, ov := newPipeline(t)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	if _, err := p.SetOverride(ctx, overrides.Override{Namespace: "n", Identifier: "big", Limit: 5, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	sw, err := p.SetOverride(ctx, overrides.Override{Namespace: "n", Identifier: overrides.NamespaceSwitch, Shadow: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d, err := p.Limit(ctx, Call{Request: req("a", 1)})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Success || !d.Shadow || d.ShadowDenied != (i > 0) || d.OverrideID != sw.ID || d.Limit != 1 {
			t.Fatalf("call %d under the switch: %+v, want admitted at the caller's limit 1, shadow-denied after the first, override %s", i, d, sw.ID)
		}
	}
	for i := range 6 {
		d, _ := p.Limit(ctx, Call{Request: req("big", 1)})
		if !d.Success || d.Limit != 5 || d.ShadowDenied != (i == 5) || d.OverrideID == sw.ID {
			t.Fatalf("call %d of an identifier with its own override: %+v, want its limit 5, shadowed by the switch", i, d)
		}
	}
	ds, err := p.Batch(ctx, []Call{{Request: req("a", 1)}, {Request: req("b", 1)}})
	if err != nil || !ds[0].Success || !ds[0].ShadowDenied || !ds[1].Success || ds[1].ShadowDenied {
		t.Fatalf("a batch under the switch: %+v, %v", ds, err)
	}
	calls := []Call{{Request: req("a", 1)}, {Request: req("m", 1)}}
	md, err := p.Multi(ctx, calls)
	if err != nil || !md.Passed || !md.Results[0].ShadowDenied || md.Results[1].ShadowDenied {
		t.Fatalf("a multi under the switch: %+v, %v", md, err)
	}
	if calls[0].Shadow {
		t.Fatal("Multi changed its caller's calls")
	}
	r := req("reserve", 1)
	r.Reserve = true
	if d, err := p.Limit(ctx, Call{Request: r}); err != nil || d.Shadow || d.Reservation == "" {
		t.Fatalf("a reservation under the switch: %+v, %v; want one made, not a shadow call", d, err)
	}
	if _, err := p.SetOverride(ctx, overrides.Override{Namespace: "n", Identifier: "*", Limit: 1, Duration: time.Hour}); err == nil {
		t.Fatal("an enforced override of * alone was accepted")
	}
	if err := p.DeleteOverride(ctx, "n", overrides.NamespaceSwitch); err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Limit(ctx, Call{Request: req("a", 1)}); d.Success || d.Shadow {
		t.Fatalf("after the switch is deleted: %+v, want denied", d)
	}
	// One identifier's shadow override with a limit of its own.
	if _, err := ov.Set(ctx, overrides.Override{Workspace: "ws", Namespace: "n", Identifier: "new*", Limit: 1, Duration: time.Hour, Shadow: true}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		d, _ := p.Limit(ctx, Call{Request: req("newbie", 100)})
		if !d.Success || d.Limit != 1 || d.ShadowDenied != (i == 1) {
			t.Fatalf("call %d under a shadow override of limit 1: %+v", i, d)
		}
	}
	// A reservation, and a call that waits, take no shadow override: the
	// limit only tried is never enforced on them.
	r = req("newcomer", 100)
	r.Reserve = true
	if d, err := p.Limit(ctx, Call{Request: r}); err != nil || !d.Success || d.Limit != 100 || d.OverrideID != "" {
		t.Fatalf("a reservation under a shadow override of limit 1: %+v, %v; want its own limit", d, err)
	}
	w := req("newcomer", 100)
	w.MaxWait = time.Second
	if d, err := p.Limit(ctx, Call{Request: w}); err != nil || !d.Success || d.Limit != 100 || d.Shadow {
		t.Fatalf("a call that waits under a shadow override of limit 1: %+v, %v; want its own limit", d, err)
	}
}
