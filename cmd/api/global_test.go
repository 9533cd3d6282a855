package main

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/dbtest"
	"github.com/unkeyed/ratelimit/internal/testserver"
)

// TestTwoRegions runs two regions, each with its own Redis and two API
// processes, on one MariaDB. Usage above the floor in region a reaches both
// processes of region b within one flush and one sync interval (10 s each,
// plus up to 20 % jitter each).
func TestTwoRegions(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the 10 s flush and sync intervals")
	}
	m, _ := dbtest.Start(t)
	ra, rb := testserver.StartRedis(t), testserver.StartRedis(t)
	start := func(region string, r *testserver.Redis) *testServer {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_REDIS_URL="+r.URL(), "UNKEY_MYSQL_DSN="+m.DSN)
	}
	a1, a2 := start("a", ra), start("a", ra)
	b1, b2 := start("b", rb), start("b", rb)

	body := `{"namespace":"api","identifier":"user_42","limit":10,"duration":2592000000}`
	peek := `{"namespace":"api","identifier":"user_42","limit":10,"duration":2592000000,"cost":0}`
	for i := 0; i < 6; i++ {
		srv := []*testServer{a1, a2}[i%2]
		if _, out := srv.call(t, "Limit", "", body); out["success"] != true {
			t.Fatalf("region a denied request %d of 6: %v", i, out)
		}
	}
	spent := time.Now()
	bound := 2 * time.Duration(float64(10*time.Second)*1.2)
	for _, b := range []*testServer{b1, b2} {
		for {
			_, out := b.call(t, "Limit", "", peek)
			if out["remaining"] == "4" {
				break
			}
			if time.Since(spent) > bound+5*time.Second {
				t.Fatalf("region b still sees %v remaining %v after region a spent 6 of 10", out["remaining"], time.Since(spent))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	took := time.Since(spent)
	t.Logf("region b saw region a's usage after %v (bound: flush + sync + jitter = %v)", took, bound)
	if took > bound+time.Second {
		t.Errorf("convergence took %v, longer than one flush and one sync interval with jitter (%v)", took, bound)
	}
	// Region b now admits what is left of the limit, spread over its two
	// processes, which share counts through their Redis: near the limit a key
	// is strict and each decision reads Redis first, at most once per
	// strictRefreshInterval (100 ms), so requests further apart than that
	// see each other.
	admitted := 0
	for i := 0; i < 10; i++ {
		srv := []*testServer{b1, b2}[i%2]
		if _, out := srv.call(t, "Limit", "", body); out["success"] == true {
			admitted++
		}
		time.Sleep(150 * time.Millisecond)
	}
	if admitted != 4 {
		t.Fatalf("region b admitted %d of the 4 left, want 4", admitted)
	}
}
