// Command loadgen drives the rate limit API at a fixed concurrency with a
// bounded number of requests and reports throughput and latency percentiles.
// It speaks Connect JSON (HTTP/1.1) or gRPC (h2c), spreads requests over one
// or more API URLs and, like a load balancer, retries a request that could
// not be delivered on the next URL.
//
//	loadgen -url http://127.0.0.1:7070 -protocol json -c 32 -n 100000 -keys 1000 -limit 100
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
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
}

func main() {
	var o Options
	var urls string
	var asJSON bool
	flag.StringVar(&urls, "url", "http://127.0.0.1:7070", "comma-separated API base URLs, used round robin")
	flag.StringVar(&o.Protocol, "protocol", "json", "json (Connect JSON over HTTP/1.1) or grpc (gRPC over h2c)")
	flag.StringVar(&o.Token, "token", "", "bearer token")
	flag.IntVar(&o.Concurrency, "c", 32, "concurrent requests")
	flag.IntVar(&o.Requests, "n", 100_000, "total requests (the run stops at -n or -max-duration)")
	flag.DurationVar(&o.MaxDuration, "max-duration", time.Minute, "longest the run may take")
	flag.IntVar(&o.Keys, "keys", 1000, "distinct identifiers")
	flag.Int64Var(&o.Limit, "limit", 1<<40, "limit of every request")
	flag.Int64Var(&o.WindowMs, "duration", 60_000, "window of every request, in ms")
	flag.StringVar(&o.Namespace, "namespace", "loadgen", "namespace of every request")
	flag.BoolVar(&asJSON, "json", false, "print the result as JSON")
	flag.Parse()
	o.URLs = strings.Split(urls, ",")
	res, err := Run(context.Background(), o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	if asJSON {
		json.NewEncoder(os.Stdout).Encode(res)
		return
	}
	fmt.Printf("%d requests in %v: %.0f req/s; passed %d, denied %d, failed %d (retried %d)\n",
		res.Requests, res.Elapsed.Round(time.Millisecond), res.Throughput, res.Passed, res.Denied, res.Failed, res.Retried)
	fmt.Printf("latency p50 %v, p99 %v, p99.9 %v, max %v\n", res.P50, res.P99, res.P999, res.Max)
	if res.FirstError != "" {
		fmt.Println("first error:", res.FirstError)
	}
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
	ctx, cancel := context.WithTimeout(ctx, o.MaxDuration)
	defer cancel()
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
			for ctx.Err() == nil {
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
				for attempt := 0; attempt < len(clients); attempt++ {
					resp, err = clients[(int(i)+attempt)%len(clients)].Limit(ctx, req)
					if err == nil || connect.CodeOf(err) != connect.CodeUnavailable {
						break
					}
					retry.Add(1) // not delivered: try the next process
				}
				lat[i] = time.Since(t0)
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
