package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// TestBookedWaitThroughThePipeline: a token bucket's request that waits
// is booked and answered with its wait, counted in the metrics; a
// penalty is not started by a booking; a shadow call may not wait; a
// MultiLimit that fails books nothing.
func TestBookedWaitThroughThePipeline(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	p := newPenaltyPipeline(t, &now)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	bucket := func(id string) ratelimit.Request {
		return ratelimit.Request{Namespace: "n", Identifier: id, Limit: 10, Duration: time.Second, Algorithm: ratelimit.TokenBucket,
			Burst: 2, Cost: 1, MaxWait: 250 * time.Millisecond}
	}
	for i, want := range []time.Duration{0, 0, 100 * time.Millisecond, 200 * time.Millisecond, -1} {
		d, err := p.Limit(ctx, Call{Request: bucket("b"), Penalty: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if want < 0 {
			if d.Success || d.Penalized {
				t.Fatalf("call %d, past max wait: %+v, want denied", i, d)
			}
			continue
		}
		if !d.Success || d.Wait != want {
			t.Fatalf("call %d: %+v, want admitted after %v", i, d, want)
		}
	}
	if d, _ := p.Limit(ctx, Call{Request: bucket("b")}); !d.Penalized {
		t.Fatalf("after the denial past max wait: %+v, want the penalty's block", d)
	}
	if got := testutil.ToFloat64(p.metrics.booked); got != 2 {
		t.Fatalf("booked waits counted: %v, want 2", got)
	}
	if got := testutil.ToFloat64(p.metrics.bookedSeconds); got < 0.299 || got > 0.301 {
		t.Fatalf("booked wait seconds: %v, want 0.3", got)
	}
	if _, err := p.Limit(ctx, Call{Request: bucket("s"), Shadow: true}); err == nil || !strings.Contains(err.Error(), "shadow: must not be set with max_wait") {
		t.Fatalf("a shadow call that waits: %v", err)
	}
	// A MultiLimit whose other entry fails books nothing.
	spent := minuteLimit("spent", 1)
	p.Limit(ctx, Call{Request: spent})
	md, err := p.Multi(ctx, []Call{{Request: bucket("m")}, {Request: bucket("m")}, {Request: bucket("m")}, {Request: spent}})
	if err != nil || md.Passed || md.Results[2].Wait != 0 {
		t.Fatalf("a failed multi: %+v, %v", md, err)
	}
	if d, _ := p.Limit(ctx, Call{Request: bucket("m")}); !d.Success || d.Wait != 0 {
		t.Fatalf("after a failed multi: %+v, want a full bucket", d)
	}
}

// TestFixedWindowBookedThroughThePipeline: a fixed window's request past
// its limit is booked into the next window, to proceed when it begins; a
// MultiLimit that fails books nothing there either; once the next window
// is booked full, a refusal's retryAfter is the one after it.
func TestFixedWindowBookedThroughThePipeline(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000) // a minute's start
	p := newPenaltyPipeline(t, &now)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	fixed := ratelimit.Request{Namespace: "n", Identifier: "f", Limit: 1, Duration: time.Minute, Algorithm: ratelimit.FixedWindow,
		Cost: 1, MaxWait: time.Minute}
	spent := minuteLimit("spent", 1)
	p.Limit(ctx, Call{Request: spent})
	md, err := p.Multi(ctx, []Call{{Request: fixed}, {Request: fixed}, {Request: spent}})
	if err != nil || md.Passed || md.Results[1].Wait != 0 {
		t.Fatalf("a failed multi: %+v, %v", md, err)
	}
	for i, want := range []time.Duration{0, time.Minute} {
		if d, err := p.Limit(ctx, Call{Request: fixed}); err != nil || !d.Success || d.Wait != want {
			t.Fatalf("call %d: %+v, %v; want admitted after %v", i, d, err, want)
		}
	}
	if d, _ := p.Limit(ctx, Call{Request: fixed}); d.Success || d.RetryAfter != 2*time.Minute {
		t.Fatalf("a third call: %+v, want denied until the window after the booked one", d)
	}
}
