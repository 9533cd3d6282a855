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
	"strconv"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/unkeyed/ratelimit/internal/envconfig"
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

// Settings returns the OTEL_* variables that Setup honours, read by the
// OpenTelemetry SDK itself, with the values it uses when they are unset (a
// process of service), for --help. They are the standard ones for traces:
// OTEL_PROPAGATORS is not among them (a caller's W3C traceparent is always
// read), nor are those of metrics and logs, which are not exported.
func Settings(service string) envconfig.Section {
	const (
		or     = "; the _TRACES_ variable (OTEL_EXPORTER_OTLP_TRACES_"
		orLast = ") takes precedence"
	)
	limit := func(name string, def int, what string) envconfig.Setting {
		return envconfig.Setting{Name: name, Default: strconv.Itoa(def), Help: what}
	}
	return envconfig.Section{
		Title: "Tracing (OpenTelemetry's variables, read by its SDK; off unless OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT " +
			"or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT asks for it):",
		Settings: []envconfig.Setting{
			{Name: "OTEL_TRACES_EXPORTER", Help: "otlp, console (spans to standard output) or none; tracing is on when it is otlp or console, " +
				"or when it is empty and an OTLP endpoint below is set (then otlp)"},
			{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Default: "https://localhost:4318", Help: "the collector's base URL (http/protobuf sends to " +
				"its /v1/traces); https://localhost:4317 over grpc; an http:// URL exports without TLS; setting it turns tracing on"},
			{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Help: "the collector's URL for traces, used as it is, instead of the one above; setting it turns tracing on"},
			{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Default: "http/protobuf", Help: "http/protobuf or grpc" + or + "PROTOCOL" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_HEADERS", Help: "key=value,... headers sent with every export, such as the collector's API key" + or + "HEADERS" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_TIMEOUT", Default: "10000", Help: "milliseconds one export may take" + or + "TIMEOUT" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_COMPRESSION", Default: "none", Help: "gzip or none" + or + "COMPRESSION" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_INSECURE", Default: "false", Help: "true exports without TLS" + or + "INSECURE" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_CERTIFICATE", Help: "PEM CA certificates that verify the collector; empty: the system's" + or + "CERTIFICATE" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", Help: "PEM certificate for mutual TLS with the collector, with OTEL_EXPORTER_OTLP_CLIENT_KEY" +
				or + "CLIENT_CERTIFICATE" + orLast},
			{Name: "OTEL_EXPORTER_OTLP_CLIENT_KEY", Help: "its PEM key" + or + "CLIENT_KEY" + orLast},
			{Name: "OTEL_TRACES_SAMPLER", Default: "parentbased_always_on", Help: "always_on, always_off, traceidratio, parentbased_always_on, " +
				"parentbased_always_off or parentbased_traceidratio"},
			{Name: "OTEL_TRACES_SAMPLER_ARG", Default: "1.0", Help: "the share of traces the *traceidratio samplers keep: 0 to 1"},
			limit("OTEL_BSP_SCHEDULE_DELAY", sdktrace.DefaultScheduleDelay, "milliseconds between two exports of the spans waiting"),
			limit("OTEL_BSP_EXPORT_TIMEOUT", sdktrace.DefaultExportTimeout, "milliseconds one export of a batch may take"),
			limit("OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.DefaultMaxQueueSize, "the most spans waiting to be exported; more are dropped"),
			limit("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize, "the most spans one export sends"),
			{Name: "OTEL_SERVICE_NAME", Default: service, Help: "the service.name of every span"},
			{Name: "OTEL_RESOURCE_ATTRIBUTES", Help: "key=value,... attributes of every span's resource (a service.name here counts " +
				"unless OTEL_SERVICE_NAME is set)"},
			limit("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", sdktrace.DefaultAttributeCountLimit, "the most attributes of a span (or OTEL_ATTRIBUTE_COUNT_LIMIT)"),
			limit("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", sdktrace.DefaultAttributeValueLengthLimit,
				"the longest attribute value of a span, -1 for no limit (or OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT)"),
			limit("OTEL_SPAN_EVENT_COUNT_LIMIT", sdktrace.DefaultEventCountLimit, "the most events of a span"),
			limit("OTEL_SPAN_LINK_COUNT_LIMIT", sdktrace.DefaultLinkCountLimit, "the most links of a span"),
			limit("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", sdktrace.DefaultAttributePerEventCountLimit, "the most attributes of an event"),
			limit("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", sdktrace.DefaultAttributePerLinkCountLimit, "the most attributes of a link"),
		},
	}
}
