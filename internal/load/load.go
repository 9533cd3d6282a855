// Package load drives the rate limit API at a fixed concurrency with a
// bounded number of requests and measures throughput, latency and, from the
// servers' own process_cpu_seconds_total, the server CPU each call cost. It
// serves cmd/loadgen and the end-to-end fault tests.
package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"

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
	// ServerCPU is the CPU time the servers spent during the run, by their
	// process_cpu_seconds_total (10 ms resolution), and CPUPerCall that
	// divided by the calls; zero if a server's /metrics could not be read.
	ServerCPU  time.Duration `json:"serverCpuNs"`
	CPUPerCall time.Duration `json:"cpuPerCallNs"`
	// Booked counts the passed requests that were booked ahead (answered
	// with a wait; json and grpc).
	Booked int64 `json:"booked"`
}

// Options configure a run.
type Options struct {
	URLs []string
	// Protocol is json (Connect JSON over HTTP/1.1 keep-alive), grpc
	// (gRPC over h2c), v2 (Unkey's /v2/ratelimit.limit over HTTP/1.1
	// keep-alive), rls (Envoy's ShouldRateLimit over gRPC, in domain
	// RLSDomain, with RLSDescriptors descriptors of one entry "user" each:
	// the server's UNKEY_RLS_CONFIG must have a rule for it, such as
	// cmd/loadgen/rls.yaml) or rlqs (Envoy's quota reports over gRPC
	// streams, one a worker, in domain RLSDomain: a call is one report of
	// one bucket, user=<identifier>, of RLQSRequestsPerReport requests
	// allowed in 5 s, as an Envoy reports a bucket that saw that many).
	Protocol              string
	RLSDomain             string
	RLSDescriptors        int
	RLQSRequestsPerReport int
	Token                 string
	Concurrency           int
	Requests              int
	MaxDuration           time.Duration
	Keys                  int
	Limit                 int64
	WindowMs              int64
	Namespace             string
	// Algorithm is the model of every json or grpc request: "" or
	// sliding_window, fixed_window, or token_bucket (Limit per WindowMs,
	// burst Limit).
	Algorithm string
	// MaxWaitMs, if not zero, lets every json or grpc request wait that
	// long for capacity booked ahead (max_wait); Result.Booked counts the
	// admissions that were.
	MaxWaitMs int64
	// MetricsURLs are the base URLs of the servers' /metrics, for the CPU
	// per call; URLs if empty (the gRPC-only port has none: name the main
	// port here).
	MetricsURLs []string
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
	if !slices.Contains([]string{"json", "grpc", "v2", "rls", "rlqs"}, o.Protocol) {
		return Result{}, fmt.Errorf("-protocol: must be json, grpc, v2, rls or rlqs, got %q", o.Protocol)
	}
	if o.Protocol == "rls" && (o.RLSDescriptors < 1 || o.RLSDomain == "") {
		return Result{}, errors.New("-descriptors must be at least 1 and -domain must name a domain for -protocol rls")
	}
	if o.Protocol == "rlqs" && (o.RLQSRequestsPerReport < 1 || o.RLSDomain == "") {
		return Result{}, errors.New("-requests-per-report must be at least 1 and -domain must name a domain for -protocol rlqs")
	}
	if (o.Algorithm != "" && o.Algorithm != "sliding_window" || o.MaxWaitMs != 0) && o.Protocol != "json" && o.Protocol != "grpc" {
		return Result{}, fmt.Errorf("-algorithm and -max-wait: only with -protocol json or grpc, not %s", o.Protocol)
	}
	var alg ratelimitv1.Algorithm
	switch o.Algorithm {
	case "", "sliding_window":
	case "fixed_window":
		alg = ratelimitv1.Algorithm_ALGORITHM_FIXED_WINDOW
	case "token_bucket":
		alg = ratelimitv1.Algorithm_ALGORITHM_TOKEN_BUCKET
	default:
		return Result{}, fmt.Errorf("-algorithm: must be sliding_window, fixed_window or token_bucket, got %q", o.Algorithm)
	}
	if o.Concurrency < 1 || o.Requests < 1 || o.Keys < 1 || len(o.URLs) == 0 {
		return Result{}, errors.New("-c, -n and -keys must be at least 1, and -url must name a URL")
	}
	var protocols http.Protocols
	var copts []connect.ClientOption
	if o.Protocol == "grpc" || o.Protocol == "rls" || o.Protocol == "rlqs" {
		protocols.SetUnencryptedHTTP2(true)
		copts = append(copts, connect.WithGRPC())
	} else {
		protocols.SetHTTP1(true)
		copts = append(copts, connect.WithProtoJSON())
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Protocols: &protocols, MaxIdleConnsPerHost: o.Concurrency}}
	var booked atomic.Int64 // the connect clients' booked admissions
	clients := make([]limiter, len(o.URLs))
	for i, u := range o.URLs {
		u = strings.TrimSpace(u)
		if o.Protocol == "v2" {
			clients[i] = &v2Client{hc: hc, url: u + "/v2/ratelimit.limit"}
			continue
		}
		if o.Protocol == "rlqs" {
			clients[i] = &rlqsClient{domain: o.RLSDomain, perReport: uint64(o.RLQSRequestsPerReport),
				c:       connect.NewClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse](hc, u+rlqsProcedure, copts...),
				streams: make(chan *rlqsStream, o.Concurrency), token: o.Token}
			continue
		}
		if o.Protocol == "rls" {
			clients[i] = &rlsClient{domain: o.RLSDomain, descriptors: o.RLSDescriptors,
				c: connect.NewClient[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse](hc, u+rlsProcedure, copts...)}
			continue
		}
		clients[i] = connectClient{c: ratelimitv1connect.NewRatelimitServiceClient(hc, u, copts...), booked: &booked}
	}
	metricsURLs := o.MetricsURLs
	if len(metricsURLs) == 0 {
		metricsURLs = o.URLs
	}
	metricsClient := &http.Client{Timeout: 5 * time.Second}
	cpuBefore, cpuOK := serversCPU(ctx, metricsClient, metricsURLs, o.Token)
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
					Identifier: "user_" + strconv.Itoa(int(i)%o.Keys), Limit: o.Limit, Duration: o.WindowMs,
					Algorithm: alg, MaxWait: o.MaxWaitMs})
				if o.Token != "" {
					req.Header().Set("Authorization", "Bearer "+o.Token)
				}
				t0 := time.Now()
				var ok bool
				var err error
				var used int
				for attempt := 0; attempt < len(clients); attempt++ {
					used = (int(i) + attempt) % len(clients)
					ok, err = clients[used].limit(ctx, req)
					if err == nil || !undelivered(err) {
						break
					}
					retry.Add(1) // not delivered: try the next process
				}
				lat[i] = time.Since(t0)
				if o.Observe != nil {
					o.Observe(Sample{Start: t0, Latency: lat[i], URL: o.URLs[used], Identifier: req.Msg.Identifier,
						Passed: err == nil && ok, Err: err})
				}
				switch {
				case err != nil:
					failed.Add(1)
					firstErr.Do(func() { res.FirstError = err.Error() })
				case ok:
					passed.Add(1)
				default:
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	// A stream's reports are all handled once the server ends it.
	for _, c := range clients {
		if f, ok := c.(interface{ finish() error }); ok {
			if err := f.finish(); err != nil {
				firstErr.Do(func() { res.FirstError = err.Error() })
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Passed, res.Denied, res.Failed, res.Retried = passed.Load(), denied.Load(), failed.Load(), retry.Load()
	res.Booked = booked.Load()
	res.Requests = res.Passed + res.Denied + res.Failed
	done := lat[:res.Requests]
	sort.Slice(done, func(a, b int) bool { return done[a] < done[b] })
	if n := len(done); n > 0 {
		res.P50, res.P99, res.P999, res.Max = done[n*50/100], done[n*99/100], done[n*999/1000], done[n-1]
	}
	res.Throughput = float64(res.Requests) / res.Elapsed.Seconds()
	if cpuAfter, ok := serversCPU(ctx, metricsClient, metricsURLs, o.Token); ok && cpuOK && res.Requests > 0 {
		res.ServerCPU = cpuAfter - cpuBefore
		res.CPUPerCall = res.ServerCPU / time.Duration(res.Requests)
	}
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

// limiter is one API process, as the run calls it.
type limiter interface {
	// limit sends req and reports whether it passed.
	limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (bool, error)
}

type connectClient struct {
	c      ratelimitv1connect.RatelimitServiceClient
	booked *atomic.Int64
}

func (c connectClient) limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (bool, error) {
	resp, err := c.c.Limit(ctx, req)
	if err != nil {
		return false, err
	}
	if resp.Msg.Wait > 0 {
		c.booked.Add(1)
	}
	return resp.Msg.Success, nil
}

// v2Client calls Unkey's /v2/ratelimit.limit.
type v2Client struct {
	hc  *http.Client
	url string
}

func (c *v2Client) limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (bool, error) {
	m := req.Msg
	body := `{"namespace":` + strconv.Quote(m.Namespace) + `,"identifier":` + strconv.Quote(m.Identifier) +
		`,"limit":` + strconv.FormatInt(m.Limit, 10) + `,"duration":` + strconv.FormatInt(m.Duration, 10) + `}`
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		return false, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if auth := req.Header().Get("Authorization"); auth != "" {
		hreq.Header.Set("Authorization", auth)
	}
	resp, err := c.hc.Do(hreq)
	if err != nil {
		return false, connect.NewError(connect.CodeUnavailable, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, err
	}
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("%s: %d %s", c.url, resp.StatusCode, out)
	}
	return bytes.Contains(out, []byte(`"success":true`)), nil
}

// rlsProcedure is Envoy's ShouldRateLimit.
const rlsProcedure = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"

// rlsClient calls ShouldRateLimit with descriptors descriptors, each the one
// entry user=<identifier>/<n>, as an Envoy route with that many
// rate_limits actions would.
type rlsClient struct {
	c           *connect.Client[rlsv3.RateLimitRequest, rlsv3.RateLimitResponse]
	domain      string
	descriptors int
}

func (c *rlsClient) limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (bool, error) {
	m := &rlsv3.RateLimitRequest{Domain: c.domain, Descriptors: make([]*rlcommonv3.RateLimitDescriptor, c.descriptors)}
	for j := range m.Descriptors {
		m.Descriptors[j] = &rlcommonv3.RateLimitDescriptor{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{
			{Key: "user", Value: req.Msg.Identifier + "/" + strconv.Itoa(j)}}}
	}
	r := connect.NewRequest(m)
	if auth := req.Header().Get("Authorization"); auth != "" {
		r.Header().Set("Authorization", auth)
	}
	resp, err := c.c.CallUnary(ctx, r)
	if err != nil {
		return false, err
	}
	return resp.Msg.OverallCode == rlsv3.RateLimitResponse_OK, nil
}

// rlqsProcedure is Envoy's StreamRateLimitQuotas.
const rlqsProcedure = "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas"

// rlqsClient sends Envoy's quota reports to one process, over as many
// streams as the run has workers, each used by one worker at a time.
type rlqsClient struct {
	c         *connect.Client[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	domain    string
	token     string
	perReport uint64
	streams   chan *rlqsStream // idle streams
	mu        sync.Mutex
	all       []*rlqsStream
}

// rlqsStream is one stream and the reading of its answers.
type rlqsStream struct {
	s    *connect.BidiStreamForClient[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]
	done chan error // the stream's end, once the server ends it
}

// limit sends one report of the bucket user=<identifier>; the server
// answers only what changes, so the call does not wait for an answer.
func (c *rlqsClient) limit(ctx context.Context, req *connect.Request[ratelimitv1.LimitRequest]) (bool, error) {
	var st *rlqsStream
	select {
	case st = <-c.streams:
	default:
		bs := c.c.CallBidiStream(context.WithoutCancel(ctx))
		if c.token != "" {
			bs.RequestHeader().Set("Authorization", "Bearer "+c.token)
		}
		st = &rlqsStream{s: bs, done: make(chan error, 1)}
		go func() {
			for {
				if _, err := bs.Receive(); err != nil {
					if errors.Is(err, io.EOF) {
						err = nil
					}
					st.done <- err
					return
				}
			}
		}()
		c.mu.Lock()
		c.all = append(c.all, st)
		c.mu.Unlock()
	}
	defer func() { c.streams <- st }()
	err := st.s.Send(&rlqsv3.RateLimitQuotaUsageReports{Domain: c.domain, BucketQuotaUsages: []*rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId:           &rlqsv3.BucketId{Bucket: map[string]string{"user": req.Msg.Identifier}},
		TimeElapsed:        durationpb.New(5 * time.Second),
		NumRequestsAllowed: c.perReport}}})
	return err == nil, err
}

// finish ends every stream and waits for the server to end each, its
// reports handled.
func (c *rlqsClient) finish() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.all {
		st.s.CloseRequest()
		errs = append(errs, <-st.done)
	}
	return errors.Join(errs...)
}

// serversCPU sums process_cpu_seconds_total over the /metrics of every
// URL, read with token (a server with keys serves its metrics to a key
// with status.read), and reports whether each answered.
func serversCPU(ctx context.Context, hc *http.Client, urls []string, token string) (time.Duration, bool) {
	var sum float64
	for _, u := range urls {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSpace(u)+"/metrics", nil)
		if err != nil {
			return 0, false
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, false
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, false
		}
		found := false
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return 0, false
				}
				sum += f
				found = true
			}
		}
		if !found {
			return 0, false
		}
	}
	return time.Duration(sum * float64(time.Second)), true
}
