// Package telemetry sets up OpenTelemetry tracing from the standard OTEL_*
// environment variables, and leaves it off unless they ask for it: with
// tracing off every tracer is a no-op and a request pays one atomic load
// for it.
//
// Tracing is on when OTEL_TRACES_EXPORTER names an exporter other than
// "none", or when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. The exporter is then chosen
// as the specification says (otlp by default, OTEL_EXPORTER_OTLP_PROTOCOL
// http/protobuf or grpc, console for debugging), the sampler by
// OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (parentbased_always_on by
// default), batching by OTEL_BSP_SCHEDULE_DELAY and its siblings, and the
// service by OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES. A caller's W3C
// traceparent is the parent of its request's span.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is a process's tracer provider and the propagator of its
// callers' trace context.
type Tracing struct {
	// Provider makes the process's tracers: a no-op one when tracing is
	// off.
	Provider trace.TracerProvider
	// Propagator reads and writes W3C trace context.
	Propagator propagation.TextMapPropagator
	// On reports whether spans are recorded and exported.
	On  bool
	sdk *sdktrace.TracerProvider
}

// Enabled reports whether the environment asks for tracing (see the
// package comment).
func Enabled(getenv func(string) string) bool {
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" {
		return e != "none"
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Setup returns the tracing the process environment asks for, as
// service (unless OTEL_SERVICE_NAME names it). It starts no goroutine until
// tracing is on; Shutdown flushes what is buffered.
func Setup(ctx context.Context, service string) (*Tracing, error) {
	t := &Tracing{Provider: noop.NewTracerProvider(), Propagator: propagation.TraceContext{}}
	if !Enabled(os.Getenv) {
		return t, nil
	}
	exp, err := autoexport.NewSpanExporter(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_*: %w", err)
	}
	// The service's name, unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES (read after it) name another.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	// The SDK reads OTEL_TRACES_SAMPLER and OTEL_BSP_* itself.
	t.sdk = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	t.Provider, t.On = t.sdk, true
	return t, nil
}

// Shutdown exports what is buffered and stops the exporter.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t.sdk == nil {
		return nil
	}
	return t.sdk.Shutdown(ctx)
}
