package unkeyv2_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
)

const tokA = "tok_unkeyv2_a_0123456789"

// tokLimitN is a key of ws_a that may only decide in namespace n.
const tokLimitN = "tok_unkeyv2_limit_n_0123456789"

// server is the API, as package daemon builds it, on loopback.
type server struct {
	url string
}

func serve(t *testing.T) *server {
	t.Helper()
	keysFile := daemontest.KeysFile(t, daemontest.Key{Secret: tokLimitN, Workspace: "ws_a", Permissions: []string{"ratelimit.n.limit"}})
	s := daemontest.Start(t, nil, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a", "UNKEY_AUTH_KEYS_FILE="+keysFile)
	return &server{url: s.URL}
}

// post posts body to path with token (none if "") and returns the status
// and the body of the answer.
func (s *server) post(t *testing.T, path, token string, body io.Reader) (int, []byte) {
	t.Helper()
	return loopback.Post(t, s.url+path, token, "application/json", body)
}

// TestUnkeyV2Shapes checks what the SDKs do not exercise: identifiers up to
// 512 characters, the 1 MiB body cap, malformed JSON, auth before the body.
func TestUnkeyV2Shapes(t *testing.T) {
	ts := serve(t)
	post := func(path, token, body string) (int, string) {
		t.Helper()
		status, raw := ts.post(t, path, token, strings.NewReader(body))
		return status, string(raw)
	}
	long := strings.Repeat("é", 512)
	body := `{"namespace":"n","identifier":"` + long + `","limit":1,"duration":60000}`
	if code, out := post("/v2/ratelimit.limit", tokA, body); code != 200 || !strings.Contains(out, `"success":true`) {
		t.Fatalf("a 512-character identifier: %d %s", code, out)
	}
	if code, out := post("/v2/ratelimit.limit", tokA, body); code != 200 || !strings.Contains(out, `"success":false`) {
		t.Fatalf("the same 512-character identifier again: %d %s, want it counted", code, out)
	}
	other := `{"namespace":"n","identifier":"` + long[:len(long)-2] + `x","limit":1,"duration":60000}`
	if code, out := post("/v2/ratelimit.limit", tokA, other); code != 200 || !strings.Contains(out, `"success":true`) {
		t.Fatalf("another long identifier: %d %s, want its own counter", code, out)
	}
	tooLong := `{"namespace":"n","identifier":"` + long + `x","limit":1,"duration":60000}`
	if code, out := post("/v2/ratelimit.limit", tokA, tooLong); code != 400 || !strings.Contains(out, `"location":"body.identifier"`) {
		t.Fatalf("513 characters: %d %s, want 400 naming body.identifier", code, out)
	}
	if code, out := post("/v2/ratelimit.limit", tokA, `{"namespace":`); code != 400 || !strings.Contains(out, `"type":"https://unkey.com/docs/errors/unkey/application/invalid_input"`) {
		t.Fatalf("malformed JSON: %d %s", code, out)
	}
	if code, out := post("/v2/ratelimit.limit", "", `{"namespace":`); code != 401 || !strings.Contains(out, `"requestId":"req_`) {
		t.Fatalf("no token: %d %s, want 401 before the body is decoded", code, out)
	}
	big := `{"namespace":"n","identifier":"` + strings.Repeat("x", transport.MaxRequestBytes) + `"}`
	if code, out := post("/v2/ratelimit.limit", tokA, big); code != 400 || !strings.Contains(out, "must be at most 1048576 bytes") {
		t.Fatalf("a body over 1 MiB: %d %.200s", code, out)
	}
	if code, out := post("/v2/ratelimit.multiLimit", tokA, `[]`); code != 400 || !strings.Contains(out, "must hold 1 to 100 limits") {
		t.Fatalf("an empty multiLimit: %d %s", code, out)
	}
	bad := `[{"namespace":"n","identifier":"a","limit":1,"duration":60000},{"namespace":"n","identifier":"b","limit":1,"duration":60000,"cost":-1}]`
	if code, out := post("/v2/ratelimit.multiLimit", tokA, bad); code != 400 || !strings.Contains(out, `"location":"body[1].cost"`) {
		t.Fatalf("a bad entry of multiLimit: %d %s, want 400 naming body[1].cost", code, out)
	}
}

// TestUnkeyRoutesDecodeStrictly: the v2 routes refuse what encoding/json
// alone would take, with a 400 in Unkey's shape naming the field and no Go
// type, and count nothing.
func TestUnkeyRoutesDecodeStrictly(t *testing.T) {
	ts := serve(t)
	for _, tc := range []struct {
		name, path, body, location string
	}{
		{"a case-variant key", "/v2/ratelimit.limit", `{"namespace":"n","identifier":"attacker","IDENTIFIER":"victim","limit":10,"duration":60000,"Cost":5}`, "body.IDENTIFIER"},
		{"a duplicate key", "/v2/ratelimit.limit", `{"namespace":"n","identifier":"attacker","identifier":"victim","limit":10,"duration":60000}`, "body.identifier"},
		{"an unknown field", "/v2/ratelimit.limit", `{"namespace":"n","identifier":"a","limit":10,"duration":60000,"async":true}`, "body.async"},
		{"a lone surrogate", "/v2/ratelimit.limit", `{"namespace":"n","identifier":"a\ud800","limit":10,"duration":60000}`, "body.identifier"},
		{"a lone low surrogate", "/v2/ratelimit.setOverride", `{"namespace":"n","identifier":"\udc00x","limit":10,"duration":60000}`, "body.identifier"},
		{"invalid UTF-8", "/v2/ratelimit.limit", "{\"namespace\":\"n\",\"identifier\":\"a\xff\",\"limit\":10,\"duration\":60000}", "body.identifier"},
		{"a string for a number", "/v2/ratelimit.limit", `{"namespace":"n","identifier":"a","limit":"10","duration":60000}`, "body.limit"},
		{"an entry's unknown field", "/v2/ratelimit.multiLimit", `[{"namespace":"n","identifier":"a","limit":10,"duration":60000},{"namespace":"n","identifier":"b","limit":10,"duration":60000,"Namespace":"x"}]`, "body[1].Namespace"},
		{"an entry's bad type", "/v2/ratelimit.multiLimit", `[{"namespace":"n","identifier":"a","limit":10,"duration":60000},{"namespace":"n","identifier":"b","limit":10,"duration":60000,"cost":1.5}]`, "body[1].cost"},
		{"getOverride with a limit", "/v2/ratelimit.getOverride", `{"namespace":"n","identifier":"a","limit":1}`, "body.limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, raw := ts.post(t, tc.path, tokA, strings.NewReader(tc.body))
			var out struct {
				Error struct {
					Detail string
					Errors []struct{ Location, Message string }
				}
			}
			if err := json.Unmarshal(raw, &out); err != nil || status != http.StatusBadRequest || len(out.Error.Errors) != 1 || out.Error.Errors[0].Location != tc.location {
				t.Fatalf("%d %s, want 400 naming %s", status, raw, tc.location)
			}
			if strings.Contains(string(raw), "unkey") && strings.Contains(string(raw), "Request.") || strings.Contains(string(raw), "Go ") {
				t.Fatalf("the error names a Go type: %s", raw)
			}
		})
	}
	// Nothing was counted for "victim" or "attacker".
	for _, id := range []string{"victim", "attacker"} {
		status, raw := ts.post(t, "/v2/ratelimit.limit", tokA, strings.NewReader(`{"namespace":"n","identifier":"`+id+`","limit":10,"duration":60000,"cost":0}`))
		if status != http.StatusOK || !strings.Contains(string(raw), `"remaining":10`) {
			t.Fatalf("%s after the refused calls: %d %s, want 10 remaining", id, status, raw)
		}
	}
	// A surrogate pair is a character, and an escaped backslash before u is not an escape.
	status, raw := ts.post(t, "/v2/ratelimit.limit", tokA, strings.NewReader(`{"namespace":"n","identifier":"\ud83d\ude00 \\ud800","limit":10,"duration":60000}`))
	if status != http.StatusOK {
		t.Fatalf("a surrogate pair and an escaped backslash: %d %s", status, raw)
	}
}

