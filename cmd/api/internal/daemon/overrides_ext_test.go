package daemon_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
)

// TestOverridesOverTheAPI sets, reads, lists and deletes overrides over
// Connect JSON on an in-memory server, and checks that decisions take the
// override's limit and duration and name it.
func TestOverridesOverTheAPI(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b")
	limit := func(token, id string) map[string]any {
		t.Helper()
		_, out := ts.call(t, "Limit", token, `{"namespace":"api","identifier":"`+id+`","limit":100,"duration":2592000000}`)
		return out
	}
	code, out := ts.call(t, "SetOverride", tokA, `{"namespace":"api","identifier":"user_42","limit":2,"duration":2592000000}`)
	if code != http.StatusOK {
		t.Fatalf("SetOverride: %d %v", code, out)
	}
	ov := out["override"].(map[string]any)
	id := ov["id"].(string)
	_, out = ts.call(t, "SetOverride", tokA, `{"namespace":"api","identifier":"bot_*","limit":1,"duration":2592000000}`)
	patternID := out["override"].(map[string]any)["id"].(string)
	for i, want := range []bool{true, true, false} {
		if out := limit(tokA, "user_42"); out["success"] != want || out["limit"] != "2" || out["overrideId"] != id {
			t.Fatalf("call %d on an overridden identifier: %v, want success %v, limit 2, overrideId %s", i, out, want, id)
		}
	}
	if out := limit(tokA, "bot_7"); out["overrideId"] != patternID || out["limit"] != "1" {
		t.Fatalf("an identifier a pattern matches: %v", out)
	}
	if out := limit(tokA, "user_7"); out["overrideId"] != "" || out["limit"] != "100" {
		t.Fatalf("an identifier without an override: %v", out)
	}
	if out := limit(tokB, "user_42"); out["overrideId"] != "" || out["limit"] != "100" {
		t.Fatalf("another workspace took ws_a's override: %v", out)
	}
	// MultiLimit names the override of each entry.
	_, out = ts.call(t, "MultiLimit", tokA, `{"limits":[{"namespace":"api","identifier":"bot_9","limit":100,"duration":2592000000},
		{"namespace":"api","identifier":"user_7","limit":100,"duration":2592000000}]}`)
	results := out["results"].([]any)
	if results[0].(map[string]any)["overrideId"] != patternID || results[1].(map[string]any)["overrideId"] != "" {
		t.Fatalf("MultiLimit: %v", out)
	}

	if _, out := ts.call(t, "GetOverride", tokA, `{"namespace":"api","identifier":"user_42"}`); out["override"].(map[string]any)["limit"] != "2" {
		t.Fatalf("GetOverride: %v", out)
	}
	for i := range 12 {
		ts.call(t, "SetOverride", tokA, fmt.Sprintf(`{"namespace":"paged","identifier":"id%02d","limit":5,"duration":60000}`, i))
	}
	_, page1 := ts.call(t, "ListOverrides", tokA, `{"namespace":"paged","limit":10}`)
	_, page2 := ts.call(t, "ListOverrides", tokA, `{"namespace":"paged","limit":10,"cursor":"`+page1["cursor"].(string)+`"}`)
	if len(page1["overrides"].([]any)) != 10 || len(page2["overrides"].([]any)) != 2 || page2["cursor"] != "" {
		t.Fatalf("pages: %v / %v", page1, page2)
	}

	if code, out := ts.call(t, "DeleteOverride", tokA, `{"namespace":"api","identifier":"user_42"}`); code != http.StatusOK {
		t.Fatalf("DeleteOverride: %d %v", code, out)
	}
	if out := limit(tokA, "user_42"); out["overrideId"] != "" || out["limit"] != "100" {
		t.Fatalf("after the delete: %v, want the caller's limit again", out)
	}
	for _, c := range []struct{ method, body string }{
		{"GetOverride", `{"namespace":"api","identifier":"user_42"}`},
		{"DeleteOverride", `{"namespace":"api","identifier":"user_42"}`},
	} {
		if code, out := ts.call(t, c.method, tokA, c.body); code != http.StatusNotFound || out["code"] != "not_found" {
			t.Fatalf("%s of a missing override: %d %v, want not_found", c.method, code, out)
		}
	}
	for _, c := range []struct{ body, message string }{
		{`{"namespace":"api","identifier":"x","limit":-1,"duration":60000}`, "limit: must be between 0 (block) and 9007199254740992"},
		{`{"namespace":"api","identifier":"*","limit":1,"duration":60000}`, `identifier: must hold a character besides * ("*" alone only in a shadow override without a limit, which switches the namespace to shadow)`},
		{`{"namespace":"api","identifier":"x","duration":60000}`, "limit: missing: SetOverrideRequest needs it (unless shadow is given)"},
		{`{"namespace":"api","identifier":"x","limit":3,"shadow":true}`, "duration: missing: a shadow override with a limit or burst of its own needs its duration (without limit, duration and burst it keeps the requests' own)"},
		{`{"namespace":"api","identifier":"x","limit":1,"duration":5}`, "duration: must be between 1000 and 2592000000 milliseconds"},
	} {
		if code, out := ts.call(t, "SetOverride", tokA, c.body); code != http.StatusBadRequest || out["message"] != c.message {
			t.Fatalf("SetOverride %s: %d %v, want invalid_argument %q", c.body, code, out, c.message)
		}
	}
	if code, out := ts.call(t, "ListOverrides", tokA, `{"namespace":"paged","cursor":"!!"}`); code != http.StatusBadRequest {
		t.Fatalf("a bad cursor: %d %v", code, out)
	}
}

// TestOverridesAcrossRegions sets an override on a process of region a: it
// reaches region b's process within the poll interval (shortened here) and a
// process started afterwards, through MySQL.
func TestOverridesAcrossRegions(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	start := func(region string) *testServer {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_OVERRIDES_POLL_INTERVAL=100ms")
	}
	a, b := start("a"), start("b")
	body := `{"namespace":"api","identifier":"vip","limit":5,"duration":2592000000,"cost":0}`
	if _, out := a.call(t, "SetOverride", "", `{"namespace":"api","identifier":"vip","limit":1000,"duration":2592000000}`); out["override"] == nil {
		t.Fatalf("SetOverride: %v", out)
	}
	if _, out := a.call(t, "Limit", "", body); out["limit"] != "1000" {
		t.Fatalf("the process that took the change: %v, want it applied at once", out)
	}
	set := time.Now()
	for {
		_, out := b.call(t, "Limit", "", body)
		if out["limit"] == "1000" {
			break
		}
		if time.Since(set) > 5*time.Second {
			t.Fatalf("region b still decides with %v after 5 s", out["limit"])
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("region b applied the override %v after it was set (poll interval 100 ms)", time.Since(set).Round(10*time.Millisecond))
	if err := b.close(); err != nil {
		t.Fatal(err)
	}
	restarted := start("b")
	if _, out := restarted.call(t, "Limit", "", body); out["limit"] != "1000" {
		t.Fatalf("a process started after the change: %v, want the override from its first request", out)
	}
}
