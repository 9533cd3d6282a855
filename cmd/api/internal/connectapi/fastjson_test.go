package connectapi

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// FuzzFastLimitRequest: whatever the fast parser accepts, protojson (as the
// JSON codec runs it) reads the same.
func FuzzFastLimitRequest(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"n","identifier":"a","limit":10,"duration":60000}`,
		`{"namespace":"n","identifier":"a","limit":"10","duration":"60000","cost":"0"}`,
		` { "identifier" : "é" , "namespace":"n","limit":-1,"duration":1, "cost": 5 } `,
		`{}`, `{"limit":"1.5"}`, `{"limit":"01"}`, `{"cost":null}`, `{"limit":" 1"}`, `{"retryAfter":1}`,
		`{"identifier":"a\u0041"}`, `{"NAMESPACE":"n"}`, `{"limit":99999999999999999999}`, `{"limit":1e3}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast ratelimitv1.LimitRequest
		if !fastLimitRequest(body, &fast) {
			return
		}
		var slow ratelimitv1.LimitRequest
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &slow); err != nil {
			t.Fatalf("fast accepted %q, protojson refused it: %v", body, err)
		}
		if !proto.Equal(&fast, &slow) {
			t.Fatalf("%q: fast %v, protojson %v", body, &fast, &slow)
		}
	})
}

// TestLimitResponseJSON: the appended answer reads back, with protojson, as
// the message it was written from, and spells every field as protojson
// with EmitUnpopulated does.
func TestLimitResponseJSON(t *testing.T) {
	for _, m := range []*ratelimitv1.LimitResponse{
		{Success: true, Limit: 10, Remaining: 9, Reset_: 1795317060000},
		{Limit: 1 << 53, RetryAfter: 41857, OverrideId: "ovr_6f1c0a"},
		{OverrideId: "odd<id>\"é"},
	} {
		got := appendLimitResponse(nil, m)
		var back ratelimitv1.LimitResponse
		if err := protojson.Unmarshal(got, &back); err != nil || !proto.Equal(&back, m) {
			t.Fatalf("%s read back as %v (%v), want %v", got, &back, err, m)
		}
		want, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
		var a, b map[string]any
		json.Unmarshal(got, &a)
		json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("appended %s, protojson %s", got, want)
		}
	}
}

// FuzzLimitRequest feeds arbitrary bodies through the route's JSON
// decoding, conversion and the limiter. It must never panic, and a request
// that is rejected must count nothing: no window appears for it.
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
	codec := transport.JSONCodec(codecs)
	f.Fuzz(func(t *testing.T, body []byte) {
		limiter, err := ratelimit.New("fuzz")
		if err != nil {
			t.Fatal(err)
		}
		var msg ratelimitv1.LimitRequest
		if err := codec.Unmarshal(body, &msg); err != nil {
			return
		}
		req, err := toRequest(&msg)
		if err != nil {
			if _, ok := invalid.As(err); !ok {
				t.Fatalf("toRequest returned %v, want a validation error", err)
			}
			return
		}
		req.Workspace = "ws"
		resp, err := limiter.Limit(context.Background(), req)
		if err != nil {
			var ve *invalid.Error
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
