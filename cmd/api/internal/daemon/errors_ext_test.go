package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

// TestErrorsAreJSON: a Connect call without a content type is answered 415
// with a JSON body naming the types taken (connect-go alone answers an
// empty body, which curl shows as nothing), and /json answers its errors
// in JSON too.
func TestErrorsAreJSON(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct{ path, contentType, body, want string }{
		{"/ratelimit.v1.RatelimitService/Limit", "", `{}`, "content-type: must be application/json"},
		{"/ratelimit.v1.RatelimitService/Limit", "text/plain", `{}`, "content-type: must be application/json"},
		{"/json", "application/json", `{}`, "descriptors: must hold"},
	} {
		req, _ := http.NewRequest(http.MethodPost, ts.url+tc.path, strings.NewReader(tc.body))
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct{ Code, Message string }
		if err := json.Unmarshal(raw, &out); err != nil || resp.Header.Get("Content-Type") != "application/json" ||
			out.Code != "invalid_argument" || !strings.HasPrefix(out.Message, tc.want) {
			t.Errorf("POST %s (%q): %d %q %s, want a JSON error starting %q", tc.path, tc.contentType, resp.StatusCode,
				resp.Header.Get("Content-Type"), raw, tc.want)
		}
		if tc.path != "/json" && resp.StatusCode != http.StatusUnsupportedMediaType {
			t.Errorf("POST %s (%q): %d, want 415", tc.path, tc.contentType, resp.StatusCode)
		}
	}
}

// TestUnknownMethodsAndPaths: a path under a service the server serves that
// names none of its methods is answered 404 in JSON, naming the service's
// methods (before: net/http's plain-text "404 page not found"); a gRPC
// client is answered the status unimplemented with that message, by
// connect-go and grpc-go alike; a path under no service is answered 404
// in JSON saying what the port serves, and unknown service to a gRPC
// client.
func TestUnknownMethodsAndPaths(t *testing.T) {
	ts := startServer(t)
	for _, tc := range []struct{ path, want string }{
		{"/ratelimit.v1.RatelimitService/Limt", `unknown method "Limt": ratelimit.v1.RatelimitService has Limit, MultiLimit, BatchLimit, Settle, Acquire, Release, Extend, SetOverride, GetOverride, ListOverrides, DeleteOverride`},
		{"/ratelimit.v1.RatelimitService/limit", `unknown method "limit" (method names are case-sensitive: Limit): ratelimit.v1.RatelimitService has Limit, `},
		{"/ratelimit.v1.KeyService/Create", `unknown method "Create": ratelimit.v1.KeyService has CreateKey, ListKeys, UpdateKey, RevokeKey`},
		{"/ratelimit.v1.AuditService/List", `unknown method "List": ratelimit.v1.AuditService has ListAuditLog`},
		{"/ratelimit.v1.AnalyticsService/Get", `unknown method "Get": ratelimit.v1.AnalyticsService has `},
		{"/envoy.service.ratelimit.v3.RateLimitService/Should", `unknown method "Should": envoy.service.ratelimit.v3.RateLimitService has ShouldRateLimit`},
		{"/ratelimit.v1.RatelimitService/", `missing method after /ratelimit.v1.RatelimitService/: ratelimit.v1.RatelimitService has Limit, `},
	} {
		code, raw := ts.post(t, tc.path, "", strings.NewReader(`{}`))
		var out struct{ Code, Message string }
		if err := json.Unmarshal(raw, &out); err != nil || code != http.StatusNotFound || out.Code != "unimplemented" ||
			!strings.HasPrefix(out.Message, tc.want) {
			t.Errorf("POST %s: %d %s, want 404 unimplemented %q", tc.path, code, raw, tc.want)
		}
	}
	code, raw := ts.post(t, "/nope", "", strings.NewReader(`{}`))
	var out struct{ Code, Message string }
	if err := json.Unmarshal(raw, &out); err != nil || code != http.StatusNotFound || out.Code != "not_found" {
		t.Errorf("POST /nope: %d %s, want 404 not_found in JSON", code, raw)
	}
	for _, served := range []string{`no route for POST "/nope"`, "ratelimit.v1.RatelimitService", "ratelimit.v1.KeyService",
		"ratelimit.v1.AuditService", "ratelimit.v1.AnalyticsService", "envoy.service.ratelimit.v3.RateLimitService",
		"POST /v2/ratelimit.limit, /v2/ratelimit.multiLimit", "POST /json", "GET /dashboard", "GET /healthz, /readyz, /healthcheck, /metrics"} {
		if !strings.Contains(out.Message, served) {
			t.Errorf("POST /nope: %q does not name %q", out.Message, served)
		}
	}

	// gRPC clients: connect-go's on h2c, and grpc-go's (as grpcurl is).
	ctx := context.Background()
	limt := connect.NewClient[ratelimitv1.LimitRequest, ratelimitv1.LimitResponse](ts.h2c,
		ts.url+"/ratelimit.v1.RatelimitService/Limt", connect.WithGRPC())
	_, err := limt.CallUnary(ctx, connect.NewRequest(&ratelimitv1.LimitRequest{}))
	if connect.CodeOf(err) != connect.CodeUnimplemented || !strings.Contains(err.Error(), `unknown method "Limt": ratelimit.v1.RatelimitService has Limit`) {
		t.Errorf("connect-go gRPC client, Limt: %v, want unimplemented naming the methods", err)
	}
	conn, err := grpc.NewClient(strings.TrimPrefix(ts.url, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	err = conn.Invoke(ctx, "/ratelimit.v1.RatelimitService/Limt", &ratelimitv1.LimitRequest{}, new(ratelimitv1.LimitResponse))
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented ||
		!strings.HasPrefix(st.Message(), `unknown method "Limt": ratelimit.v1.RatelimitService has Limit`) {
		t.Errorf("grpc-go client, Limt: %v, want unimplemented naming the methods", err)
	}
	err = conn.Invoke(ctx, "/ratelimit.v1.NoService/Limit", &ratelimitv1.LimitRequest{}, new(ratelimitv1.LimitResponse))
	if st, _ := status.FromError(err); st.Code() != codes.Unimplemented ||
		!strings.HasPrefix(st.Message(), `unknown service "ratelimit.v1.NoService": this port serves ratelimit.v1.RatelimitService`) {
		t.Errorf("grpc-go client, an unknown service: %v, want unimplemented naming the services", err)
	}
	// The known method still works for both.
	if _, err := ratelimitv1connect.NewRatelimitServiceClient(ts.h2c, ts.url, connect.WithGRPC()).Limit(ctx,
		connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: "n", Identifier: "i", Limit: 1, Duration: 60000})); err != nil {
		t.Errorf("Limit after the unknown ones: %v", err)
	}
}

