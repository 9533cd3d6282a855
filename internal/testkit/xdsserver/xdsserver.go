// Package xdsserver runs, for tests, an xDS management server of rate
// limit rules as Envoy Gateway's runner builds it: go-control-plane's
// snapshot cache and server, the aggregated discovery service on a gRPC
// server (with TLS when given), and RateLimitConfig resources pushed to one
// node. It records what its clients send back (acknowledgements and
// refusals) and can be stopped and started again on the same address.
package xdsserver

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// Reply is what a client sent back about a version: acknowledged (Error
// empty) or refused with Error.
type Reply struct {
	Version string // the version the client has in force
	Nonce   string // the response it answers
	Error   string
}

// Server is a running management server.
type Server struct {
	t     testing.TB
	node  string
	addr  string
	creds credentials.TransportCredentials
	cache cachev3.SnapshotCache
	mu    sync.Mutex
	grpc  *grpc.Server
	nodes []string // node ids of the streams opened
	// replies are the requests that answered a response, in order.
	replies []Reply
	version int
}

// Option configures a Server.
type Option func(*Server)

// WithCredentials serves over TLS (mutual, if creds ask for client
// certificates), as Envoy Gateway's xDS server does.
func WithCredentials(c credentials.TransportCredentials) Option {
	return func(s *Server) { s.creds = c }
}

// Start starts a server on a free loopback port that pushes to node. It
// stops when the test ends.
func Start(t testing.TB, node string, opts ...Option) *Server {
	t.Helper()
	s := &Server{t: t, node: node, cache: cachev3.NewSnapshotCache(false, cachev3.IDHash{}, nil)}
	for _, o := range opts {
		o(s)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	s.serve(lis)
	t.Cleanup(s.Stop)
	return s
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

func (s *Server) serve(lis net.Listener) {
	var opts []grpc.ServerOption
	if s.creds != nil {
		opts = append(opts, grpc.Creds(s.creds))
	}
	g := grpc.NewServer(opts...)
	callbacks := serverv3.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			if req.GetResponseNonce() == "" {
				s.nodes = append(s.nodes, req.GetNode().GetId())
				return nil
			}
			s.replies = append(s.replies, Reply{Version: req.GetVersionInfo(), Nonce: req.GetResponseNonce(),
				Error: req.GetErrorDetail().GetMessage()})
			return nil
		},
	}
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(g, serverv3.NewServer(context.Background(), s.cache, callbacks))
	s.mu.Lock()
	s.grpc = g
	s.mu.Unlock()
	go g.Serve(lis)
}

// Push puts configs in force for the node as the next version ("1", "2",
// …, as Envoy Gateway numbers them) and returns it.
func (s *Server) Push(configs ...*rlsconfv3.RateLimitConfig) string {
	s.t.Helper()
	s.mu.Lock()
	s.version++
	v := strconv.Itoa(s.version)
	s.mu.Unlock()
	rs := make([]types.Resource, len(configs))
	for i, c := range configs {
		rs[i] = c
	}
	snap, err := cachev3.NewSnapshot(v, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.cache.SetSnapshot(context.Background(), s.node, snap); err != nil {
		s.t.Fatal(err)
	}
	return v
}

// Replies returns what clients sent back so far.
func (s *Server) Replies() []Reply {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Reply(nil), s.replies...)
}

// Refused reports whether a client refused a response (a NACK) while it
// had version in force, with an error containing substring.
func (s *Server) Refused(version, substring string) bool {
	for _, r := range s.Replies() {
		if r.Version == version && r.Error != "" && strings.Contains(r.Error, substring) {
			return true
		}
	}
	return false
}

// Acknowledged reports whether a client acknowledged version.
func (s *Server) Acknowledged(version string) bool {
	for _, r := range s.Replies() {
		if r.Version == version && r.Error == "" {
			return true
		}
	}
	return false
}

// Nodes returns the node ids of the streams opened so far.
func (s *Server) Nodes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.nodes...)
}

// Stop stops the server at once, closing its streams, as a management
// server that is killed.
func (s *Server) Stop() {
	s.mu.Lock()
	g := s.grpc
	s.grpc = nil
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// Restart serves again on the same address, with the snapshots it had.
func (s *Server) Restart() {
	s.t.Helper()
	var lis net.Listener
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; {
		if lis, err = net.Listen("tcp", s.addr); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		s.t.Fatal(fmt.Errorf("listen again on %s: %w", s.addr, err))
	}
	s.serve(lis)
}
