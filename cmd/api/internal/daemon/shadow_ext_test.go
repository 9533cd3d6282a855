package daemon_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
)

// TestShadowLimitOverTheWire: a shadow Limit over Connect JSON is
// admitted past its limit and says so (shadowDenied), a BatchLimit's and
// a MultiLimit's shadow entries alike, and the metrics count the shadow
// denials apart.
func TestShadowLimitOverTheWire(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_ANALYTICS_FLUSH_INTERVAL=100ms")
	const body = `{"namespace":"rollout","identifier":"u","limit":1,"duration":2592000000,"shadow":true}`
	for i, want := range []bool{false, true} {
		code, out := ts.call(t, "Limit", tokA, body)
		if code != 200 || out["success"] != true || out["shadowDenied"] != want {
			t.Fatalf("shadow call %d: %d %v, want admitted, shadowDenied %v", i, code, out, want)
		}
	}
	code, out := ts.call(t, "BatchLimit", tokA, `{"limits":[`+body+`,{"namespace":"rollout","identifier":"u","limit":1,"duration":2592000000}]}`)
	results, _ := out["results"].([]any)
	if code != 200 || len(results) != 2 {
		t.Fatalf("batch: %d %v", code, out)
	}
	if r := results[0].(map[string]any); r["success"] != true || r["shadowDenied"] != true {
		t.Fatalf("batch, the shadow entry: %v", r)
	}
	if r := results[1].(map[string]any); r["success"] != false || r["shadowDenied"] != false {
		t.Fatalf("batch, the enforced entry: %v", r)
	}
	code, out = ts.call(t, "MultiLimit", tokA, `{"limits":[`+body+`,{"namespace":"rollout","identifier":"v","limit":1,"duration":2592000000}]}`)
	if code != 200 || out["passed"] != true {
		t.Fatalf("a multi whose shadow entry is past its limit: %d %v, want passed", code, out)
	}
	code, out = ts.call(t, "Limit", tokA, `{"namespace":"rollout","identifier":"r","limit":1,"duration":2592000000,"shadow":true,"reserve":true}`)
	if code != 400 || out["message"] != "shadow: must not be set with reserve: a shadow decision reserves nothing" {
		t.Fatalf("a shadow reservation: %d %v", code, out)
	}
	// The analytics count the shadow denials apart: u was shadow-denied
	// three times (the second Limit, the batch's and the multi's shadow
	// entries) and denied once (the batch's enforced entry); u's first
	// call and v passed.
	var series, top string
	poll.Until(t, 10*time.Second, "the analytics to count the shadow denials", func() bool {
		_, out := getRatelimits(t, ts, tokA, "rollout")
		series, top = fmt.Sprint(out["series"]), fmt.Sprint(out["top"])
		return strings.Contains(series, "shadowDenied:3")
	})
	if !strings.Contains(series, "denied:1 passed:2 shadowDenied:3") || !strings.Contains(top, "denied:1 identifier:u passed:1 shadowDenied:3") {
		t.Fatalf("analytics: series %s, top %s; want 2 passed, 1 denied and 3 shadow-denied, u named with them", series, top)
	}
}
