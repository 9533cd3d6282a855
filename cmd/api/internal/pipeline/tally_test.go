package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
)

// TestTallyIsACounterNoOverrideTouches: a tally returns the sum of what
// was added over its window, whatever override pattern matches its name;
// another workspace's tally of the same name is its own; a caller that may
// not decide limits in the namespace, or a negative count, changes
// nothing.
func TestTallyIsACounterNoOverrideTouches(t *testing.T) {
	p, ov := newPipeline(t)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	if _, err := ov.Set(ctx, overrides.Override{Workspace: "ws", Namespace: "envoy", Identifier: "rlqs*", Limit: 5, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	for i, n := range []int64{100, 250, 0, 7} {
		got, err := p.Tally(ctx, "envoy", "rlqs demand", n, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int64{100, 350, 350, 357}[i]; got != want {
			t.Fatalf("tally %d: %d, want %d", i, got, want)
		}
	}
	other := call.WithPrincipal(context.Background(), access.Principal{Workspace: "other", Permissions: access.All()})
	if got, err := p.Tally(other, "envoy", "rlqs demand", 1, time.Hour); err != nil || got != 1 {
		t.Fatalf("another workspace's tally: %d, %v; want 1", got, err)
	}
	denied := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws"})
	var de *access.DeniedError
	if _, err := p.Tally(denied, "envoy", "rlqs demand", 1, time.Hour); !errors.As(err, &de) {
		t.Fatalf("a caller without limit.envoy: %v, want a denial", err)
	}
	if _, err := p.Tally(ctx, "envoy", "rlqs demand", -1, time.Hour); err == nil || !strings.Contains(err.Error(), "cost") {
		t.Fatalf("a negative count: %v, want the cost's rule", err)
	}
	if got, _ := p.Tally(ctx, "envoy", "rlqs demand", 0, time.Hour); got != 357 {
		t.Fatalf("after the refusals: %d, want 357", got)
	}
}
