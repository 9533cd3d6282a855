package transport

import (
	"context"
	"net"
	"runtime"
	"time"

	"errors"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/netutil"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/services/access"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/proto"
)

// The main port serves gRPC through connect-go on net/http's HTTP/2
// server, beside Connect, gRPC-Web and the Unkey routes. For callers that
// send one small call at a time (an Envoy proxy calls once per request),
// its per-call cost is mostly HTTP/2 framing and the goroutine handoffs
// around it; grpc-go's own transport does the same work for about half the
// CPU (docs/BENCHMARKS.md). So UNKEY_GRPC_ADDR serves the same services
// over grpc-go on a port of its own, as gubernator serves gRPC: same
// handlers, same auth, same bounds on messages and batches.

// GRPCServer returns a grpc-go server with l's bounds, a codec that runs
// c.Decode before protobuf's, and the layer's authentication, failure
// rendering and panic recovery. A stream is authenticated from its headers
// when it opens, before any of its message is read (a stream without a
// known token is refused there, costing no goroutine or buffer), and a call
// must end within the read and write timeouts together, so that a client
// that sends its message slowly holds nothing for long (a long-lived
// stream, whose client streams, must send its first message within the
// read timeout instead, see stream.go); a workspace has at
// most lim.UnreadPerWorkspace calls whose message has not arrived. Health
// checks and reflection need no token: their callers share one such count
// and the same deadline (a health watch excepted). The adapters register
// their services on it;
// the caller caps its connections (see LimitListener), and opts add to the
// server's (its TLS credentials).
func (l *Layer) GRPCServer(lim Limits, c Codecs, opts ...grpc.ServerOption) *grpc.Server {
	srv := grpc.NewServer(append([]grpc.ServerOption{
		// The messages are capped as on the main port.
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.ForceServerCodec(protoCodec{c}),
		grpc.MaxConcurrentStreams(uint32(lim.MaxConcurrentStreams)),
		grpc.MaxHeaderListSize(uint32(lim.MaxHeaderBytes)),
		grpc.ConnectionTimeout(lim.ReadTimeout),
		// A connection idle for the idle timeout is closed; one that
		// carries a long-lived stream is pinged as often, and dropped
		// when its peer does not answer within the read timeout.
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: lim.IdleTimeout, Time: lim.IdleTimeout,
			Timeout: lim.ReadTimeout}),
		grpc.InTapHandle(l.grpcTap(lim, lim.ReadTimeout+lim.WriteTimeout)),
		grpc.ChainUnaryInterceptor(l.grpcFailures),
		grpc.ChainStreamInterceptor(l.grpcStreamFailures),
		// A pool of goroutines serves the streams, 64 a core, instead of
		// a new goroutine for each (grpc-go still starts one when every
		// worker is busy): a fresh goroutine's stack grew, copied, in
		// every call, 15 to 18 % of the port's CPU; a worker's stays
		// grown. Idle workers cost their stacks, a few KiB each.
		grpc.NumStreamWorkers(uint32(64 * runtime.GOMAXPROCS(0))),
	}, opts...)...)
	l.grpc.server = srv
	return srv
}

// grpcMethods names the methods of the grpc-go server, for the latency
// metric and the spans: a caller may send any path, and only a method the
// server serves may become a label.
type grpcMethods struct {
	server *grpc.Server
	once   sync.Once
	known  map[string]bool // full method names, read once serving began
	// streams are the known methods whose client streams: long-lived
	// calls (see StreamRoute).
	streams map[string]bool
}

// name returns the method of fullMethod ("/service/Method") as labels
// name it: its last segment if the server serves it, else "unknown".
func (g *grpcMethods) name(fullMethod string) string {
	g.read()
	if !g.known[fullMethod] {
		return "unknown"
	}
	return fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
}

// read reads the methods the server serves, once.
func (g *grpcMethods) read() {
	g.once.Do(func() {
		g.known, g.streams = map[string]bool{}, map[string]bool{}
		if g.server == nil {
			return
		}
		for service, info := range g.server.GetServiceInfo() {
			for _, m := range info.Methods {
				g.known["/"+service+"/"+m.Name] = true
				g.streams["/"+service+"/"+m.Name] = m.IsClientStream
			}
		}
	})
}

