package main

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
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
