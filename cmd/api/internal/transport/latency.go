package transport

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
)

// LatencyBuckets are the bounds of unkey_request_duration_seconds: a warm
// decision takes tens of microseconds, a call that waits on a store or a
// slow client up to seconds.
var LatencyBuckets = []float64{
	10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5, 10,
}

// newLatency returns unkey_request_duration_seconds, registered with reg.
// Its labels take bounded values only: a protocol of five, a method a
// route names (anything else is "unknown"), and an outcome of three.
func newLatency(reg prometheus.Registerer) (*prometheus.HistogramVec, error) {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "unkey_request_duration_seconds",
		Help: "Time from a request's arrival to its answer, by protocol (connect, grpc, grpc-web, v2, json), method and outcome " +
			"(passed, denied, error; a call that decides nothing and succeeds is passed).",
		Buckets: LatencyBuckets,
	}, []string{"protocol", "method", "outcome"})
	if err := reg.Register(h); err != nil {
		return nil, err
	}
	return h, nil
}

// timed measures next, a route of protocol ("" for connect-go's) serving
// methods (the last segments of its paths), into the latency histogram,
// and carries the call's state (see call.WithCall) for the steps behind it
// to fill in.
func (l *Layer) timed(protocol string, methods []string, next http.Handler) http.Handler {
	if l.latency == nil {
		return next
	}
	known := make(map[string]bool, len(methods))
	for _, m := range methods {
		known[m] = true
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		method := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
		if !known[method] {
			method = "unknown"
		}
		ctx := call.WithCall(r.Context(), start)
		var span trace.Span
		if l.tracing != nil {
			ctx, span = l.tracing.startSpan(ctx, method, propagation.HeaderCarrier(r.Header))
		}
		next.ServeHTTP(w, r.WithContext(ctx))
		outcome := call.OutcomeOf(ctx)
		if method == "unknown" {
			// A path that names no method of the route was refused
			// (KnownMethods answers it, without the pipeline).
			outcome = call.OutcomeError
		}
		name := protocol
		if name == "" {
			name = connectProtocol(r)
		}
		l.latency.WithLabelValues(name, method, outcome.String()).Observe(time.Since(start).Seconds())
		if span != nil {
			endSpan(ctx, span, name, method, outcome)
		}
	})
}

// connectProtocol names the protocol of a request to a connect-go route,
// by its content type: gRPC-Web, gRPC or Connect.
func connectProtocol(r *http.Request) string {
	switch ct := r.Header.Get("Content-Type"); {
	case strings.HasPrefix(ct, "application/grpc-web"):
		return "grpc-web"
	case strings.HasPrefix(ct, "application/grpc"):
		return "grpc"
	}
	return "connect"
}

// observeGRPC measures a call of the grpc-go port that began at the start
// its tap recorded, and ends its span.
func (l *Layer) observeGRPC(ctx context.Context, fullMethod string) {
	start := call.CallStart(ctx)
	if start.IsZero() {
		return
	}
	method, outcome := l.grpc.name(fullMethod), call.OutcomeOf(ctx)
	if method == "unknown" {
		outcome = call.OutcomeError
	}
	if l.latency != nil {
		l.latency.WithLabelValues("grpc", method, outcome.String()).Observe(time.Since(start).Seconds())
	}
	if span := trace.SpanFromContext(ctx); l.tracing != nil && span.IsRecording() {
		endSpan(ctx, span, "grpc", method, outcome)
	}
}
