package ratelimit

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
)

func TestValidate(t *testing.T) {
	const nameRule = "must be 1 to 255 characters of valid UTF-8 without control or format characters"
	ok := Request{Workspace: "ws", Namespace: "ns", Identifier: "id", Limit: 10, Duration: time.Second, Cost: 1}
	cases := []struct {
		name   string
		change func(*Request)
		field  string
		rule   string
	}{
		{"empty namespace", func(r *Request) { r.Namespace = "" }, "namespace", nameRule},
		{"namespace of 256", func(r *Request) { r.Namespace = strings.Repeat("n", 256) }, "namespace", nameRule},
		{"namespace of 256 runes", func(r *Request) { r.Namespace = strings.Repeat("é", 256) }, "namespace", nameRule},
		{"namespace with NUL", func(r *Request) { r.Namespace = "a\x00b" }, "namespace", nameRule},
		{"namespace with DEL", func(r *Request) { r.Namespace = "a\x7fb" }, "namespace", nameRule},
		{"namespace with C1 control", func(r *Request) { r.Namespace = "é\u0085" }, "namespace", nameRule},
		{"namespace not UTF-8", func(r *Request) { r.Namespace = "a\xffb" }, "namespace", nameRule},
		// Format characters: before, U+202E rendered "…txt.exe" as
		// "exe.txt" on the dashboard.
		{"identifier with a right-to-left override", func(r *Request) { r.Identifier = "invoice\u202etxt.exe" }, "identifier", nameRule},
		{"identifier with a zero-width space", func(r *Request) { r.Identifier = "ad\u200bmin" }, "identifier", nameRule},
		{"identifier with a byte-order mark", func(r *Request) { r.Identifier = "\ufeffadmin" }, "identifier", nameRule},
		{"namespace with a soft hyphen", func(r *Request) { r.Namespace = "a\u00adb" }, "namespace", nameRule},
		{"namespace with a left-to-right isolate", func(r *Request) { r.Namespace = "a\u2066b" }, "namespace", nameRule},
		{"empty identifier", func(r *Request) { r.Identifier = "" }, "identifier", nameRule},
		{"identifier with newline", func(r *Request) { r.Identifier = "user\n42" }, "identifier", nameRule},
		{"identifier not UTF-8", func(r *Request) { r.Identifier = "ü\xc3" }, "identifier", nameRule},
		{"limit 0", func(r *Request) { r.Limit = 0 }, "limit", "must be between 1 and 9007199254740992"},
		{"limit above 2^53", func(r *Request) { r.Limit = MaxLimit + 1 }, "limit", "must be between 1 and 9007199254740992"},
		{"duration 999 ms", func(r *Request) { r.Duration = 999 * time.Millisecond }, "duration", "must be between 1000 and 2592000000 milliseconds"},
		{"duration above 30 days", func(r *Request) { r.Duration = MaxDuration + time.Millisecond }, "duration", "must be between 1000 and 2592000000 milliseconds"},
		{"negative cost", func(r *Request) { r.Cost = -1 }, "cost", "must be between 0 and 9007199254740992"},
		{"cost above 2^53", func(r *Request) { r.Cost = MaxCost + 1 }, "cost", "must be between 0 and 9007199254740992"},
	}
	s := newTestService(t, newFakeClock(0))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.change(&r)
			_, err := s.Limit(context.Background(), r)
			var ve *invalid.Error
			if !errors.As(err, &ve) || ve.Field != tc.field || ve.Rule != tc.rule {
				t.Fatalf("Limit = %v, want %s: %s", err, tc.field, tc.rule)
			}
			if want := tc.field + ": " + tc.rule; err.Error() != want {
				t.Fatalf("error text %q, want %q", err.Error(), want)
			}
			if n := s.ActiveWindows(); n != 0 {
				t.Fatalf("an invalid request created %d windows", n)
			}
		})
	}
	for _, good := range []Request{
		ok,
		{Namespace: strings.Repeat("n", 255), Identifier: strings.Repeat("é", 255), Limit: MaxLimit, Duration: MaxDuration, Cost: MaxCost},
		{Namespace: "日本語", Identifier: "🙂", Limit: 1, Duration: MinDuration, Cost: 0},
		// The joiners: a family emoji (U+200D) and a Persian name (U+200C).
		{Namespace: "ns", Identifier: "👨\u200d👩\u200d👧", Limit: 1, Duration: MinDuration},
		{Namespace: "ns", Identifier: "می\u200cخواهم", Limit: 1, Duration: MinDuration},
	} {
		if err := good.Validate(); err != nil {
			t.Fatalf("Validate(%.40q…) = %v, want nil", good.Namespace, err)
		}
	}
}

