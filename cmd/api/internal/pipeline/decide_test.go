package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

func newPipeline(t testing.TB, opts ...Option) (*Pipeline, *overrides.Registry) {
	t.Helper()
	limiter, err := ratelimit.New("test")
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New()
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(limiter, ov, prometheus.NewRegistry(), append([]Option{WithBatchEntriesInFlight(1000)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return p, ov
}

func req(id string, limit int64) ratelimit.Request {
	return ratelimit.Request{Workspace: "ws", Namespace: "n", Identifier: id, Limit: limit, Duration: time.Hour, Cost: 1}
}

// TestCallRules: what a call accepts beyond the limiter's own rules is the
// adapter's to say, and a caller's bad values are refused even where an
// override would replace them.
func TestCallRules(t *testing.T) {
	p, ov := newPipeline(t)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	if _, err := ov.Set(ctx, overrides.Override{Workspace: "ws", Namespace: "n", Identifier: "o", Limit: 5, Duration: time.Hour}); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("é", 300)
	year := req("y", 1)
	year.Duration = 365 * 24 * time.Hour
	for _, tc := range []struct {
		name string
		call Call
		want string // "" for a decision
	}{
		{"limit 0 from a caller", Call{Request: req("o", 0)}, "limit: must be between 1"},
		{"limit 0 configured", Call{Request: req("z", 0), Bounds: ratelimit.OperatorBounds}, ""},
		{"300 characters, Connect's bound", Call{Request: req(long, 1)}, "identifier: must be 1 to 255 characters"},
		{"300 characters, v2's bound", Call{Request: req(long, 1), Bounds: ratelimit.Bounds{MaxIdentifier: 512}}, ""},
		{"a year, the API's bound", Call{Request: year}, "duration: must be between 1000 and 2592000000"},
		{"a year, Envoy's", Call{Request: year, Bounds: ratelimit.Bounds{MaxDuration: ratelimit.MaxWindow}}, ""},
	} {
		d, err := p.Limit(ctx, tc.call)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		case tc.want == "" && tc.call.Bounds.ZeroBlocks && d.Success:
			t.Errorf("%s: admitted", tc.name)
		}
	}
	d, err := p.Limit(ctx, Call{Request: req("o", 1000)})
	if err != nil || d.Limit != 5 || d.OverrideID == "" || d.Remaining != 4 {
		t.Errorf("with an override: %+v, %v", d, err)
	}
	if f := failure.Classify(batchError(t, p)); f.Kind != failure.KindInvalidArgument || f.Field != "limits[1].cost" {
		t.Errorf("a batch with a bad entry: %+v", f)
	}
}

// batchError runs a batch whose second entry breaks a rule and returns its
// error.
func batchError(t *testing.T, p *Pipeline) error {
	t.Helper()
	bad := req("b", 1)
	bad.Cost = -1
	_, err := p.Batch(call.WithPrincipal(context.Background(), access.OpenPrincipal()), []Call{{Request: req("a", 1)}, {Request: bad}})
	if err == nil {
		t.Fatal("a batch with a negative cost was decided")
	}
	return err
}
