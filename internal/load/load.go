// Package load drives the rate limit API at a fixed concurrency with a
// bounded number of requests and measures throughput and latency. It serves
// cmd/loadgen and the end-to-end fault tests.
package load

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
)

// Result is what a run reports (also as JSON with -json).
type Result struct {
	Requests   int64         `json:"requests"`
	Passed     int64         `json:"passed"`
	Denied     int64         `json:"denied"`
	Failed     int64         `json:"failed"`
	Retried    int64         `json:"retried"`
	Elapsed    time.Duration `json:"elapsedNs"`
	Throughput float64       `json:"throughputPerSecond"`
	P50        time.Duration `json:"p50Ns"`
	P99        time.Duration `json:"p99Ns"`
	P999       time.Duration `json:"p999Ns"`
	Max        time.Duration `json:"maxNs"`
	FirstError string        `json:"firstError,omitempty"`
}

// Options configure a run.
type Options struct {
	URLs        []string
	Protocol    string // json or grpc
	Token       string
	Concurrency int
	Requests    int
	MaxDuration time.Duration
	Keys        int
	Limit       int64
	WindowMs    int64
	Namespace   string
	// Observe, if set, is called after every request (from many
	// goroutines at once).
	Observe func(Sample)
}

// Sample is one request's outcome.
type Sample struct {
	Start   time.Time
	Latency time.Duration
	// URL is the API that answered (after failover), or the last one tried.
	URL        string
	Identifier string
	Passed     bool
	Err        error
}

// Run drives the API and returns what it saw.
func Run(ctx context.Context, o Options) (Result, error) {
	if o.Protocol != "json" && o.Protocol != "grpc" {
		return Result{}, fmt.Errorf("-protocol: must be json or grpc, got %q", o.Protocol)
	}
	if o.Concurrency < 1 || o.Requests < 1 || o.Keys < 1 || len(o.URLs) == 0 {
		return Result{}, errors.New("-c, -n and -keys must be at least 1, and -url must name a URL")
	}
	var protocols http.Protocols
	var copts []connect.ClientOption
	if o.Protocol == "grpc" {
		protocols.SetUnencryptedHTTP2(true)
		copts = append(copts, connect.WithGRPC())
	} else {
		protocols.SetHTTP1(true)
		copts = append(copts, connect.WithProtoJSON())
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &protocols, MaxIdleConnsPerHost: o.Concurrency}}
	clients := make([]ratelimitv1connect.RatelimitServiceClient, len(o.URLs))
	for i, u := range o.URLs {
		clients[i] = ratelimitv1connect.NewRatelimitServiceClient(hc, strings.TrimSpace(u), copts...)
	}
	// The run stops starting requests at the deadline and lets those under
	// way finish, so that stopping never shows up as failures.
	deadline := time.Now().Add(o.MaxDuration)
	var (
		next                          atomic.Int64
		passed, denied, failed, retry atomic.Int64
		firstErr                      sync.Once
		res                           Result
	)
	lat := make([]time.Duration, o.Requests)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < o.Concurrency; w++ {
		wg.Go(func() {
			for ctx.Err() == nil && time.Now().Before(deadline) {
				i := next.Add(1) - 1
				if i >= int64(o.Requests) {
					return
				}
				req := connect.NewRequest(&ratelimitv1.LimitRequest{Namespace: o.Namespace,
					Identifier: "user_" + strconv.Itoa(int(i)%o.Keys), Limit: o.Limit, Duration: o.WindowMs})
				if o.Token != "" {
					req.Header().Set("Authorization", "Bearer "+o.Token)
				}
				t0 := time.Now()
				var resp *connect.Response[ratelimitv1.LimitResponse]
				var err error
				var used int
				for attempt := 0; attempt < len(clients); attempt++ {
					used = (int(i) + attempt) % len(clients)
					resp, err = clients[used].Limit(ctx, req)
					if err == nil || !undelivered(err) {
						break
					}
					retry.Add(1) // not delivered: try the next process
				}
				lat[i] = time.Since(t0)
				if o.Observe != nil {
					o.Observe(Sample{Start: t0, Latency: lat[i], URL: o.URLs[used], Identifier: req.Msg.Identifier,
						Passed: err == nil && resp.Msg.Success, Err: err})
				}
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.Do(func() { res.FirstError = err.Error() })
				case resp.Msg.Success:
					passed.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Passed, res.Denied, res.Failed, res.Retried = passed.Load(), denied.Load(), failed.Load(), retry.Load()
	res.Requests = res.Passed + res.Denied + res.Failed
	done := lat[:res.Requests]
	sort.Slice(done, func(a, b int) bool { return done[a] < done[b] })
	if n := len(done); n > 0 {
		res.P50, res.P99, res.P999, res.Max = done[n*50/100], done[n*99/100], done[n*999/1000], done[n-1]
	}
	res.Throughput = float64(res.Requests) / res.Elapsed.Seconds()
	return res, nil
}

// undelivered reports whether err means the request never reached a
// process that could answer it (refused or broken connection), which a load
// balancer retries on another process.
func undelivered(err error) bool {
	if connect.CodeOf(err) == connect.CodeUnavailable {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "broken pipe") ||
		strings.Contains(msg, "connection reset")
}
