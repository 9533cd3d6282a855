package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// newPenaltyPipeline returns a pipeline with penalty boxes, on a clock the
// test moves by hand (now).
func newPenaltyPipeline(t *testing.T, now *time.Time) *Pipeline {
	t.Helper()
	clock := clockFunc(func() time.Time { return *now })
	limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ov, _ := overrides.New()
	box, err := penalties.New(penalties.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(limiter, ov, prometheus.NewRegistry(), WithPenalties(box), WithBatchEntriesInFlight(1000))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func minuteLimit(id string, limit int64) ratelimit.Request {
	return ratelimit.Request{Namespace: "login", Identifier: id, Limit: limit, Duration: time.Minute, Cost: 1}
}

// TestPenaltyBlocksAfterTheLimit: the denial that breaks the limit blocks
// the identifier in the namespace for the penalty, whatever the window
// says (a new window, another limit, a call without a penalty), answering
// retryAfter = what is left of the block and counting nothing; an offence
// soon after the block doubles it, up to penalty_max; the block can be read
// and lifted.
func TestPenaltyBlocksAfterTheLimit(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	p := newPenaltyPipeline(t, &now)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	penalty := Call{Request: minuteLimit("mallory", 2), Penalty: 5 * time.Minute, PenaltyMax: 12 * time.Minute}
	for range 2 {
		if d, err := p.Limit(ctx, penalty); err != nil || !d.Success {
			t.Fatalf("within the limit: %+v, %v", d, err)
		}
	}
	d, _ := p.Limit(ctx, penalty)
	if d.Success || d.Penalized || d.RetryAfter != 5*time.Minute || !d.Reset.Equal(now.Add(5*time.Minute)) {
		t.Fatalf("the offence: %+v, want denied with the block's 5 min retryAfter", d)
	}
	now = now.Add(2 * time.Minute) // a new window: the limit alone would admit
	for _, c := range []Call{penalty, {Request: minuteLimit("mallory", 1000)}} {
		d, err := p.Limit(ctx, c)
		if err != nil || d.Success || !d.Penalized || d.RetryAfter != 3*time.Minute || d.Remaining != 0 {
			t.Fatalf("during the block: %+v, %v; want denied by it, 3 min left", d, err)
		}
	}
	if d, _ := p.Limit(ctx, Call{Request: minuteLimit("alice", 2), Penalty: time.Minute}); !d.Success {
		t.Fatalf("another identifier: %+v", d)
	}
	shadow := penalty
	shadow.Shadow = true
	if d, _ := p.Limit(ctx, shadow); !d.Success || !d.ShadowDenied || !d.Penalized {
		t.Fatalf("a shadow call during the block: %+v, want admitted, shadow-denied", d)
	}
	got, err := p.GetPenalty(ctx, "login", "mallory")
	if err != nil || got.Until != now.Add(3*time.Minute).UnixMilli() {
		t.Fatalf("GetPenalty: %+v, %v", got, err)
	}
	// After the block, the window is the caller's again: 2 admitted (the
	// blocked calls counted nothing), then a repeat offence: 10 min.
	now = now.Add(3*time.Minute + time.Second)
	for range 2 {
		if d, _ := p.Limit(ctx, penalty); !d.Success {
			t.Fatalf("after the block: %+v", d)
		}
	}
	if d, _ := p.Limit(ctx, penalty); d.Success || d.RetryAfter != 10*time.Minute {
		t.Fatalf("a repeat offence: %+v, want a 10 min block", d)
	}
	now = now.Add(10*time.Minute + time.Second)
	for range 2 {
		p.Limit(ctx, penalty)
	}
	if d, _ := p.Limit(ctx, penalty); d.RetryAfter != 12*time.Minute {
		t.Fatalf("a third offence: %+v, want penalty_max, 12 min", d)
	}
	if err := p.DeletePenalty(ctx, "login", "mallory"); err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Limit(ctx, Call{Request: minuteLimit("mallory", 1000)}); !d.Success {
		t.Fatalf("after the penalty was lifted: %+v", d)
	}
	if err := p.DeletePenalty(ctx, "login", "mallory"); !errors.Is(err, penalties.ErrNotFound) {
		t.Fatalf("lifting it again: %v", err)
	}
	perms, err := access.Parse([]string{"ratelimit.login.read_override", "ratelimit.login.limit"})
	if err != nil {
		t.Fatal(err)
	}
	readOnly := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: perms})
	var denied *access.DeniedError
	if err := p.DeletePenalty(readOnly, "login", "mallory"); !errors.As(err, &denied) {
		t.Fatalf("lifting without set_override: %v", err)
	}
}

