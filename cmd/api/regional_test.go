package main

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testserver"
)

// TestTwoProcessesOneRegion runs two real API servers on one Redis: what A
// accepted is reflected in B's decisions for a cell B has not seen, and a
// process restarted mid-window does not admit budget that was spent.
func TestTwoProcessesOneRegion(t *testing.T) {
	r := testserver.StartRedis(t)
	a := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	b := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	body := `{"namespace":"sms.sign_up","identifier":"user_42","limit":10,"duration":60000}`
	for i := 0; i < 6; i++ {
		if _, out := a.call(t, "Limit", "", body); out["success"] != true {
			t.Fatalf("A denied request %d: %v", i, out)
		}
	}
	waitForRedis(t, r, "user_42", 6)
	admitted := 0
	for i := 0; i < 10; i++ {
		if _, out := b.call(t, "Limit", "", body); out["success"] == true {
			admitted++
		}
	}
	if admitted != 4 {
		t.Fatalf("B admitted %d after A spent 6 of 10, want 4", admitted)
	}
	// A restarted process reads the spent budget back.
	if err := a.close(); err != nil {
		t.Fatal(err)
	}
	waitForRedis(t, r, "user_42", 10)
	restarted := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	if status, out := restarted.call(t, "Limit", "", body); status != http.StatusOK || out["success"] != false {
		t.Fatalf("restarted process: %d %v, want a denial", status, out)
	}
}

// waitForRedis waits until the one key whose name contains part holds want.
func waitForRedis(t *testing.T, r *testserver.Redis, part string, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		key, err := r.Do("RANDOMKEY")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(key, part) {
			v, err := r.Do("GET", key)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := strconv.Atoi(v); n == want {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis never held %d for %q", want, part)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
