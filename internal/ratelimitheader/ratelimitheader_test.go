package ratelimitheader_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/ratelimitheader"
)

func TestFields(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{ratelimitheader.Policy("api.requests", 100, time.Minute), `"api.requests";q=100;w=60`},
		{ratelimitheader.Policy("fast", 5, 100*time.Millisecond), `"fast";q=5;w=1`},
		{ratelimitheader.Limit("api.requests", 42, 16500*time.Millisecond), `"api.requests";r=42;t=17`},
		{ratelimitheader.Limit("x", -3, -time.Second), `"x";r=0;t=0`},
		{ratelimitheader.Policy(`a"b\c%d`, 1, time.Hour), `"a\"b\\c%25d";q=1;w=3600`},
		{ratelimitheader.Policy("ünï\x00", 1, time.Second), `"%C3%BCn%C3%AF%00";q=1;w=1`},
		{ratelimitheader.Policy("big", 1<<53, time.Second), `"big";q=999999999999999;w=1`},
		{ratelimitheader.Limit("big", 1<<53-1, time.Second), `"big";r=999999999999999;t=1`},
	} {
		if tc.got != tc.want {
			t.Errorf("got %s, want %s", tc.got, tc.want)
		}
	}
}

func Example() {
	fmt.Println(ratelimitheader.PolicyField+":", ratelimitheader.Policy("sms.send", 10, time.Minute))
	fmt.Println(ratelimitheader.LimitField+":", ratelimitheader.Limit("sms.send", 3, 42*time.Second))
	// Output:
	// RateLimit-Policy: "sms.send";q=10;w=60
	// RateLimit: "sms.send";r=3;t=42
}

func TestSet(t *testing.T) {
	h := http.Header{}
	ratelimitheader.Set(h, "api", 100, time.Minute, 42, 17*time.Second)
	if got := h.Values("RateLimit-Policy"); len(got) != 1 || got[0] != `"api";q=100;w=60` {
		t.Errorf("RateLimit-Policy %q", got)
	}
	if got := h.Values("RateLimit"); len(got) != 1 || got[0] != `"api";r=42;t=17` {
		t.Errorf("RateLimit %q", got)
	}
}
