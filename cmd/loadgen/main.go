// Command loadgen drives the rate limit API at a fixed concurrency with a
// bounded number of requests and reports throughput, latency percentiles
// and the server CPU per call (from the servers' own
// process_cpu_seconds_total, so two builds can be compared with the same
// client). It speaks Connect JSON (HTTP/1.1), gRPC (h2c), Unkey's v2
// limit route (HTTP/1.1), Envoy's ShouldRateLimit (gRPC; start the
// server with UNKEY_RLS_CONFIG=cmd/loadgen/rls.yaml) or Envoy's quota
// reports (gRPC streams, the same rules), spreads requests over one or more API URLs and,
// like a load balancer, retries a request that could not be delivered on
// the next URL.
//
//	loadgen -url http://127.0.0.1:7070 -protocol json -c 32 -n 100000 -keys 1000 -limit 100
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/unkeyed/ratelimit/internal/load"
)

func main() {
	var o load.Options
	var urls, metrics string
	var asJSON bool
	flag.StringVar(&urls, "url", "http://127.0.0.1:7070", "comma-separated API base URLs, used round robin")
	flag.StringVar(&metrics, "metrics-url", "", "comma-separated base URLs of the servers' /metrics, for the CPU per call (default: -url)")
	flag.StringVar(&o.Protocol, "protocol", "json", "json (Connect JSON over HTTP/1.1), grpc (gRPC over h2c), v2 (/v2/ratelimit.limit over HTTP/1.1), rls (Envoy's ShouldRateLimit over gRPC) or rlqs (Envoy's quota reports over gRPC streams, a call one report)")
	flag.StringVar(&o.RLSDomain, "domain", "loadgen", "with -protocol rls or rlqs: the domain of every request")
	flag.IntVar(&o.RLQSRequestsPerReport, "requests-per-report", 100, "with -protocol rlqs: the requests each report counts (an Envoy's 5 s of a bucket)")
	flag.IntVar(&o.RLSDescriptors, "descriptors", 1, "with -protocol rls: descriptors per request")
	flag.StringVar(&o.Token, "token", "", "bearer token")
	flag.IntVar(&o.Concurrency, "c", 32, "concurrent requests")
	flag.IntVar(&o.Requests, "n", 100_000, "total requests (the run stops at -n or -max-duration)")
	flag.DurationVar(&o.MaxDuration, "max-duration", time.Minute, "longest the run may take")
	flag.IntVar(&o.Keys, "keys", 1000, "distinct identifiers")
	flag.Int64Var(&o.Limit, "limit", 1<<40, "limit of every request")
	flag.Int64Var(&o.WindowMs, "duration", 60_000, "window of every request, in ms")
	flag.StringVar(&o.Namespace, "namespace", "loadgen", "namespace of every request")
	flag.StringVar(&o.Algorithm, "algorithm", "sliding_window", "with -protocol json or grpc: sliding_window, fixed_window or token_bucket (-limit per -duration, burst -limit)")
	flag.Int64Var(&o.MaxWaitMs, "max-wait", 0, "with -protocol json or grpc: max_wait of every request, in ms (0: none): a request the limit would deny is booked ahead when it fits within it")
	flag.BoolVar(&asJSON, "json", false, "print the result as JSON")
	flag.Parse()
	o.URLs = strings.Split(urls, ",")
	if metrics != "" {
		o.MetricsURLs = strings.Split(metrics, ",")
	}
	res, err := load.Run(context.Background(), o)
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
	if o.MaxWaitMs > 0 {
		fmt.Printf("booked ahead %d of the passed\n", res.Booked)
	}
	fmt.Printf("latency p50 %v, p99 %v, p99.9 %v, max %v\n", res.P50, res.P99, res.P999, res.Max)
	if res.ServerCPU > 0 {
		fmt.Printf("server CPU %v: %v per call\n", res.ServerCPU.Round(time.Millisecond), res.CPUPerCall)
		if o.Protocol == "rls" {
			fmt.Printf("%v per descriptor\n", res.CPUPerCall/time.Duration(o.RLSDescriptors))
		}
		if o.Protocol == "rlqs" {
			fmt.Printf("%v per reported request\n", res.CPUPerCall/time.Duration(o.RLQSRequestsPerReport))
		}
	}
	if res.FirstError != "" {
		fmt.Println("first error:", res.FirstError)
	}
}
