package daemon_test

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkNoisyNeighbour measures what one workspace hammering BatchLimit
// (1,000 entries a call, from 16 connections) does to another workspace's
// single Limit calls: the quiet and loud medians of 400 calls, and their
// ratio, with the batch gate as configured by default and with it wide
// open (the behaviour before it). Run with -benchtime 1x; docs/RELIABILITY.md
// has the figures.
func BenchmarkNoisyNeighbour(b *testing.B) {
	for _, tc := range []struct{ name, entries string }{{"gated", "0"}, {"ungated", "1000000000"}} {
		b.Run(tc.name, func(b *testing.B) {
			var quiet, loud time.Duration
			for b.Loop() {
				ts := startServer(b, "UNKEY_AUTH_TOKENS="+tokA+"=ws_a,"+tokB+"=ws_b",
					"UNKEY_BATCH_ENTRIES_IN_FLIGHT_PER_WORKSPACE="+tc.entries)
				quiet = medianLimit(b, ts, 400)
				stop := make(chan struct{})
				var batches atomic.Int64
				var wg sync.WaitGroup
				var entries []string
				for i := range 1000 {
					entries = append(entries, fmt.Sprintf(`{"namespace":"n","identifier":"hammer%d","limit":1000000000,"duration":60000}`, i))
				}
				batch := `{"limits":[` + strings.Join(entries, ",") + `]}`
				for range 16 {
					wg.Go(func() {
						client := &http.Client{}
						for {
							select {
							case <-stop:
								return
							default:
							}
							req, _ := http.NewRequest(http.MethodPost, ts.url+"/ratelimit.v1.RatelimitService/BatchLimit", strings.NewReader(batch))
							req.Header.Set("Content-Type", "application/json")
							req.Header.Set("Authorization", "Bearer "+tokA)
							if resp, err := client.Do(req); err == nil {
								io.Copy(io.Discard, resp.Body)
								resp.Body.Close()
								batches.Add(1)
							}
						}
					})
				}
				time.Sleep(500 * time.Millisecond)
				loud = medianLimit(b, ts, 400)
				close(stop)
				wg.Wait()
				ts.close()
				b.Logf("%s: %d batches; quiet p50 %v, loud p50 %v", tc.name, batches.Load(), quiet, loud)
			}
			b.ReportMetric(float64(quiet.Microseconds())/1000, "quiet-p50-ms")
			b.ReportMetric(float64(loud.Microseconds())/1000, "loud-p50-ms")
			b.ReportMetric(float64(loud)/float64(quiet), "ratio")
		})
	}
}

// medianLimit sends n Limit calls of workspace ws_b one after another and
// returns their median latency.
func medianLimit(b *testing.B, ts *testServer, n int) time.Duration {
	took := make([]time.Duration, 0, n)
	client := &http.Client{}
	for i := range n {
		req, _ := http.NewRequest(http.MethodPost, ts.url+"/ratelimit.v1.RatelimitService/Limit",
			strings.NewReader(fmt.Sprintf(`{"namespace":"n","identifier":"quiet%d","limit":10,"duration":60000}`, i%50)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+tokB)
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took = append(took, time.Since(start))
	}
	slices.Sort(took)
	return took[len(took)/2]
}