// longLived reports whether fullMethod is a method the server serves
// whose client streams.
func (g *grpcMethods) longLived(fullMethod string) bool {
	g.read()
	return g.streams[fullMethod]
}

// streamCancel carries the cancel function of a stream's deadline, for
// grpcFailures to release it when the call ends.
type streamCancel struct{}

// streamUnread carries the *unread of a stream, for grpcFailures to mark
// its message arrived (a stream of reflection is counted until it ends).
type streamUnread struct{}

// grpcTap returns the handle that authenticates a stream from its headers
// as it opens, as the layer does on the main port (Envoy sends a token
// when its grpc_service has initial_metadata), and gives it a deadline of
// within for the whole call. A workspace with lim.UnreadPerWorkspace
// streams whose message has not arrived yet is refused more,
// resource_exhausted "server busy".
func (l *Layer) grpcTap(lim Limits, within time.Duration) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		if !grpcOpen(info.FullMethodName) {
			var authorization string
			if v := info.Header.Get("authorization"); len(v) > 0 {
				authorization = v[0]
			}
			long := l.grpc.longLived(info.FullMethodName)
			if !long {
				// A long-lived stream is neither timed nor traced: it
				// lasts as long as its client keeps it.
				ctx = call.WithCall(ctx, time.Now())
			}
			// A method the server does not serve gets no span: grpc-go
			// answers it without our interceptor, which ends spans.
			if method := l.grpc.name(info.FullMethodName); l.tracing != nil && method != "unknown" && !long {
				ctx, _ = l.tracing.startSpan(ctx, method, mdCarrier(info.Header))
			}
			pr, err := l.authenticated(access.Authenticate(l.keys, authorization))
			if err != nil {
				ce := l.ConnectError(ctx, info.FullMethodName, err)
				l.observeGRPC(ctx, info.FullMethodName)
				return nil, grpcStatus(ce)
			}
			ctx = call.WithPrincipal(ctx, pr)
			if long {
				return l.openLongLived(ctx, pr.Workspace, lim)
			}
			ctx, cancel := context.WithTimeout(ctx, within)
			ctx = context.WithValue(ctx, streamCancel{}, cancel)
			if lim.UnreadPerWorkspace > 0 {
				u, ok := l.unread.open(ctx, pr.Workspace, lim.UnreadPerWorkspace)
				if !ok {
					cancel()
					l.observeGRPC(ctx, info.FullMethodName)
					return nil, grpcStatus(ErrBusy)
				}
				ctx = context.WithValue(ctx, streamUnread{}, u)
			}
			return ctx, nil
		}
		// Health checks and reflection need no token, but callers nobody
		// knows share one count of unread messages and get the call's
		// deadline, as a workspace's calls do; a health watch may watch
		// for as long as it likes once it has sent its request.
		if info.FullMethodName == "/grpc.health.v1.Health/Watch" {
			return ctx, nil
		}
		ctx, cancel := context.WithTimeout(ctx, within)
		ctx = context.WithValue(ctx, streamCancel{}, cancel)
		if lim.UnreadPerWorkspace > 0 {
			u, ok := l.unread.open(ctx, "", lim.UnreadPerWorkspace)
			if !ok {
				cancel()
				return nil, grpcStatus(ErrBusy)
			}
			ctx = context.WithValue(ctx, streamUnread{}, u)
		}
		return ctx, nil
	}
}

// openLongLived returns the context of a long-lived stream of workspace
// (see awaitFirst): no deadline once its first message has arrived, and
// until then a place among the workspace's unread streams, refused as
// busy when it has lim.UnreadPerWorkspace.
func (l *Layer) openLongLived(ctx context.Context, workspace string, lim Limits) (context.Context, error) {
	ctx = awaitFirst(ctx, lim.ReadTimeout)
	f := firstOf(ctx)
	if lim.UnreadPerWorkspace > 0 {
		u, ok := l.unread.open(ctx, workspace, lim.UnreadPerWorkspace)
		if !ok {
			f.arrived() // stops the timer
			return nil, grpcStatus(ErrBusy)
		}
		f.unread = u
	}
	return ctx, nil
}

