package daemon_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// TestNoIdentifierAliasing: a long identifier is counted under its digest,
// and a caller who sends that digest, on v2 or Connect, gets a counter of
// its own; an override set for the digest's text never decides the long
// identifier.
func TestNoIdentifierAliasing(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	long := strings.Repeat("v", 300)
	sum := sha256.Sum256([]byte(long))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	v2 := func(id string, cost int) map[string]any {
		t.Helper()
		status, raw := ts.post(t, "/v2/ratelimit.limit", tokA, strings.NewReader(
			`{"namespace":"n","identifier":"`+id+`","limit":3,"duration":60000,"cost":`+itoa(cost)+`}`))
		var out struct{ Data map[string]any }
		if status != http.StatusOK || json.Unmarshal(raw, &out) != nil {
			t.Fatalf("v2 limit %.20s…: %d %s", id, status, raw)
		}
		return out.Data
	}
	if got := v2(long, 1)["remaining"]; got != 2.0 {
		t.Fatalf("the long identifier: remaining %v, want 2", got)
	}
	if got := v2(digest, 3)["success"]; got != true {
		t.Fatalf("the digest sent on v2 was denied: it shares the long identifier's counter")
	}
	// The same identifier is the same counter on either route.
	if status, out := ts.call(t, "Limit", tokA, `{"namespace":"n","identifier":"`+digest+`","limit":3,"duration":60000,"cost":0}`); status != 200 || out["remaining"] != "0" {
		t.Fatalf("the digest sent on Connect: %d %v, want the counter v2 spent for it (0 left)", status, out)
	}
	if got := v2(long, 0)["remaining"]; got != 2.0 {
		t.Fatalf("the long identifier after callers sent its digest: remaining %v, want still 2", got)
	}
	// An override for the digest's text applies to that identifier only.
	if status, out := ts.call(t, "SetOverride", tokA, `{"namespace":"n","identifier":"`+digest+`","limit":1000,"duration":60000}`); status != 200 {
		t.Fatalf("SetOverride: %d %v", status, out)
	}
	if d := v2(long, 0); d["limit"] != 3.0 || d["overrideId"] != nil {
		t.Fatalf("the long identifier took the digest's override: %v", d)
	}
	if d := v2(digest, 0); d["limit"] != 1000.0 {
		t.Fatalf("the digest's own override did not apply on v2: %v", d)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

// TestInternalErrorsAreOpaque: with MySQL refusing connections, an override
// call fails with a generic message and a request id, on Connect and on v2;
// the log has the database's error under the same id.
func TestInternalErrorsAreOpaque(t *testing.T) {
	var log loopback.Log
	dead := "u:p@tcp(127.0.0.1:" + strconv.Itoa(testserver.FreePort(t)) + ")/ratelimit"
	ts := startServerLogging(t, slog.New(slog.NewTextHandler(&log, nil)), "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_MYSQL_DSN="+dead)
	status, out := ts.call(t, "SetOverride", tokA, `{"namespace":"n","identifier":"a","limit":10,"duration":60000}`)
	msg, _ := out["message"].(string)
	id := regexp.MustCompile(`req_[0-9a-f]+`).FindString(msg)
	if status != http.StatusInternalServerError || out["code"] != "internal" || id == "" || strings.Contains(msg, "127.0.0.1") || strings.Contains(msg, "dial") {
		t.Fatalf("SetOverride with MySQL down: %d %v, want a generic internal error with a request id", status, out)
	}
	if !strings.Contains(log.String(), id) || !strings.Contains(log.String(), "connection refused") {
		t.Fatalf("the log has no line with %s and the database's error:\n%s", id, log.String())
	}
	status, raw := ts.post(t, "/v2/ratelimit.setOverride", tokA, strings.NewReader(`{"namespace":"n","identifier":"a","limit":10,"duration":60000}`))
	var v2 struct {
		Meta  struct{ RequestID string }
		Error struct{ Detail string }
	}
	json.Unmarshal(raw, &v2)
	if status != http.StatusInternalServerError || v2.Meta.RequestID == "" || strings.Contains(string(raw), "127.0.0.1") || strings.Contains(string(raw), "dial") {
		t.Fatalf("v2 setOverride with MySQL down: %d %s, want a generic 500 with a request id", status, raw)
	}
	if !strings.Contains(log.String(), v2.Meta.RequestID) {
		t.Fatalf("the log has no line with %s:\n%s", v2.Meta.RequestID, log.String())
	}
}

// TestOverrideWithLimitZeroBlocks: Unkey documents an override with limit 0
// as the way to block an identifier. Every request it applies to is
// denied, on every route, and nothing is counted, not even for the other
// entries of a MultiLimit it fails.
func TestOverrideWithLimitZeroBlocks(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	if status, raw := ts.post(t, "/v2/ratelimit.setOverride", tokA, strings.NewReader(`{"namespace":"n","identifier":"banned_*","limit":0,"duration":60000}`)); status != http.StatusOK {
		t.Fatalf("setOverride with limit 0: %d %s", status, raw)
	}
	status, raw := ts.post(t, "/v2/ratelimit.limit", tokA, strings.NewReader(`{"namespace":"n","identifier":"banned_1","limit":10,"duration":60000}`))
	if status != http.StatusOK || !strings.Contains(string(raw), `"success":false`) || !strings.Contains(string(raw), `"remaining":0`) || strings.Contains(string(raw), `"reset":0`) {
		t.Fatalf("v2 limit of a blocked identifier: %d %s, want denied with a reset", status, raw)
	}
	if _, out := ts.call(t, "Limit", tokA, `{"namespace":"n","identifier":"banned_2","limit":10,"duration":60000}`); out["success"] != false || out["overrideId"] == "" {
		t.Fatalf("Connect Limit of a blocked identifier: %v", out)
	}
	multi := `{"limits":[{"namespace":"n","identifier":"free","limit":10,"duration":60000},{"namespace":"n","identifier":"banned_3","limit":10,"duration":60000}]}`
	if _, out := ts.call(t, "MultiLimit", tokA, multi); out["passed"] != false {
		t.Fatalf("MultiLimit with a blocked entry: %v, want it failed", out)
	}
	if _, out := ts.call(t, "Limit", tokA, `{"namespace":"n","identifier":"free","limit":10,"duration":60000,"cost":0}`); out["remaining"] != "10" {
		t.Fatalf("the other entry of the failed MultiLimit: %v, want nothing counted", out)
	}
	_, out := ts.call(t, "BatchLimit", tokA, multi)
	results, _ := out["results"].([]any)
	if len(results) != 2 || results[0].(map[string]any)["success"] != true || results[1].(map[string]any)["success"] != false {
		t.Fatalf("BatchLimit with a blocked entry: %v, want the free one admitted and the blocked one denied", out)
	}
	if status, raw := ts.post(t, "/v2/ratelimit.setOverride", tokA, strings.NewReader(`{"namespace":"n","identifier":"x","limit":-1,"duration":60000}`)); status != http.StatusBadRequest {
		t.Fatalf("a negative limit: %d %s, want 400", status, raw)
	}
}

// TestPatternCapOverTheAPI: past UNKEY_MAX_OVERRIDE_PATTERNS_PER_NAMESPACE a
// new pattern is refused with resource_exhausted on Connect and 429 on v2.
func TestPatternCapOverTheAPI(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_MAX_OVERRIDE_PATTERNS_PER_NAMESPACE=2")
	for _, id := range []string{"a*", "b*"} {
		if status, out := ts.call(t, "SetOverride", tokA, `{"namespace":"n","identifier":"`+id+`","limit":1,"duration":60000}`); status != 200 {
			t.Fatalf("pattern %s: %d %v", id, status, out)
		}
	}
	if status, out := ts.call(t, "SetOverride", tokA, `{"namespace":"n","identifier":"c*","limit":1,"duration":60000}`); status != http.StatusTooManyRequests ||
		!strings.Contains(fmt.Sprint(out["message"]), "UNKEY_MAX_OVERRIDE_PATTERNS_PER_NAMESPACE") {
		t.Fatalf("a third pattern: %d %v, want resource_exhausted naming the cap", status, out)
	}
	if status, raw := ts.post(t, "/v2/ratelimit.setOverride", tokA, strings.NewReader(`{"namespace":"n","identifier":"c*","limit":1,"duration":60000}`)); status != http.StatusTooManyRequests {
		t.Fatalf("a third pattern on v2: %d %s, want 429", status, raw)
	}
}
