package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

// TestTwoProcessesOneRegion runs two real API servers on one Redis: what A
// accepted is reflected in B's decisions for a cell B has not seen, and a
// process restarted mid-window does not admit budget that was spent.
func TestTwoProcessesOneRegion(t *testing.T) {
	r := testserver.StartRedis(t)
	a := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	b := startServer(t, "UNKEY_REDIS_URL="+r.URL())
	body := `{"namespace":"sms.sign_up","identifier":"user_42","limit":10,"duration":2592000000}`
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
	// A cell B already holds: B made one request on it, then A spends the
	// rest. Once B's last read is older than the freshness interval (1 s),
	// B's next request starts a background refresh and decides from memory;
	// the refresh lands within a replay tick, and B denies from then on.
	warm := `{"namespace":"sms.sign_up","identifier":"user_7","limit":10,"duration":2592000000}`
	if _, out := b.call(t, "Limit", "", warm); out["success"] != true {
		t.Fatalf("B's first request denied: %v", out)
	}
	for i := 0; i < 9; i++ {
		a.call(t, "Limit", "", warm)
	}
	time.Sleep(time.Second + 50*time.Millisecond)
	b.call(t, "Limit", "", warm) // starts the refresh
	poll.Until(t, 2*time.Second, "B to see what A spent on a cell B already held", func() bool {
		_, out := b.call(t, "Limit", "", warm)
		return out["success"] == false
	})

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
	poll.Until(t, 5*time.Second, fmt.Sprintf("Redis to hold %d for %q", want, part), func() bool {
		key, err := r.Do("KEYS", "*"+part+"*")
		if err != nil || key == "" || strings.Contains(key, "\n") {
			return false
		}
		v, _ := r.Do("GET", key)
		n, _ := strconv.Atoi(v)
		return n == want
	})
}