// unreadStreams counts, per workspace, the streams of the grpc-go port
// whose message has not all arrived. Workspaces come from the keys, so the
// map is as small as the key set.
type unreadStreams struct{ counts sync.Map } // string → *atomic.Int64

// unread is one stream's place in its workspace's count, given back once:
// when its message arrives, or when the stream ends first (its deadline,
// or the client's reset).
type unread struct {
	count *atomic.Int64
	done  atomic.Bool
	stop  func() bool // stops the release at the stream's end
}

// open counts a stream of workspace whose context is ctx, unless the
// workspace has max unread already.
func (s *unreadStreams) open(ctx context.Context, workspace string, max int) (*unread, bool) {
	c, ok := s.counts.Load(workspace)
	if !ok {
		c, _ = s.counts.LoadOrStore(workspace, new(atomic.Int64))
	}
	count := c.(*atomic.Int64)
	if count.Add(1) > int64(max) {
		count.Add(-1)
		return nil, false
	}
	u := &unread{count: count}
	u.stop = context.AfterFunc(ctx, func() { u.release() })
	return u, true
}

// release gives the stream's place back, and reports whether this call did.
func (u *unread) release() bool {
	if !u.done.CompareAndSwap(false, true) {
		return false
	}
	u.count.Add(-1)
	return true
}

// arrived marks the stream's message arrived: its place is given back.
func (u *unread) arrived() {
	if u.release() {
		u.stop()
	}
}

// grpcOpen reports whether a method needs no token: health checks and
// reflection.
func grpcOpen(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/grpc.health.") || strings.HasPrefix(fullMethod, "/grpc.reflection.")
}

// grpcFailures answers every failure of a method as the gRPC status of its
// Connect error (the codes are the same numbers; see
// [Layer.ConnectError]), and a panic as an internal error instead of
// crashing.
func (l *Layer) grpcFailures(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (resp any, err error) {
	if cancel, ok := ctx.Value(streamCancel{}).(context.CancelFunc); ok {
		defer cancel() // the stream's deadline is no longer needed
	}
	if u, ok := ctx.Value(streamUnread{}).(*unread); ok {
		u.arrived()
	}
	defer l.observeGRPC(ctx, info.FullMethod)
	defer func() {
		if p := recover(); p != nil {
			resp, err = nil, grpcStatus(l.ConnectError(ctx, info.FullMethod, l.panicked(ctx, info.FullMethod, p)))
		}
	}()
	// The decode budget, as on the main port: the decoded message holds its
	// size of the budget, and of its workspace's share, until its answer,
	// and a message past either is refused as busy. grpc-go reads a
	// message whole before any hook runs, so here the budget bounds what
	// messages being handled hold; what the transport holds before is
	// bounded per workspace by the unread streams it may have, the message
	// cap and the call's deadline.
	if m, ok := req.(proto.Message); ok && l.budget != nil {
		n := int64(proto.Size(m))
		share := l.budget.shareOf(call.Workspace(ctx))
		if !l.budget.take(share, n) {
			return nil, grpcStatus(ErrBusy)
		}
		defer l.budget.give(share, n)
	}
	resp, err = next(ctx, req)
	if err == nil {
		return resp, nil
	}
	if _, ok := status.FromError(err); ok {
		return nil, err
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		ce = l.ConnectError(ctx, info.FullMethod, err)
	}
	return nil, grpcStatus(ce)
}

// grpcStatus returns a Connect error as a gRPC status.
func grpcStatus(ce *connect.Error) error {
	return status.Error(codes.Code(ce.Code()), ce.Message())
}

// LimitListener returns ln accepting at most n connections at once: a
// client that opens connections holds at most n of them, each with its
// bounded streams.
func LimitListener(ln net.Listener, n int) net.Listener { return netutil.LimitListener(ln, n) }
