package transport

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/metadata"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
)

// tracing is the layer's tracer, nil while tracing is off.
type tracing struct {
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
}

// WithTracing makes every call a span of tp's, a child of the caller's W3C
// trace context when it sends one. Call it before the layer serves.
func (l *Layer) WithTracing(tp trace.TracerProvider, p propagation.TextMapPropagator) {
	l.tracing = &tracing{tracer: tp.Tracer("github.com/unkeyed/ratelimit/cmd/api"), propagator: p}
}

// startSpan starts the span of a call named name, its parent the trace
// context carrier holds.
func (t *tracing) startSpan(ctx context.Context, name string, carrier propagation.TextMapCarrier) (context.Context, trace.Span) {
	ctx = t.propagator.Extract(ctx, carrier)
	return t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer))
}

// endSpan ends a call's span with what the call learnt: its protocol,
// method, outcome and workspace (never its key). The namespace a decision
// was made in, and how many limits it decided, the pipeline put on the
// span already, when it decided.
func endSpan(ctx context.Context, span trace.Span, protocol, method string, outcome call.Outcome) {
	span.SetAttributes(
		attribute.String("rpc.system", protocol),
		attribute.String("rpc.method", method),
		attribute.String("ratelimit.outcome", outcome.String()),
		attribute.String("ratelimit.workspace", call.Workspace(ctx)),
	)
	if outcome == call.OutcomeError {
		span.SetStatus(otelcodes.Error, "")
	}
	span.End()
}

// mdCarrier reads trace context from gRPC metadata.
type mdCarrier metadata.MD

func (c mdCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c mdCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

func (c mdCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
