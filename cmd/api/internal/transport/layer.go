package transport

import (
	"fmt"
	"log/slog"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"
)

// Layer is the shared HTTP layer of one server: the keys that
// authenticate callers, the decode budget of its requests and the log of
// its failures.
type Layer struct {
	keys    access.Keys
	budget  *Budget
	logger  *slog.Logger
	latency *prometheus.HistogramVec // nil: calls are not timed
	tracing *tracing                 // nil: tracing is off
	grpc    grpcMethods              // of the grpc-go server GRPCServer built
	unread  unreadStreams            // of the grpc-go port, per workspace
	// authFailures count refused tokens by reason, on both ports.
	authFailures authFailures
}

// NewLayer returns the layer of a server authenticating callers by keys,
// reading requests within budget, logging to logger, and timing every call into
// unkey_request_duration_seconds; it registers that and
// unkey_decode_budget_in_use_bytes, the budget's bytes in use, with reg.
func NewLayer(keys access.Keys, budget *Budget, logger *slog.Logger, reg prometheus.Registerer) (*Layer, error) {
	latency, err := newLatency(reg)
	if err != nil {
		return nil, fmt.Errorf("register latency metric: %w", err)
	}
	if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "unkey_decode_budget_in_use_bytes",
		Help: "Bytes of request messages being read or decompressed now (on the grpc-go port, being handled), all clients and both ports together; at UNKEY_DECODE_BUDGET_BYTES a request is answered busy.",
	}, func() float64 { return float64(budget.InUse()) })); err != nil {
		return nil, fmt.Errorf("register decode budget metric: %w", err)
	}
	l := &Layer{keys: keys, budget: budget, logger: logger, latency: latency}
	if err := l.authFailures.register(reg); err != nil {
		return nil, err
	}
	return l, nil
}

// Renderer answers err, the failure of the request r, in an adapter's
// protocol: a missing or unknown token, a body over the cap or past the
// budget, a panic, or any error of the pipeline. Renderers sort err with
// [Layer.Classify].
type Renderer func(w http.ResponseWriter, r *http.Request, err error)

// Route returns next behind the layer, in this order: a panic is recovered
// and rendered; the caller is authenticated from its headers before any of
// the body is read (its principal, the workspace and what it may do, is
// then in the request's context, see [call.PrincipalOf]); the body is capped at [MaxRequestBytes] and its
// bytes come out of the decode budget. render answers each failure in
// next's protocol. The call is timed into unkey_request_duration_seconds
// under protocol, the adapter's name for it ("" for connect-go's routes,
// which are connect, grpc or grpc-web by their content type), and its
// method, the last segment of its path if it is one of methods.
func (l *Layer) Route(protocol string, render Renderer, next http.Handler, methods ...string) http.Handler {
	return l.timed(protocol, methods, l.recover(render, l.authenticate(render, limitBody(l.budget, next))))
}

// authenticate resolves the caller's principal from its bearer token before
// any of the request body is read or decoded, so an unauthenticated caller
// costs a header lookup and a hash (see access.Authenticate).
func (l *Layer) authenticate(render Renderer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, err := l.authenticated(access.Authenticate(l.keys, r.Header.Get("Authorization")))
		if err != nil {
			if r.ProtoMajor == 1 {
				// Otherwise net/http reads what is left of the body
				// before answering, to keep the connection: a caller
				// that never sends it would hold the answer back.
				w.Header().Set("Connection", "close")
			}
			render(w, r, err)
			return
		}
		trustConn(r.Context())
		// The layer's timing put the call's state in the context already:
		// the principal goes into it, and the request needs no copy.
		if ctx := call.WithPrincipal(r.Context(), pr); ctx != r.Context() {
			r = r.WithContext(ctx)
		}
		next.ServeHTTP(w, r)
	})
}

// recover answers a panic of next as an internal error, logged with its
// stack under a request id, instead of letting net/http drop the
// connection. http.ErrAbortHandler is net/http's own way to abort an
// answer: it panics on, as connect-go lets it.
func (l *Layer) recover(render Renderer, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				render(w, r, l.panicked(r.Context(), r.URL.Path, p))
			}
		}()
		next.ServeHTTP(w, r)
	})
}
