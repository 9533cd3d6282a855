package call_test

import (
	"context"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
)

// TestCallState: the state WithCall puts in a context is filled in by
// WithPrincipal without another context, read back by every accessor, and
// the latest outcome stands; a context without a call has a principal that
// may do nothing.
func TestCallState(t *testing.T) {
	start := time.UnixMilli(1_000)
	ctx := call.WithCall(context.Background(), start)
	if got := call.WithPrincipal(ctx, access.Principal{Workspace: "ws"}); got != ctx {
		t.Fatal("WithPrincipal made another context for a call that has one")
	}
	call.SetOutcome(ctx, call.OutcomeDenied)
	call.SetOutcome(ctx, call.OutcomeError)
	ctx = call.WithRequestID(ctx, "req_1")
	if call.CallStart(ctx) != start || call.Workspace(ctx) != "ws" || call.OutcomeOf(ctx) != call.OutcomeError ||
		call.RequestID(ctx) != "req_1" || call.OutcomeOf(ctx).String() != "error" {
		t.Fatalf("state: %v %q %v %q", call.CallStart(ctx), call.Workspace(ctx), call.OutcomeOf(ctx), call.RequestID(ctx))
	}
	bare := context.Background()
	if err := call.Authorize(bare, access.Limit, "n"); err == nil || call.OutcomeOf(bare) != call.OutcomePassed {
		t.Fatalf("a context without a call: %v, %v", err, call.OutcomeOf(bare))
	}
}
