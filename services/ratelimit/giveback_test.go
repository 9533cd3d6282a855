package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// reserve counts r as a reservation and returns the refund that gives back
// all but spent of it.
func reserve(t *testing.T, s *Service, r Request, spent int64) Hold {
	t.Helper()
	r.Reserve = true
	resp := mustLimit(t, s, r)
	if !resp.Success {
		t.Fatalf("reservation of %d denied (%d remaining)", r.Cost, resp.Remaining)
	}
	return Hold{Workspace: r.Workspace, Namespace: r.Namespace, Identifier: r.Identifier, Duration: r.Duration,
		Limit: r.Limit, Sequence: CellOf(resp, r.Duration), Amount: r.Cost - spent}
}

func mustRefund(t *testing.T, s *Service, r Hold) int64 {
	t.Helper()
	n, err := s.GiveBack(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return n.Given
}

// left is what a check (cost 0) says is left of r's limit.
func left(t *testing.T, s *Service, r Request) int64 {
	t.Helper()
	r.Cost = 0
	return mustLimit(t, s, r).Remaining
}

func TestRefundGivesBackToItsCell(t *testing.T) {
	clock := newFakeClock(600_000)
	s, err := New("test", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	rq := req("llm", 1000, time.Minute, 600)
	refund := reserve(t, s, rq, 100)
	if got := left(t, s, rq); got != 400 {
		t.Fatalf("after reserving 600 of 1000: remaining %d, want 400", got)
	}
	if got := mustRefund(t, s, refund); got != 500 {
		t.Fatalf("refunded %d, want 500", got)
	}
	if got := left(t, s, rq); got != 900 {
		t.Fatalf("after spending 100 of a reservation of 600: remaining %d, want 900", got)
	}
	// In the next window the cell is the previous one: its net count
	// weighs as the window slides over it.
	clock.Advance(90 * time.Second)
	if got := left(t, s, rq); got != 950 {
		t.Fatalf("half a window on: remaining %d, want 950", got)
	}
	clock.Advance(30 * time.Second)
	if got := left(t, s, rq); got != 1000 {
		t.Fatalf("a window on: remaining %d, want 1000", got)
	}
	if got := mustRefund(t, s, Hold{Workspace: "ws", Namespace: "ns", Identifier: "llm", Duration: time.Minute,
		Limit: 1000, Sequence: refund.Sequence + 1, Amount: 0}); got != 0 {
		t.Fatalf("a refund of 0 gave %d", got)
	}
	// Once the window after its own has ended the cell counts nowhere:
	// nothing to give back.
	clock.Advance(time.Minute)
	if got := mustRefund(t, s, refund); got != 0 {
		t.Fatalf("a refund to a cell past every window gave %d", got)
	}
}

func TestRefundsNeverTakeACellBelowZero(t *testing.T) {
	clock := newFakeClock(600_000)
	s, err := New("test", WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	rq := req("llm", 100, time.Minute, 10)
	refund := reserve(t, s, rq, 0)
	refund.Amount = 90 // more than was reserved: the caller's bound, not ours
	mustRefund(t, s, refund)
	if got := left(t, s, rq); got != 100 {
		t.Fatalf("remaining %d, want the limit (100) and never more", got)
	}
	rq.Cost = 101
	if mustLimit(t, s, rq).Success {
		t.Fatal("a request beyond the limit was admitted")
	}
}

func TestRefundValidation(t *testing.T) {
	s, err := New("test")
	if err != nil {
		t.Fatal(err)
	}
	good := Hold{Workspace: "ws", Namespace: "ns", Identifier: "id", Duration: time.Minute, Limit: 10, Amount: 1}
	for field, bad := range map[string]func(r *Hold){
		"namespace":  func(r *Hold) { r.Namespace = "" },
		"identifier": func(r *Hold) { r.Identifier = "a\nb" },
		"duration":   func(r *Hold) { r.Duration = time.Millisecond },
		"limit":      func(r *Hold) { r.Limit = 0 },
		"amount":     func(r *Hold) { r.Amount = -1 },
	} {
		r := good
		bad(&r)
		var ve *invalid.Error
		if _, err := s.GiveBack(context.Background(), r); !errors.As(err, &ve) || ve.Field != field {
			t.Errorf("bad %s: %v, want a validation error naming it", field, err)
		}
	}
	if err := (&Request{Namespace: "ns", Identifier: "id", Limit: 1, Duration: time.Second, Reserve: true, Report: true}).Validate(); err == nil {
		t.Error("a reservation that is also a report was accepted")
	}
	if err := ValidateBatch([]Request{{Namespace: "ns", Identifier: "id", Limit: 1, Duration: time.Second, Reserve: true}}); err == nil {
		t.Error("a reservation in a MultiLimit was accepted")
	}
}

// TestRefundsAcrossProcesses: a refund given by one process of a region
// reaches another that reserves on the same key through the regional
// store, as a count of its own.
func TestRefundsAcrossProcesses(t *testing.T) {
	o := storetest.NewMemRegional()
	clock := newFakeClock(600_000)
	a, b := newRegional(t, o, clock), newRegional(t, o, clock)
	rq := req("llm", 1000, time.Minute, 300)
	refundA := reserve(t, a.Service, rq, 100)
	reserve(t, b.Service, rq, 300)
	a.tick()
	b.tick()
	mustRefund(t, a.Service, refundA)
	a.tick()
	refunds := cellOf(rq, 600_000)
	refunds.Refunds = true
	if got := o.Count(refunds); got != 200 {
		t.Fatalf("the regional store holds refunds of %d, want 200", got)
	}
	// B's next strict read (it is past its refresh interval) sees them.
	clock.Advance(time.Second)
	if got := left(t, b.Service, rq); got != 1000-600+200 {
		t.Fatalf("B: remaining %d, want %d", got, 1000-600+200)
	}
}

// TestRefundsAcrossRegions: a refund is published by its region and
// imported by the others as a count of its own; the others' imports are
// never published again.
func TestRefundsAcrossRegions(t *testing.T) {
	mem := storetest.NewMemGlobal()
	clock := newFakeClock(600_000)
	us, eu := newRegion(t, "us", mem, clock), newRegion(t, "eu", mem, clock)
	rq := req("llm", 1000, time.Minute, 400)
	refund := reserve(t, us.Service, rq, 50)
	reserve(t, eu.Service, rq, 400)
	us.flush()
	eu.flush()
	us.sync()
	eu.sync()
	if got := left(t, eu.Service, rq); got != 200 {
		t.Fatalf("EU before the refund: remaining %d, want 200", got)
	}
	mustRefund(t, us.Service, refund)
	us.promptFlush()
	eu.sync()
	if got := left(t, eu.Service, rq); got != 550 {
		t.Fatalf("EU after US gave back 350: remaining %d, want 550", got)
	}
	eu.flush()
	rows := strings.Join(mem.Dump(), " ")
	if strings.Contains(rows, "/refunds/eu=") {
		t.Fatalf("EU published refunds it imported: %s", rows)
	}
	if !strings.Contains(rows, "llm/10/refunds/us=350") {
		t.Fatalf("no refunds row of 350 from US: %s", rows)
	}
}