// TestPenaltyRules: the fields' bounds; a check (cost 0) and a shadow
// call offend nobody.
func TestPenaltyRules(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	p := newPenaltyPipeline(t, &now)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	for _, c := range []struct {
		call Call
		want string
	}{
		{Call{Request: minuteLimit("x", 1), Penalty: -time.Second}, "penalty: must be between 1 and"},
		{Call{Request: minuteLimit("x", 1), Penalty: 31 * 24 * time.Hour}, "penalty: must be between 1 and"},
		{Call{Request: minuteLimit("x", 1), Penalty: time.Minute, PenaltyMax: time.Second}, "penalty_max: must be between penalty and"},
		{Call{Request: minuteLimit("x", 1), PenaltyMax: time.Second}, "penalty: must be between 1 and"},
	} {
		if _, err := p.Limit(ctx, c.call); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.call, err, c.want)
		}
	}
	check := Call{Request: minuteLimit("y", 1), Penalty: time.Minute}
	p.Limit(ctx, check)
	check.Request.Cost = 0
	check.Request.Limit = 1
	for range 2 {
		p.Limit(ctx, check)
	}
	shadow := Call{Request: minuteLimit("y", 1), Penalty: time.Minute, Shadow: true}
	p.Limit(ctx, shadow)
	if _, err := p.GetPenalty(ctx, "login", "y"); !errors.Is(err, penalties.ErrNotFound) {
		t.Fatalf("a check and a shadow call over the limit started a block: %v", err)
	}
	limiter, _ := ratelimit.New("test")
	ov, _ := overrides.New()
	plain, _ := New(limiter, ov, prometheus.NewRegistry())
	if _, err := plain.Limit(ctx, Call{Request: minuteLimit("x", 1), Penalty: time.Minute}); err == nil || !strings.Contains(err.Error(), "penalty: is not available") {
		t.Fatalf("a penalty without boxes: %v", err)
	}
}

// TestPenaltyInAMultiAndABatch: an entry its limit denies in a failed
// MultiLimit starts its block; a held entry then fails the MultiLimit,
// which counts nothing; a batch's entries are each their own.
func TestPenaltyInAMultiAndABatch(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	p := newPenaltyPipeline(t, &now)
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	multi := []Call{{Request: minuteLimit("m", 1), Penalty: time.Minute}, {Request: minuteLimit("other", 100)}}
	if md, _ := p.Multi(ctx, multi); !md.Passed {
		t.Fatalf("first multi: %+v", md)
	}
	md, _ := p.Multi(ctx, multi)
	if ra := md.Results[0].RetryAfter; md.Passed || ra < time.Minute || ra > time.Minute+time.Second || md.Results[0].Penalized {
		t.Fatalf("the offending multi: %+v, want failed, the entry with the block's minute (or its window's wait, if longer)", md)
	}
	now = now.Add(30 * time.Second)
	multi[0].Request.Limit = 1000
	md, _ = p.Multi(ctx, multi)
	if md.Passed || !md.Results[0].Penalized || md.Results[0].RetryAfter != 30*time.Second || md.Results[0].Limit != 1000 {
		t.Fatalf("a multi with a held entry: %+v", md)
	}
	if d, _ := p.Limit(ctx, Call{Request: minuteLimit("other", 100)}); d.Remaining != 98 {
		t.Fatalf("other after a passed multi and two failed ones: %+v, want 98 left (1 counted, then 1 now)", d)
	}
	ds, err := p.Batch(ctx, []Call{{Request: minuteLimit("m", 1000)}, {Request: minuteLimit("b", 1)}})
	if err != nil || !ds[0].Penalized || ds[0].Success || !ds[1].Success {
		t.Fatalf("a batch: %+v, %v", ds, err)
	}
}

// TestPenaltyOfALongIdentifier: a block of an identifier longer than the
// stores' names (an Envoy counter name) is listed under its digest, and
// read, paged past and lifted by that digest as by the identifier itself.
func TestPenaltyOfALongIdentifier(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	clock := clockFunc(func() time.Time { return now })
	limiter, err := ratelimit.New("test", ratelimit.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	ov, _ := overrides.New()
	box, err := penalties.New(penalties.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(limiter, ov, prometheus.NewRegistry(), WithPenalties(box))
	if err != nil {
		t.Fatal(err)
	}
	run, stop := context.WithCancel(context.Background())
	defer stop()
	go box.Run(run) // writes the block to its store, which lists it
	ctx := call.WithPrincipal(context.Background(), access.Principal{Workspace: "ws", Permissions: access.All()})
	long := strings.Repeat("user=mallory,", 300) // 3,900 characters
	c := Call{Request: minuteLimit(long, 1), Penalty: time.Minute, Bounds: ratelimit.Bounds{MaxIdentifier: 4096}}
	p.Limit(ctx, c)
	if d, _ := p.Limit(ctx, c); d.Success {
		t.Fatalf("the offence: %+v", d)
	}
	var page []Penalty
	poll.Until(t, 5*time.Second, "the block listed", func() bool {
		page, err = p.ListPenalties(ctx, "login", "", 0)
		return err != nil || len(page) > 0
	})
	if err != nil || len(page) != 1 || page[0].Identifier != CounterIdentifier(long) {
		t.Fatalf("ListPenalties: %+v, %v; want the block under its digest", page, err)
	}
	listed := page[0].Identifier
	for _, id := range []string{long, listed} {
		if b, err := p.GetPenalty(ctx, "login", id); err != nil || b.Identifier != listed {
			t.Fatalf("GetPenalty(%.20s…): %+v, %v", id, b, err)
		}
	}
	if rest, err := p.ListPenalties(ctx, "login", listed, 0); err != nil || len(rest) != 0 {
		t.Fatalf("the page after the digest: %+v, %v; want none", rest, err)
	}
	if err := p.DeletePenalty(ctx, "login", listed); err != nil {
		t.Fatalf("DeletePenalty by the listed digest: %v", err)
	}
	if _, err := p.GetPenalty(ctx, "login", long); !errors.Is(err, penalties.ErrNotFound) {
		t.Fatalf("after the lift: %v, want none", err)
	}
}
