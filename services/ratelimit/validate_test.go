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