// TestWrongHTTPMethod: a GET (or any method but POST) of an RPC, a v2
// route or /json is answered 405 with Allow: POST and a JSON body saying
// so (before: connect-go's empty 405, net/http's plain text); a POST of
// /healthz 405 with Allow: GET, HEAD.
func TestWrongHTTPMethod(t *testing.T) {
	ts := startServer(t, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a")
	for _, tc := range []struct{ method, path, allow, want string }{
		{http.MethodGet, "/ratelimit.v1.RatelimitService/Limit", "POST", "method: must be POST, got GET"},
		{http.MethodGet, "/ratelimit.v1.KeyService/ListKeys", "POST", "method: must be POST, got GET"},
		{http.MethodDelete, "/ratelimit.v1.RatelimitService/DeleteOverride", "POST", "method: must be POST, got DELETE"},
		{http.MethodGet, envoyrls.Procedure, "POST", "method: must be POST, got GET"},
		{http.MethodGet, "/v2/ratelimit.limit", "POST", "method: must be POST, got GET"},
		{http.MethodGet, "/json", "POST", "method: must be POST, got GET"},
		{http.MethodPost, "/healthz", "GET, HEAD", "method: must be GET or HEAD, got POST"},
	} {
		req, _ := http.NewRequest(tc.method, ts.url+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+tokA)
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var out struct{ Code, Message string }
		if err := json.Unmarshal(raw, &out); err != nil || resp.StatusCode != http.StatusMethodNotAllowed ||
			resp.Header.Get("Allow") != tc.allow || resp.Header.Get("Content-Type") != "application/json" ||
			out.Code != "unimplemented" || !strings.HasPrefix(out.Message, tc.want) {
			t.Errorf("%s %s: %d Allow %q %s, want 405 Allow %q and %q", tc.method, tc.path, resp.StatusCode,
				resp.Header.Get("Allow"), raw, tc.allow, tc.want)
		}
	}
}

// TestInvalidUTF8AndOutOfRange: a string that is not valid UTF-8 is
// refused naming its field and the byte (before: "body: must be a JSON
// object of the RPC's request" on Connect, "body: must be valid UTF-8"
// on v2, the decoder's text in plain text on /json), and an integer past
// its field's range is refused naming the field and the range (before:
// "must be an integer"), on Connect JSON, Unkey's v2 routes and Envoy's
// /json alike.
func TestInvalidUTF8AndOutOfRange(t *testing.T) {
	ts := startServer(t)
	const int64Range = "out of range: must be from -9223372036854775808 to 9223372036854775807 (a 64-bit integer), got "
	for _, tc := range []struct {
		path, body string
		want       string // the message (Connect, /json) or error detail (v2)
	}{
		{"/ratelimit.v1.RatelimitService/Limit", "{\"namespace\":\"sms\xff\",\"identifier\":\"i\",\"limit\":1,\"duration\":1000}",
			"namespace: must be valid UTF-8; byte 0xff is not"},
		{"/ratelimit.v1.RatelimitService/MultiLimit", "{\"limits\":[{\"namespace\":\"n\",\"identifier\":\"a\xc3\",\"limit\":1,\"duration\":1000}]}",
			"limits[0].identifier: must be valid UTF-8; byte 0xc3 is not"},
		{"/ratelimit.v1.RatelimitService/Limit", `{"namespace":"n","identifier":"i","limit":9223372036854775808,"duration":1000}`,
			"limit: " + int64Range + "9223372036854775808"},
		{"/ratelimit.v1.RatelimitService/Limit", `{"namespace":"n","identifier":"i","limit":1,"duration":"-9223372036854775809"}`,
			"duration: " + int64Range + "-9223372036854775809"},
		{"/ratelimit.v1.RatelimitService/ListOverrides", `{"namespace":"n","limit":5000000000}`,
			"limit: out of range: must be from -2147483648 to 2147483647 (a 32-bit integer), got 5000000000"},
		{"/v2/ratelimit.limit", "{\"namespace\":\"sms\xff\",\"identifier\":\"i\",\"limit\":1,\"duration\":1000}",
			"body.namespace: must be valid UTF-8; byte 0xff is not"},
		{"/v2/ratelimit.multiLimit", "[{\"namespace\":\"n\",\"identifier\":\"a\xc3\",\"limit\":1,\"duration\":1000}]",
			"body[0].identifier: must be valid UTF-8; byte 0xc3 is not"},
		{"/v2/ratelimit.limit", `{"namespace":"n","identifier":"i","limit":9223372036854775808,"duration":1000}`,
			"body.limit: " + int64Range + "9223372036854775808"},
		{"/json", "{\"domain\":\"d\xff\",\"descriptors\":[{\"entries\":[{\"key\":\"k\",\"value\":\"v\"}]}]}",
			"domain: must be valid UTF-8; byte 0xff is not"},
		{"/json", `{"domain":"d","hitsAddend":9223372036854775808,"descriptors":[{"entries":[{"key":"k","value":"v"}]}]}`,
			"hitsAddend: out of range: must be from 0 to 4294967295 (an unsigned 32-bit integer), got 9223372036854775808"},
		{"/json", `{"domain":"d","descriptors":[{"hitsAddend":18446744073709551616,"entries":[{"key":"k","value":"v"}]}]}`,
			"descriptors[0].hitsAddend: out of range: must be from 0 to 18446744073709551615 (an unsigned 64-bit integer), got 18446744073709551616"},
	} {
		code, raw := ts.post(t, tc.path, "", strings.NewReader(tc.body))
		var out struct {
			Message string
			Error   struct{ Detail string }
		}
		err := json.Unmarshal(raw, &out)
		if got := out.Message + out.Error.Detail; err != nil || code != http.StatusBadRequest || got != tc.want {
			t.Errorf("%s %q: %d %s, want 400 %q", tc.path, tc.body, code, raw, tc.want)
		}
	}
}
