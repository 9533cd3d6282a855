package loopback_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
)

// TestPost: Post sends the bearer token and the content type, and returns
// the status and the body.
func TestPost(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
		fmt.Fprint(w, r.Header.Get("Authorization"), "|", r.Header.Get("Content-Type"))
	}))
	defer srv.Close()
	status, body := loopback.Post(t, srv.URL, "tok", "application/json", strings.NewReader("{}"))
	if status != http.StatusTeapot || string(body) != "Bearer tok|application/json" {
		t.Fatalf("%d %q", status, body)
	}
}

// TestLog: what goroutines write, String returns.
func TestLog(t *testing.T) {
	var l loopback.Log
	done := make(chan struct{})
	for range 4 {
		go func() { fmt.Fprintln(&l, "line"); done <- struct{}{} }()
	}
	for range 4 {
		<-done
	}
	if got := strings.Count(l.String(), "line\n"); got != 4 {
		t.Fatalf("%d lines, want 4", got)
	}
}

// TestLines: only the lines that hold the string, in order.
func TestLines(t *testing.T) {
	if got := loopback.Lines("a_x 1\nb 2\nc_x 3", "_x"); got != "a_x 1\nc_x 3" {
		t.Fatalf("%q", got)
	}
}
