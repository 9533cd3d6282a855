package transport

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Long-lived streams. Every other call is one small message answered in
// microseconds, so both ports bound a call by the read and write timeouts
// together; a quota stream (Envoy's StreamRateLimitQuotas) stays open for
// as long as its Envoy runs, reporting every few seconds. Such a stream is
// authenticated as any call, when it opens; its first message (on the
// main port, its first bytes) must arrive within the read timeout, so that
// a stream that sends nothing holds nothing for long; after that it is
// bounded by its service (streams per connection and per workspace,
// buckets, a report at least every so often), by the connection's
// keepalive pings (a peer that stops answering them is dropped), and each
// message by [MaxRequestBytes].

// StreamRoute returns next, the handler of a long-lived stream, behind the
// layer: a panic is recovered and rendered, the caller authenticated from
// its headers before anything is read (and its connection trusted), as
// [Layer.Route] does; the server's read and write deadlines hold until the
// stream's first bytes arrive and are lifted then; each message, not the
// body, is capped (see [Layer.StreamHandlerOptions]). It is not timed: a
// stream lasts as long as its client keeps it.
func (l *Layer) StreamRoute(render Renderer, next http.Handler) http.Handler {
	return l.recover(render, l.authenticate(render, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// HTTP/1.1 cannot carry a bidirectional stream: connect-go
		// refuses it, within the deadlines it keeps.
		if r.ProtoMajor >= 2 {
			r.Body = &liftingBody{ReadCloser: r.Body, rc: http.NewResponseController(w)}
		}
		next.ServeHTTP(w, r)
	})))
}

// liftingBody is a stream's body that lifts the stream's deadlines once
// its first bytes have arrived. The HTTP/2 server takes a deadline's
// change from any goroutine.
type liftingBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	once sync.Once
}

func (b *liftingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.once.Do(func() {
			b.rc.SetReadDeadline(time.Time{})
			b.rc.SetWriteDeadline(time.Time{})
		})
	}
	return n, err
}

// StreamHandlerOptions are HandlerOptions for a long-lived stream: each
// message capped at MaxRequestBytes (the body of a stream is unbounded).
func (l *Layer) StreamHandlerOptions(c Codecs) []connect.HandlerOption {
	return append(l.HandlerOptions(c), connect.WithReadMaxBytes(MaxRequestBytes))
}

// firstMessage is a long-lived stream of the grpc-go port until its first
// message arrives: its place among its workspace's unread streams, and
// the timer that ends it if the message takes longer than the read
// timeout.
type firstMessage struct {
	unread *unread // nil: not counted
	timer  *time.Timer
	once   sync.Once
}

// arrived marks the first message arrived.
func (f *firstMessage) arrived() {
	f.once.Do(func() {
		f.timer.Stop()
		if f.unread != nil {
			f.unread.arrived()
		}
	})
}

type firstMessageKey struct{}

// awaitFirst returns ctx, a long-lived stream's, ended unless its first
// message arrives within within.
func awaitFirst(ctx context.Context, within time.Duration) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	f := &firstMessage{timer: time.AfterFunc(within, func() { cancel(context.DeadlineExceeded) })}
	return context.WithValue(ctx, firstMessageKey{}, f)
}

// firstOf returns the firstMessage of a long-lived stream's context.
func firstOf(ctx context.Context) *firstMessage {
	f, _ := ctx.Value(firstMessageKey{}).(*firstMessage)
	return f
}

// grpcStreamFailures answers the failure of a streaming method of the
// grpc-go port as grpcFailures answers a unary one's, and a panic as an
// internal error; a long-lived stream is marked read once its first
// message arrives (see awaitFirst).
func (l *Layer) grpcStreamFailures(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, next grpc.StreamHandler) (err error) {
	ctx := ss.Context()
	if f := firstOf(ctx); f != nil {
		defer f.arrived() // the timer stops, whatever ended the stream
		ss = &firstRecv{ServerStream: ss, first: f}
	}
	defer func() {
		if p := recover(); p != nil {
			err = grpcStatus(l.ConnectError(ctx, info.FullMethod, l.panicked(ctx, info.FullMethod, p)))
		}
	}()
	err = next(srv, ss)
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		ce = l.ConnectError(ctx, info.FullMethod, err)
	}
	return grpcStatus(ce)
}

// firstRecv is a long-lived stream that marks its first message arrived.
type firstRecv struct {
	grpc.ServerStream
	first *firstMessage
}

func (s *firstRecv) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.first.arrived()
	}
	return err
}
