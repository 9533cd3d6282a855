package main

import (
	"context"
	"errors"
	"testing"
	"time"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// FuzzLimitRequest feeds arbitrary bodies through the API's JSON decoding,
// conversion and the limiter. It must never panic, and a request that is
// rejected must count nothing: no window appears for it.
func FuzzLimitRequest(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"sms.sign_up","identifier":"user_42","limit":5,"duration":60000}`,
		`{"namespace":"n","identifier":"i","limit":"9007199254740992","duration":"2592000000","cost":"9007199254740992"}`,
		`{"namespace":"n","identifier":"i","limit":1,"duration":"-9223372036854775808","cost":-1}`,
		`{"namespace":"\u0000","identifier":"\ud800","limit":1e3,"duration":1000}`,
		`{"limits":[]}`,
		`{}`,
		`[`,
	} {
		f.Add([]byte(seed))
	}
	codec := jsonCodec{name: "json"}
	f.Fuzz(func(t *testing.T, body []byte) {
		limiter, err := ratelimit.New("fuzz")
		if err != nil {
			t.Fatal(err)
		}
		var msg ratelimitv1.LimitRequest
		if err := codec.Unmarshal(body, &msg); err != nil {
			return
		}
		req := toRequest("ws", &msg)
		resp, err := limiter.Limit(context.Background(), req)
		if err != nil {
			var ve *ratelimit.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("Limit returned %v, want a validation error", err)
			}
			if n := limiter.ActiveWindows(); n != 0 {
				t.Fatalf("a rejected request created %d windows", n)
			}
			return
		}
		if req.Validate() != nil {
			t.Fatalf("Limit accepted a request Validate rejects: %+v", req)
		}
		if resp.Remaining < 0 || resp.Remaining > req.Limit || resp.RetryAfter < 0 ||
			resp.RetryAfter > 2*req.Duration+time.Millisecond {
			t.Fatalf("impossible answer %+v for %+v", resp, req)
		}
	})
}
