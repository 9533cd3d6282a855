package daemon_test

import (
	"testing"
)

// TestShadowLimitOverTheWire: a shadow Limit over Connect JSON is
// admitted past its limit and says so (shadowDenied), a BatchLimit's and
// a MultiLimit's shadow entries alike, and the metrics count the shadow
// denials apart.
func TestShadowLimitOverTheWire(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
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
}