// TestAnswers: every route's answer in Unkey's shape, as its OpenAPI spec
// gives it, including the errors a client branches on.
func TestAnswers(t *testing.T) {
	ts := serve(t)
	call := func(path, token, body string) (int, map[string]any) {
		t.Helper()
		status, raw := ts.post(t, path, token, strings.NewReader(body))
		var out map[string]any
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("%s: %d %s is not JSON", path, status, raw)
		}
		if meta, _ := out["meta"].(map[string]any); !strings.HasPrefix(meta["requestId"].(string), "req_") {
			t.Fatalf("%s: %s has no meta.requestId", path, raw)
		}
		return status, out
	}
	limit := `{"namespace":"n","identifier":"u","limit":2,"duration":60000}`
	if status, out := call("/v2/ratelimit.limit", tokA, limit); status != 200 ||
		out["data"].(map[string]any)["remaining"] != 1.0 || out["data"].(map[string]any)["success"] != true {
		t.Fatalf("limit: %d %v", status, out)
	}
	status, out := call("/v2/ratelimit.multiLimit", tokA, `[`+limit+`,{"namespace":"n","identifier":"v","limit":1,"duration":60000,"cost":2}]`)
	data := out["data"].(map[string]any)
	if limits := data["limits"].([]any); status != 200 || data["passed"] != false || len(limits) != 2 ||
		limits[1].(map[string]any)["passed"] != false || limits[0].(map[string]any)["identifier"] != "u" {
		t.Fatalf("multiLimit: %d %v", status, out)
	}
	for _, id := range []string{"a", "b", "c"} {
		if status, out := call("/v2/ratelimit.setOverride", tokA, `{"namespace":"n","identifier":"`+id+`","limit":9,"duration":60000}`); status != 200 ||
			out["data"].(map[string]any)["overrideId"] == "" {
			t.Fatalf("setOverride: %d %v", status, out)
		}
	}
	status, out = call("/v2/ratelimit.listOverrides", tokA, `{"namespace":"n","limit":2}`)
	page := out["pagination"].(map[string]any)
	if status != 200 || len(out["data"].([]any)) != 2 || page["hasMore"] != true || page["cursor"] == "" {
		t.Fatalf("listOverrides: %d %v", status, out)
	}
	status, out = call("/v2/ratelimit.listOverrides", tokA, `{"namespace":"n","limit":2,"cursor":"`+page["cursor"].(string)+`"}`)
	if status != 200 || len(out["data"].([]any)) != 1 || out["pagination"].(map[string]any)["hasMore"] != false {
		t.Fatalf("listOverrides, second page: %d %v", status, out)
	}
	if status, out := call("/v2/ratelimit.getOverride", tokA, `{"namespace":"n","identifier":"b"}`); status != 200 ||
		out["data"].(map[string]any)["limit"] != 9.0 {
		t.Fatalf("getOverride: %d %v", status, out)
	}
	if status, _ := call("/v2/ratelimit.deleteOverride", tokA, `{"namespace":"n","identifier":"b"}`); status != 200 {
		t.Fatalf("deleteOverride: %d", status)
	}
	for _, tc := range []struct {
		path, token, body string
		status            int
		typ               string
	}{
		{"/v2/ratelimit.getOverride", tokA, `{"namespace":"n","identifier":"b"}`, 404, "data/ratelimit_override_not_found"},
		{"/v2/ratelimit.limit", "", limit, 401, "authentication/missing"},
		{"/v2/ratelimit.limit", "tok_unknown_0123456789", limit, 401, "authentication/key_not_found"},
		{"/v2/ratelimit.limit", tokA, `{"namespace":"n","identifier":"u","limit":0,"duration":60000}`, 400, "application/invalid_input"},
		{"/v2/ratelimit.limit", tokLimitN, `{"namespace":"other","identifier":"perm","limit":5,"duration":60000}`, 403, "authorization/insufficient_permissions"},
		{"/v2/ratelimit.multiLimit", tokLimitN, `[{"namespace":"n","identifier":"perm","limit":5,"duration":60000},{"namespace":"other","identifier":"perm","limit":5,"duration":60000}]`, 403, "authorization/insufficient_permissions"},
		{"/v2/ratelimit.setOverride", tokLimitN, `{"namespace":"n","identifier":"perm","limit":1000000,"duration":60000}`, 403, "authorization/insufficient_permissions"},
		{"/v2/ratelimit.getOverride", tokLimitN, `{"namespace":"n","identifier":"perm"}`, 403, "authorization/insufficient_permissions"},
		{"/v2/ratelimit.deleteOverride", tokLimitN, `{"namespace":"n","identifier":"perm"}`, 403, "authorization/insufficient_permissions"},
		{"/v2/ratelimit.listOverrides", tokLimitN, `{"namespace":"n"}`, 403, "authorization/insufficient_permissions"},
	} {
		status, out := call(tc.path, tc.token, tc.body)
		e := out["error"].(map[string]any)
		if status != tc.status || e["status"] != float64(tc.status) || e["type"] != "https://unkey.com/docs/errors/unkey/"+tc.typ {
			t.Errorf("%s %s: %d %v, want %d %s", tc.path, tc.body, status, out, tc.status, tc.typ)
		}
	}
	_, out = call("/v2/ratelimit.setOverride", tokLimitN, `{"namespace":"n","identifier":"perm","limit":1000000,"duration":60000}`)
	if e := out["error"].(map[string]any); e["title"] != "Forbidden" || e["detail"] != "permission denied: this key lacks ratelimit.n.set_override" {
		t.Errorf("the detail of a denial: %v", e)
	}
	if status, out := call("/v2/ratelimit.limit", tokLimitN, `{"namespace":"n","identifier":"perm","limit":5,"duration":60000}`); status != 200 ||
		out["data"].(map[string]any)["remaining"] != 4.0 {
		t.Errorf("limit in its namespace after refused calls: %d %v, want 4 remaining (nothing counted)", status, out)
	}
	_, out = call("/v2/ratelimit.limit", tokA, `{"namespace":"n","identifier":"u","limit":0,"duration":60000}`)
	if e := out["error"].(map[string]any); e["detail"] != "body.limit: must be between 1 and 9007199254740992" {
		t.Errorf("the detail of a bad limit: %v", e)
	}
}

// TestIETFFields: a limit's answer carries RateLimit-Policy and RateLimit,
// for the application to copy onto its own.
func TestIETFFields(t *testing.T) {
	ts := serve(t)
	for i, want := range []string{`"sms.send";r=1;t=`, `"sms.send";r=0;t=`, `"sms.send";r=0;t=`} {
		req, err := http.NewRequest(http.MethodPost, ts.url+"/v2/ratelimit.limit",
			strings.NewReader(`{"namespace":"sms.send","identifier":"u","limit":2,"duration":90000}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tokA)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		policy, limit := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit")
		if resp.StatusCode != 200 || policy != `"sms.send";q=2;w=90` || !strings.HasPrefix(limit, want) {
			t.Errorf("call %d: %d, RateLimit-Policy %q, RateLimit %q; want %q…", i, resp.StatusCode, policy, limit, want)
		}
		var reset int
		if _, err := fmt.Sscanf(limit[len(want):], "%d", &reset); err != nil || reset < 1 || reset > 90 {
			t.Errorf("call %d: t=%d (%v), want 1 to 90 seconds", i, reset, err)
		}
	}
}
