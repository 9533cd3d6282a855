package transport_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/unkeyed/ratelimit/cmd/api/internal/daemon/daemontest"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/testkit/loopback"
	"github.com/unkeyed/ratelimit/internal/testkit/poll"
	"github.com/unkeyed/ratelimit/services/access"
)

// newLayer returns an open layer (no keys: every caller has every
// permission) with the log it writes, for the tests of routes no adapter
// serves.
func newLayer(t *testing.T) (*transport.Layer, *loopback.Log) {
	t.Helper()
	log := &loopback.Log{}
	l, err := transport.NewLayer(access.Tokens{}, transport.NewBudget(transport.DefaultBudget, transport.DefaultShare), slog.New(slog.NewTextHandler(log, nil)),
		prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return l, log
}

// budgetInUse reads unkey_decode_budget_in_use_bytes off reg.
func budgetInUse(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "unkey_decode_budget_in_use_bytes" {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no unkey_decode_budget_in_use_bytes")
	return 0
}

func post(t *testing.T, url, contentType string, body io.Reader) (int, string) {
	t.Helper()
	resp, err := http.Post(url, contentType, body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// TestDecodeBudgetIsShared: with the budget held by a request being read,
// another request is refused alike on every route, resource_exhausted (429)
// naming the cause, and once the first is answered the budget is whole
// again; unkey_decode_budget_in_use_bytes says what is held.
func TestDecodeBudgetIsShared(t *testing.T) {
	const budget = transport.MaxRequestBytes // the smallest the server takes
	s := daemontest.Start(t, nil, fmt.Sprint("UNKEY_DECODE_BUDGET_BYTES=", budget), fmt.Sprint("UNKEY_DECODE_BUDGET_SHARE_BYTES=", budget), "UNKEY_GRPC_ADDR=127.0.0.1:0")
	url, grpcAddr := s.URL, s.GRPCAddr
	// A request that sends all but 100 bytes of the budget and waits holds
	// them.
	pr, pw := io.Pipe()
	held := make(chan struct{})
	go func() {
		defer close(held)
		if resp, err := http.Post(url+"/v2/ratelimit.limit", "application/json", pr); err == nil {
			resp.Body.Close()
		}
	}()
	pw.Write([]byte(`{"namespace":"` + strings.Repeat("n", budget-100-14)))
	poll.Until(t, 5*time.Second, "the first request to hold its body", func() bool { return budgetInUse(t, s.Registry()) >= budget-100 })

	body := `{"namespace":"ns","identifier":"` + strings.Repeat("x", 200) + `","limit":10,"duration":60000}`
	for _, tc := range []struct{ path, contentType, want string }{
		{"/ratelimit.v1.RatelimitService/Limit", "application/json", `"code":"resource_exhausted"`},
		{"/v2/ratelimit.limit", "application/json", `"type":"https://unkey.com/docs/errors/unkey/application/resource_exhausted"`},
		{"/json", "application/json", "server busy"},
		{envoyrls.Procedure, "application/json", `"code":"resource_exhausted"`},
	} {
		status, out := post(t, url+tc.path, tc.contentType, strings.NewReader(body))
		if status != http.StatusTooManyRequests || !strings.Contains(out, tc.want) || !strings.Contains(out, "server busy") {
			t.Errorf("%s with the budget spent: %d %s, want 429 %s", tc.path, status, out, tc.want)
		}
	}
	// On the grpc-go port, a message being handled takes its size from the
	// same budget: past it, resource_exhausted "server busy".
	conn := loopback.Dial(t, grpcAddr)
	err := conn.Invoke(context.Background(), "/ratelimit.v1.RatelimitService/Limit", &ratelimitv1.LimitRequest{Namespace: "ns",
		Identifier: strings.Repeat("x", 200), Limit: 10, Duration: 60000}, new(ratelimitv1.LimitResponse))
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "server busy") {
		t.Errorf("grpc-go Limit with the budget spent: %v, want resource_exhausted server busy", err)
	}
	_, err = rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 200),
		Descriptors: []*rlcommonv3.RateLimitDescriptor{{Entries: []*rlcommonv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}}}}})
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted {
		t.Errorf("grpc-go ShouldRateLimit with the budget spent: %v, want resource_exhausted", err)
	}
	pw.CloseWithError(errors.New("gone"))
	<-held
	poll.Until(t, 5*time.Second, "the budget to be whole again", func() bool { return budgetInUse(t, s.Registry()) == 0 })
	if status, out := post(t, url+"/ratelimit.v1.RatelimitService/Limit", "application/json", strings.NewReader(body)); status != http.StatusOK {
		t.Fatalf("Limit with the budget given back: %d %s", status, out)
	}
	out := new(ratelimitv1.LimitResponse)
	if err := conn.Invoke(context.Background(), "/ratelimit.v1.RatelimitService/Limit", &ratelimitv1.LimitRequest{Namespace: "ns",
		Identifier: strings.Repeat("x", 200), Limit: 10, Duration: 60000}, out); err != nil || !out.Success {
		t.Fatalf("grpc-go Limit with the budget given back: %v, %v", out, err)
	}
	if n := budgetInUse(t, s.Registry()); n != 0 {
		t.Fatalf("the grpc-go call kept %v bytes of the budget", n)
	}
}

// TestBodyCap: a body over 1 MiB is refused by one rule on every route,
// invalid_argument (400).
func TestBodyCap(t *testing.T) {
	url := daemontest.Start(t, nil).URL
	big := `{"namespace":"` + strings.Repeat("n", 1<<20) + `"}`
	for _, path := range []string{"/ratelimit.v1.RatelimitService/Limit", "/v2/ratelimit.limit", "/json", envoyrls.Procedure} {
		status, out := post(t, url+path, "application/json", strings.NewReader(big))
		if status != http.StatusBadRequest || !strings.Contains(out, "must be at most 1048576 bytes (1 MiB)") {
			t.Errorf("%s with 1 MiB and more: %d %.200s", path, status, out)
		}
	}
}

// TestRecover: a route that panics is answered as an internal error in its
// protocol, with a request id the log has the panic and its stack under;
// http.ErrAbortHandler aborts the answer as net/http means it to, and is
// not logged as a failure.
func TestRecover(t *testing.T) {
	l, log := newLayer(t)
	mux := http.NewServeMux()
	mux.Handle("/panic", l.Route("", l.ConnectRenderer(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic("something broke")
	})))
	mux.Handle("/abort", l.Route("", l.ConnectRenderer(), http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	})))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	url := srv.URL
	status, out := post(t, url+"/panic", "application/json", strings.NewReader("{}"))
	_, id, _ := strings.Cut(out, "request id ")
	id = strings.TrimSuffix(id, `"}`)
	if status != http.StatusInternalServerError || !strings.Contains(out, `"code":"internal"`) || !strings.HasPrefix(id, "req_") ||
		strings.Contains(out, "something broke") {
		t.Fatalf("a panic: %d %s, want an opaque internal error with a request id", status, out)
	}
	if log := log.String(); !strings.Contains(log, "request_id="+id) || !strings.Contains(log, "something broke") || !strings.Contains(log, "goroutine") {
		t.Fatalf("the log does not have the panic under %s: %s", id, log)
	}
	before := log.String()
	if resp, err := http.Post(url+"/abort", "application/json", strings.NewReader("{}")); err == nil {
		resp.Body.Close()
		t.Fatalf("an aborted answer reached the client: %d", resp.StatusCode)
	}
	if log.String() != before {
		t.Fatalf("an abort was logged as a failure: %s", strings.TrimPrefix(log.String(), before))
	}
}
