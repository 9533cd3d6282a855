// Package apitest builds the API's request path in memory for the tests of
// its protocol adapters: a limiter and overrides without stores, the
// pipeline and the shared HTTP layer, served on loopback over HTTP/1.1 and
// h2c (and grpc-go) so that the tests call them with real clients.
package apitest

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/unkeyed/ratelimit/cmd/api/internal/access"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Stack is the request path of one API process, in memory.
type Stack struct {
	Limiter   *ratelimit.Service
	Overrides *overrides.Registry
	Pipeline  *pipeline.Pipeline
	Budget    *transport.Budget
	Layer     *transport.Layer
	Registry  *prometheus.Registry
	// Log holds what the layer logged.
	Log *LockedBuffer
}

type options struct {
	tokens string
	keys   []key
	budget int64
	clock  ratelimit.Clock
}

type key struct {
	token, workspace string
	permissions      []string
}

// Option configures a Stack.
type Option func(*options)

// WithTokens sets UNKEY_AUTH_TOKENS: comma-separated token=workspace.
func WithTokens(tokens string) Option { return func(o *options) { o.tokens = tokens } }

// WithKey adds a bearer token of workspace that holds only permissions
// (named as package access parses them).
func WithKey(token, workspace string, permissions ...string) Option {
	return func(o *options) { o.keys = append(o.keys, key{token, workspace, permissions}) }
}

// WithClock sets the limiter's clock (the system's).
func WithClock(c ratelimit.Clock) Option { return func(o *options) { o.clock = c } }

// WithBudget sets the decode budget's bytes.
func WithBudget(n int64) Option { return func(o *options) { o.budget = n } }

// New returns a stack; the test's end cleans nothing up but its servers.
func New(t testing.TB, opts ...Option) *Stack {
	t.Helper()
	o := options{budget: transport.DefaultBudget, clock: ratelimit.SystemClock{}}
	for _, opt := range opts {
		opt(&o)
	}
	reg := prometheus.NewRegistry()
	limiter, err := ratelimit.New("test", ratelimit.WithRegisterer(reg), ratelimit.WithClock(o.clock))
	if err != nil {
		t.Fatal(err)
	}
	ov, err := overrides.New(overrides.WithRegisterer(reg))
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pipeline.ParseTokens(o.tokens)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range o.keys {
		perms, err := access.Parse(k.permissions)
		if err != nil {
			t.Fatal(err)
		}
		if !tokens.Add(k.token, pipeline.Principal{Workspace: k.workspace, Permissions: perms}) {
			t.Fatalf("key %q repeats a token", k.token)
		}
	}
	p, err := pipeline.New(limiter, ov, reg, pipeline.WithKeys(tokens), pipeline.WithBatchEntriesInFlight(pipeline.MaxBatchLimit))
	if err != nil {
		t.Fatal(err)
	}
	log := &LockedBuffer{}
	budget := transport.NewBudget(o.budget)
	layer, err := transport.NewLayer(p, budget, slog.New(slog.NewTextHandler(log, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	return &Stack{Limiter: limiter, Overrides: ov, Pipeline: p, Budget: budget, Registry: reg, Log: log, Layer: layer}
}

// Serve serves the routes register adds on loopback, over HTTP/1.1 and
// h2c, until the test ends, and returns the base URL.
func (s *Stack) Serve(t testing.TB, register func(*http.ServeMux)) string {
	t.Helper()
	mux := http.NewServeMux()
	register(mux)
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.Protocols = cmdutil.Protocols()
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// ServeGRPC serves a grpc-go server of the layer with the services
// register adds, until the test ends, and returns its address.
func (s *Stack) ServeGRPC(t testing.TB, c transport.Codecs, register func(*grpc.Server)) string {
	t.Helper()
	srv := s.Layer.GRPCServer(transport.Limits{ReadTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16384, MaxConcurrentStreams: 100}, c)
	register(srv)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// Post posts body to url over HTTP/1.1 with the bearer token (none if "")
// and the content type (none if ""), and returns the status and the body of
// the answer.
func Post(t testing.TB, url, token, contentType string, body io.Reader) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", url, body)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// Dial returns a grpc-go connection to addr without TLS, closed when the
// test ends.
func Dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// H2C returns a client that speaks HTTP/2 without TLS (prior knowledge),
// as gRPC clients do.
func H2C() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// Workspace returns ctx as an authenticated caller of ws with every
// permission would have it.
func Workspace(ctx context.Context, ws string) context.Context {
	return pipeline.WithPrincipal(ctx, pipeline.Principal{Workspace: ws, Permissions: access.All()})
}

// LockedBuffer is a log destination safe for the servers' goroutines.
type LockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *LockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written.
func (b *LockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
