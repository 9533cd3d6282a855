package daemon

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
)

// An Adapter serves one protocol (or a page) over the shared transport
// layer. Each is built from what it serves with (the layer, the pipeline,
// the domain services it calls); the daemon loops over them on both ports,
// and lists what they serve in health, reflection and the answer to a
// path nobody serves.
type Adapter interface {
	// Services names the gRPC services it serves, if any.
	Services() []string
	// Routes describes the HTTP routes it serves besides its services'
	// RPCs ("POST /json"), "" if none.
	Routes() string
	// Register serves the adapter's routes on the main port's mux.
	Register(mux *http.ServeMux)
	// RegisterGRPC serves its gRPC services on the grpc-go port; an
	// adapter of an HTTP-only protocol registers nothing.
	RegisterGRPC(srv *grpc.Server)
	// Codecs are its hooks into the layer's codecs (see
	// [transport.Codecs]), which the grpc-go port, one codec for every
	// service, chains.
	Codecs() transport.Codecs
}

// services returns the gRPC services the adapters serve, for health
// checks, reflection and the answer to a path that names none of them.
func (d *Daemon) services() []string {
	var names []string
	for _, a := range d.adapters {
		names = append(names, a.Services()...)
	}
	return names
}

// routes describes the HTTP routes of the main port besides the services'
// RPCs: the adapters', then the probes and metrics.
func (d *Daemon) routes() string {
	var routes []string
	for _, a := range d.adapters {
		if r := a.Routes(); r != "" {
			routes = append(routes, r)
		}
	}
	return strings.Join(append(routes, "GET /healthz, /readyz, /healthcheck, /metrics"), ", ")
}

// Handler returns the routes of the main port: each adapter's, reflection
// and health for the gRPC services, the probes and metrics, and a JSON
// answer for any other path.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	for _, a := range d.adapters {
		a.Register(mux)
	}
	services := d.services()
	// Health checks and reflection need no token, so they get the layer's
	// bounds for what a caller nobody knows may send: a small body and
	// gzip capped alike, out of one share of the decode budget.
	open := d.layer.OpenHandlerOptions()
	reflector := grpcreflect.NewStaticReflector(services...)
	for _, route := range []func() (string, http.Handler){
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1(reflector, open...) },
		func() (string, http.Handler) { return grpcreflect.NewHandlerV1Alpha(reflector, open...) },
		func() (string, http.Handler) { return grpchealth.NewHandler(readyHealth{d, d.health}, open...) },
	} {
		path, h := route()
		mux.Handle(path, d.layer.Open(h))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	ready := func(w http.ResponseWriter, r *http.Request) {
		// The address waited on only for an operator (the probes answer
		// anyone), whose token is read only while not ready.
		if why := d.notReady(false); why != "" {
			if d.layer.IsOperator(r) {
				why = d.notReady(true)
			}
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	}
	mux.HandleFunc("GET /readyz", ready)
	// envoyproxy/ratelimit's health check, where Envoy Gateway's probes
	// look: the same answer.
	mux.HandleFunc("GET /healthcheck", ready)
	if d.cfg.MetricsAddr == "" {
		mux.Handle("GET /metrics", d.layer.Operator(d.metricsHandler()))
	} else {
		mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
			transport.WriteJSONError(w, http.StatusNotFound, failure.KindNotFound,
				"this process serves its metrics on its own address (UNKEY_METRICS_ADDR), not on the API's port")
		})
	}
	// Any other path, or a path above on another HTTP method, is answered
	// in JSON, saying what the port serves or which method the path takes.
	mux.Handle("/", transport.NoRoute(mux, slices.Concat(services, []string{grpchealth.HealthV1ServiceName,
		grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName}), d.routes()))
	return mux
}

// metricsHandler serves the process's metrics in Prometheus's format.
func (d *Daemon) metricsHandler() http.Handler {
	return promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{Registry: d.registry})
}

// grpcServer returns the grpc-go server of UNKEY_GRPC_ADDR, with every
// adapter's services, health and reflection, and the function that marks
// it not serving at shutdown.
func (d *Daemon) grpcServer() (*grpc.Server, *health.Server) {
	var opts []grpc.ServerOption
	if c := cmp.Or(d.grpcTLS, d.tls); c != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.Config())))
	}
	srv := d.layer.GRPCServer(d.limits(), d.grpcCodecs(), opts...)
	for _, a := range d.adapters {
		a.RegisterGRPC(srv)
	}
	// Serving once the process is ready: at once, or once what it waits
	// for (the first rules from xDS) has arrived (see serveWhenReady).
	hs := health.NewServer()
	status := healthpb.HealthCheckResponse_SERVING
	if len(d.readyChecks) > 0 {
		status = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, name := range append(d.services(), "") {
		hs.SetServingStatus(name, status)
	}
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs
}

// serveWhenReady marks hs serving once every ready check has passed,
// unless ctx ends first.
func (d *Daemon) serveWhenReady(ctx context.Context, hs *health.Server) {
	for _, c := range d.readyChecks {
		select {
		case <-c.done:
		case <-ctx.Done():
			return
		}
	}
	for _, name := range append(d.services(), "") {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
}

// readyHealth answers the main port's gRPC health checks: not serving
// while the process is not ready (starting, waiting for its first rules,
// shutting down), else as checker says.
type readyHealth struct {
	d *Daemon
	grpchealth.Checker
}

// Check answers a health check.
func (h readyHealth) Check(ctx context.Context, req *grpchealth.CheckRequest) (*grpchealth.CheckResponse, error) {
	resp, err := h.Checker.Check(ctx, req) // an unknown service stays not found
	if err == nil && h.d.notReady(false) != "" {
		resp.Status = grpchealth.StatusNotServing
	}
	return resp, err
}

// limits are the bounds on what one client may hold of either port.
func (d *Daemon) limits() transport.Limits {
	return transport.Limits{ReadTimeout: d.cfg.ReadTimeout, WriteTimeout: d.cfg.WriteTimeout, IdleTimeout: d.cfg.IdleTimeout,
		MaxHeaderBytes: d.cfg.MaxHeaderBytes, MaxConcurrentStreams: d.cfg.MaxConcurrentStreams,
		UnreadPerWorkspace: d.cfg.GRPCUnreadPerWorkspace}
}

// grpcCodecs chains the adapters' Decode hooks for the grpc-go port, whose
// one codec (protobuf only) serves every service: the first that takes a
// message decodes it.
func (d *Daemon) grpcCodecs() transport.Codecs {
	var decoders []func(data []byte, msg any, json bool) bool
	for _, a := range d.adapters {
		if dec := a.Codecs().Decode; dec != nil {
			decoders = append(decoders, dec)
		}
	}
	return transport.Codecs{Decode: func(data []byte, msg any, json bool) bool {
		for _, dec := range decoders {
			if dec(data, msg, json) {
				return true
			}
		}
		return false
	}}
}
