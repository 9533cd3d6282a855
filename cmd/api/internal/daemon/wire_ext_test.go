package daemon_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestSmallAnswersAreNotCompressed: a client that accepts gzip gets a Limit
// answer (tens of bytes) uncompressed, and a large BatchLimit answer
// compressed.
func TestSmallAnswersAreNotCompressed(t *testing.T) {
	ts := startServer(t)
	encoding := func(method, body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, ts.url+"/ratelimit.v1.RatelimitService/"+method, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept-Encoding", "gzip")
		resp, err := ts.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", method, resp.StatusCode)
		}
		return resp.Header.Get("Content-Encoding")
	}
	if enc := encoding("Limit", `{"namespace":"n","identifier":"a","limit":10,"duration":60000}`); enc != "" {
		t.Fatalf("a Limit answer was sent with Content-Encoding %q, want it uncompressed", enc)
	}
	var entries []string
	for i := range 100 {
		entries = append(entries, fmt.Sprintf(`{"namespace":"n","identifier":"id%d","limit":10,"duration":60000}`, i))
	}
	if enc := encoding("BatchLimit", `{"limits":[`+strings.Join(entries, ",")+`]}`); enc != "gzip" {
		t.Fatalf("a BatchLimit answer of 100 results was sent with Content-Encoding %q, want gzip", enc)
	}
}
