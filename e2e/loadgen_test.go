package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/load"
)

// TestLoadgenBooksWaits: loadgen's -algorithm and -max-wait drive booked
// waits on every model that books, against a real API process: 400
// requests on two keys of 50 a minute (a bucket's: 50 a second), each
// past its limit booked ahead while what it waits for fits in a minute,
// and the rest denied.
func TestLoadgenBooksWaits(t *testing.T) {
	ts := startServer(t, "UNKEY_REGION=loadgen")
	for _, alg := range []string{"sliding_window", "fixed_window", "token_bucket"} {
		window := int64(60_000)
		if alg == "token_bucket" {
			window = 1_000
		}
		res, err := load.Run(context.Background(), load.Options{URLs: []string{ts.url}, Protocol: "json", Concurrency: 4,
			Requests: 400, Keys: 2, Limit: 50, WindowMs: window, Namespace: "loadgen_" + alg, Algorithm: alg,
			MaxWaitMs: 60_000, MaxDuration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if res.Failed > 0 || res.Booked == 0 || res.Booked > res.Passed || res.Denied == 0 {
			t.Errorf("%s: %+v, want some passed requests booked ahead, some denied, none failed", alg, res)
		}
		t.Logf("%s: %d passed, %d of them booked, %d denied", alg, res.Passed, res.Booked, res.Denied)
	}
}
