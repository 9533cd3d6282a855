package daemon_test

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
)

// TestPenaltyAcrossRegions: a penalty started by a denial on a process of
// region a blocks the identifier on region b's process within the poll
// interval (shortened here), whatever limit b is asked; it is read and
// lifted on b, lifted on a within a poll, and a block started again holds
// on a process started afterwards from its first request, through MySQL.
func TestPenaltyAcrossRegions(t *testing.T) {
	t.Parallel()
	m, _ := dbtest.Start(t)
	start := func(region string) *testServer {
		return startServer(t, "UNKEY_REGION="+region, "UNKEY_MYSQL_DSN="+m.DSN, "UNKEY_PENALTIES_POLL_INTERVAL="+penaltyPoll)
	}
	a, b := start("a"), start("b")
	offend := `{"namespace":"login","identifier":"mallory","limit":1,"duration":60000,"penalty":600000,"penaltyMax":3600000}`
	other := `{"namespace":"login","identifier":"mallory","limit":1000,"duration":60000}`
	if _, out := a.call(t, "Limit", "", offend); out["success"] != true {
		t.Fatalf("first call: %v", out)
	}
	_, out := a.call(t, "Limit", "", offend)
	if out["success"] != false || out["penalized"] != false {
		t.Fatalf("the offence: %v", out)
	}
	if ra, _ := strconv.ParseInt(out["retryAfter"].(string), 10, 64); ra < 599_000 || ra > 600_000 {
		t.Fatalf("the offence's retryAfter: %v, want the block's 600000 ms", out["retryAfter"])
	}
	offended := time.Now()
	waitFor(t, "region b to hold the block", func() bool {
		_, out := b.call(t, "Limit", "", other)
		return out["penalized"] == true && out["success"] == false
	})
	took := []time.Duration{time.Since(offended)}
	// Nine more identifiers: how long each block takes to hold in the
	// other region (docs/ACCURACY.md, "Penalties across regions").
	for i := range 9 {
		id := fmt.Sprintf("bot_%d", i)
		a.call(t, "Limit", "", strings.ReplaceAll(offend, "mallory", id))
		a.call(t, "Limit", "", strings.ReplaceAll(offend, "mallory", id))
		at := time.Now()
		waitFor(t, "region b to hold "+id+"'s block", func() bool {
			_, out := b.call(t, "Limit", "", strings.ReplaceAll(other, "mallory", id))
			return out["penalized"] == true
		})
		took = append(took, time.Since(at))
	}
	slices.Sort(took)
	t.Logf("region b held each of 10 blocks %v to %v after the offence, median %v (poll interval %s)",
		took[0].Round(time.Millisecond), took[9].Round(time.Millisecond), took[5].Round(time.Millisecond), penaltyPoll)
	if code, out := b.call(t, "GetPenalty", "", `{"namespace":"login","identifier":"mallory"}`); code != http.StatusOK || out["penalty"] == nil {
		t.Fatalf("GetPenalty on b: %d %v", code, out)
	}
	if _, out := b.call(t, "ListPenalties", "", `{"namespace":"login","after":"bot_9"}`); len(out["penalties"].([]any)) != 1 {
		t.Fatalf("ListPenalties on b: %v", out)
	}
	if code, out := b.call(t, "DeletePenalty", "", `{"namespace":"login","identifier":"mallory"}`); code != http.StatusOK {
		t.Fatalf("DeletePenalty on b: %d %v", code, out)
	}
	waitFor(t, "region a to lift the block", func() bool {
		_, out := a.call(t, "Limit", "", other)
		return out["success"] == true
	})
	if code, out := a.call(t, "GetPenalty", "", `{"namespace":"login","identifier":"mallory"}`); code != http.StatusNotFound || out["code"] != "not_found" {
		t.Fatalf("GetPenalty after the lift: %d %v", code, out)
	}
	// Offend again on a (the window is spent: one call does), then b
	// restarts.
	if _, out := a.call(t, "Limit", "", offend); out["success"] != false {
		t.Fatalf("the second offence: %v", out)
	}
	waitFor(t, "region b to hold the second block", func() bool {
		_, out := b.call(t, "Limit", "", other)
		return out["penalized"] == true
	})
	if err := b.close(); err != nil {
		t.Fatal(err)
	}
	restarted := start("b")
	if _, out := restarted.call(t, "Limit", "", other); out["penalized"] != true {
		t.Fatalf("a process started during the block: %v, want it held from the first request", out)
	}
	if code, out := a.call(t, "Limit", "", `{"namespace":"login","identifier":"x","limit":1,"duration":60000,"penalty":5}`); code != http.StatusOK {
		t.Fatalf("a 5 ms penalty: %d %v", code, out)
	}
	if code, out := a.call(t, "Limit", "", `{"namespace":"login","identifier":"x","limit":1,"duration":60000,"penalty":1000,"penaltyMax":10}`); code != http.StatusBadRequest ||
		out["message"] != "penaltyMax: must be between penalty and 2592000000 milliseconds, or 0 (doubling up to 2592000000)" {
		t.Fatalf("penalty_max under penalty: %d %v", code, out)
	}
}

// penaltyPoll is the processes' UNKEY_PENALTIES_POLL_INTERVAL.
var penaltyPoll = "100ms"

// waitFor polls ok every 20 ms until it holds, failing the test after 5 s.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 5 s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
