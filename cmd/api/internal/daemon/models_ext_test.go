package daemon_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestModelsOverConnectJSON: a Limit chooses its model as curl sends it,
// and the answer names the model that decided: a token bucket refills
// (retryAfter is when a token has), a fixed window counts to its end, a
// calendar month in Berlin resets at the next month's first midnight
// there.
func TestModelsOverConnectJSON(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	limit := func(body string) map[string]any {
		t.Helper()
		status, out := ts.call(t, "Limit", tokA, body)
		if status != 200 {
			t.Fatalf("%s: %d %v", body, status, out)
		}
		return out
	}
	// A bucket of 3 tokens refilled at one a day.
	bucket := `{"namespace":"models","identifier":"bucket","limit":1,"duration":86400000,"algorithm":"ALGORITHM_TOKEN_BUCKET","burst":3}`
	for i := range 4 {
		out := limit(bucket)
		if out["success"] != (i < 3) || out["algorithm"] != "ALGORITHM_TOKEN_BUCKET" {
			t.Fatalf("bucket call %d: %v", i, out)
		}
		if i == 3 {
			retry, _ := strconv.ParseInt(out["retryAfter"].(string), 10, 64)
			if retry < 86_400_000-60_000 || retry > 86_400_000 {
				t.Fatalf("empty bucket: retryAfter %d ms, want about a day (one token's refill)", retry)
			}
		}
	}
	// A fixed window of 30 days: 2, then denied until its end.
	fixed := `{"namespace":"models","identifier":"fixed","limit":2,"duration":2592000000,"algorithm":"ALGORITHM_FIXED_WINDOW"}`
	for i := range 3 {
		out := limit(fixed)
		reset, _ := strconv.ParseInt(out["reset"].(string), 10, 64)
		if out["success"] != (i < 2) || out["algorithm"] != "ALGORITHM_FIXED_WINDOW" || reset%2_592_000_000 != 0 {
			t.Fatalf("fixed call %d: %v", i, out)
		}
	}
	// A calendar month in Berlin.
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	nextMonth := func() int64 {
		y, m, _ := time.Now().In(berlin).Date()
		return time.Date(y, m+1, 1, 0, 0, 0, 0, berlin).UnixMilli()
	}
	month := `{"namespace":"models","identifier":"month","limit":2,"calendar":{"unit":"CALENDAR_UNIT_MONTH","timeZone":"Europe/Berlin"}}`
	for i := range 3 {
		before := nextMonth()
		out := limit(month)
		reset, _ := strconv.ParseInt(out["reset"].(string), 10, 64)
		if out["success"] != (i < 2) || out["algorithm"] != "ALGORITHM_CALENDAR" || (reset != before && reset != nextMonth()) {
			t.Fatalf("month call %d: %v, want reset %d (the next month's start in Berlin)", i, out, before)
		}
	}
	// Each limit is counted by its model (a token of UNKEY_AUTH_TOKENS
	// holds status.read, which /metrics needs).
	_, body := ts.get(t, "/metrics")
	for _, want := range []string{
		`unkey_ratelimit_limits_decided_total{model="token_bucket",outcome="passed"} 3`,
		`unkey_ratelimit_limits_decided_total{model="token_bucket",outcome="denied"} 1`,
		`unkey_ratelimit_limits_decided_total{model="fixed_window",outcome="passed"} 2`,
		`unkey_ratelimit_limits_decided_total{model="calendar",outcome="passed"} 2`,
		`unkey_ratelimit_limits_decided_total{model="calendar",outcome="denied"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	// ALGORITHM_CALENDAR names the calendar's model in a request too, and
	// every answer of a calendar's decision names it: Limit's, and each
	// entry of MultiLimit and BatchLimit beside a window's.
	named := limit(`{"namespace":"models","identifier":"named","limit":2,"algorithm":"ALGORITHM_CALENDAR","calendar":{"unit":"CALENDAR_UNIT_DAY"}}`)
	if named["success"] != true || named["algorithm"] != "ALGORITHM_CALENDAR" || named["remaining"] != "1" {
		t.Errorf("a calendar named ALGORITHM_CALENDAR: %v", named)
	}
	entries := `{"limits":[{"namespace":"models","identifier":"batch","limit":5,"calendar":{"unit":"CALENDAR_UNIT_YEAR"}},` +
		`{"namespace":"models","identifier":"batch","limit":5,"duration":60000,"algorithm":"ALGORITHM_FIXED_WINDOW"}]}`
	for _, method := range []string{"MultiLimit", "BatchLimit"} {
		status, out := ts.call(t, method, tokA, entries)
		results, _ := out["results"].([]any)
		if status != 200 || len(results) != 2 {
			t.Fatalf("%s: %d %v", method, status, out)
		}
		for i, want := range []string{"ALGORITHM_CALENDAR", "ALGORITHM_FIXED_WINDOW"} {
			if r, _ := results[i].(map[string]any); r["algorithm"] != want || r["success"] != true {
				t.Errorf("%s result %d: %v, want success by %s", method, i, r, want)
			}
		}
	}
}

// TestModelsRefuseBadValues: each model's rules name the field, in a
// Limit and in a batch's entry, and count nothing.
func TestModelsRefuseBadValues(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	const key = `"namespace":"models","identifier":"bad","limit":5`
	for _, tc := range []struct{ method, body, want string }{
		{"Limit", `{` + key + `,"calendar":{"unit":"CALENDAR_UNIT_DAY","timeZone":"Mars/Olympus"}}`, "calendar.timeZone: must be a time zone of the IANA database"},
		{"Limit", `{` + key + `,"calendar":{"timeZone":"Europe/Berlin"}}`, "calendar.unit: must be CALENDAR_UNIT_DAY, CALENDAR_UNIT_WEEK, CALENDAR_UNIT_MONTH or CALENDAR_UNIT_YEAR"},
		{"Limit", `{` + key + `,"duration":60000,"algorithm":7}`, "algorithm: must be ALGORITHM_SLIDING_WINDOW, ALGORITHM_FIXED_WINDOW, ALGORITHM_TOKEN_BUCKET or ALGORITHM_CALENDAR"},
		{"Limit", `{` + key + `,"algorithm":"ALGORITHM_CALENDAR"}`, "calendar: missing: ALGORITHM_CALENDAR counts in the periods of a calendar"},
		{"Limit", `{` + key + `,"algorithm":"ALGORITHM_CALENDAR","duration":60000}`, "calendar: missing"},
		{"Limit", `{` + key + `,"duration":60000,"calendar":{"unit":"CALENDAR_UNIT_DAY"}}`, "duration: must be omitted with a calendar"},
		{"Limit", `{` + key + `,"algorithm":"ALGORITHM_TOKEN_BUCKET","calendar":{"unit":"CALENDAR_UNIT_DAY"}}`, "calendar: must be unset with a token bucket"},
		{"Limit", `{` + key + `,"duration":60000,"burst":10}`, "burst: must be unset but with a token bucket"},
		{"Limit", `{` + key + `,"duration":60000,"algorithm":"ALGORITHM_TOKEN_BUCKET","burst":-1}`, "burst: must be between 1 and"},
		{"Limit", `{` + key + `,"duration":60000,"algorithm":"ALGORITHM_TOKEN_BUCKET","reserve":true}`, "reserve: must be false with a token bucket"},
		{"Limit", `{` + key + `}`, "duration: missing: a limit needs the length of its window"},
		{"BatchLimit", `{"limits":[{` + key + `,"duration":60000},{` + key + `,"calendar":{"unit":"CALENDAR_UNIT_WEEK","timeZone":"Nowhere"}}]}`, "limits[1].calendar.timeZone"},
		{"MultiLimit", `{"limits":[{` + key + `,"duration":60000},{` + key + `,"duration":60000,"burst":2}]}`, "limits[1].burst"},
	} {
		status, out := ts.call(t, tc.method, tokA, tc.body)
		if status != 400 || !strings.Contains(fmt.Sprint(out["message"]), tc.want) {
			t.Errorf("%s %s: %d %v, want 400 with %q", tc.method, tc.body, status, out, tc.want)
		}
	}
	// Nothing was counted: the key's window of a minute admits all 5.
	for i := range 5 {
		if _, out := ts.call(t, "Limit", tokA, `{`+key+`,"duration":60000}`); out["success"] != true {
			t.Fatalf("call %d after the refusals: %v", i, out)
		}
	}
}

// TestOverrideSetsABucketsBurst: an override's burst replaces a token
// bucket's (its limit and duration the rate), and changes no other model.
func TestOverrideSetsABucketsBurst(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	status, out := ts.call(t, "SetOverride", tokA, `{"namespace":"models","identifier":"vip","limit":1,"duration":86400000,"burst":5}`)
	if status != 200 || fmt.Sprint(out["override"].(map[string]any)["burst"]) != "5" {
		t.Fatalf("SetOverride: %d %v", status, out)
	}
	count := func(body string) (admitted int) {
		for range 8 {
			if _, out := ts.call(t, "Limit", tokA, body); out["success"] == true {
				admitted++
			}
		}
		return admitted
	}
	if n := count(`{"namespace":"models","identifier":"vip","limit":100,"duration":1000,"algorithm":"ALGORITHM_TOKEN_BUCKET","burst":2}`); n != 5 {
		t.Fatalf("a bucket under the override admitted %d at once, want its burst of 5", n)
	}
	// Unkey's v2 API has no burst: an override it sets keeps the one it has.
	if status, raw := ts.post(t, "/v2/ratelimit.setOverride", tokA,
		strings.NewReader(`{"namespace":"models","identifier":"vip","limit":2,"duration":86400000}`)); status != 200 {
		t.Fatalf("v2 setOverride: %d %s", status, raw)
	}
	if _, out := ts.call(t, "GetOverride", tokA, `{"namespace":"models","identifier":"vip"}`); fmt.Sprint(out["override"].(map[string]any)["burst"]) != "5" ||
		fmt.Sprint(out["override"].(map[string]any)["limit"]) != "2" {
		t.Fatalf("after v2's setOverride: %v, want limit 2 and the burst of 5 kept", out)
	}
	status, out = ts.call(t, "SetOverride", tokA, `{"namespace":"models","identifier":"vip","limit":1,"duration":86400000,"burst":-1}`)
	if status != 400 || !strings.Contains(fmt.Sprint(out["message"]), "burst: must be between 0") {
		t.Fatalf("a negative burst: %d %v", status, out)
	}
}