// TestBounds: one set of rules, each sender's bounds. What a caller may
// not send (a limit of 0, a year's window, a long identifier) an
// operator's rules may, and each refusal names the field; what no bounds
// allow (a negative cost, a lease of half a second) every sender is
// refused alike, for requests, acquisitions and holds.
func TestBounds(t *testing.T) {
	long := strings.Repeat("i", 1000)
	year := 365 * 24 * time.Hour
	digesting := Bounds{MaxIdentifier: 4096}
	for _, tc := range []struct {
		name   string
		bounds Bounds
		check  func(Bounds) error
		field  string // "" for none
	}{
		{"a limit of 0 from a caller", CallerBounds, reqWith(func(r *Request) { r.Limit = 0 }), "limit"},
		{"a limit of 0 from an operator", OperatorBounds, reqWith(func(r *Request) { r.Limit = 0 }), ""},
		{"a year from a caller", CallerBounds, reqWith(func(r *Request) { r.Duration = year }), "duration"},
		{"a year from an operator", OperatorBounds, reqWith(func(r *Request) { r.Duration = year }), ""},
		{"past a year from an operator", OperatorBounds, reqWith(func(r *Request) { r.Duration = MaxWindow + time.Second }), "duration"},
		{"a long identifier", CallerBounds, reqWith(func(r *Request) { r.Identifier = long }), "identifier"},
		{"a long identifier, digested", digesting, reqWith(func(r *Request) { r.Identifier = long }), ""},
		{"a negative cost from an operator", OperatorBounds, reqWith(func(r *Request) { r.Cost = -1 }), "cost"},
		{"a reserved report", OperatorBounds, reqWith(func(r *Request) { r.Reserve, r.Report = true, true }), "reserve"},
		{"slots of a limit of 0 from a caller", CallerBounds, acqWith(func(a *Acquisition) { a.Limit = 0 }), "limit"},
		{"slots of a limit of 0 from an operator", OperatorBounds, acqWith(func(a *Acquisition) { a.Limit = 0 }), ""},
		{"a lease of half a second", OperatorBounds, acqWith(func(a *Acquisition) { a.Lease = 500 * time.Millisecond }), "lease"},
		{"slots of a long identifier, digested", digesting, acqWith(func(a *Acquisition) { a.Identifier = long }), ""},
		{"no slots", OperatorBounds, acqWith(func(a *Acquisition) { a.Cost = 0 }), "cost"},
		{"a hold of a limit of 0", OperatorBounds, holdWith(func(h *Hold) { h.Limit = 0 }), "limit"},
		{"a hold of a negative amount", OperatorBounds, holdWith(func(h *Hold) { h.Amount = -1 }), "amount"},
		{"a hold of a year", OperatorBounds, holdWith(func(h *Hold) { h.Duration = year }), ""},
	} {
		err := tc.check(tc.bounds)
		var ve *invalid.Error
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v, want accepted", tc.name, err)
		case tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field):
			t.Errorf("%s: %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
	// A batch refuses reservations, and a batch decided together reports.
	r := Request{Namespace: "ns", Identifier: "id", Limit: 1, Duration: time.Second, Reserve: true, Cost: 1}
	if err := CheckInBatch(&r, false); err == nil {
		t.Error("a reservation in a batch was accepted")
	}
	r.Reserve, r.Report = false, true
	if err := CheckInBatch(&r, false); err != nil {
		t.Errorf("a report in a batch: %v", err)
	}
	if err := CheckInBatch(&r, true); err == nil {
		t.Error("a report in a batch decided together was accepted")
	}
}

func reqWith(change func(*Request)) func(Bounds) error {
	return func(b Bounds) error {
		r := Request{Namespace: "ns", Identifier: "id", Limit: 10, Duration: time.Second, Cost: 1}
		change(&r)
		return b.CheckRequest(&r)
	}
}

func acqWith(change func(*Acquisition)) func(Bounds) error {
	return func(b Bounds) error {
		a := Acquisition{Namespace: "ns", Identifier: "id", Limit: 10, Lease: time.Minute, Cost: 1}
		change(&a)
		return b.CheckAcquisition(&a)
	}
}

func holdWith(change func(*Hold)) func(Bounds) error {
	return func(b Bounds) error {
		h := Hold{Namespace: "ns", Identifier: "id", Limit: 10, Duration: time.Minute, Sequence: 1, Amount: 1}
		change(&h)
		return b.CheckHold(&h)
	}
}
