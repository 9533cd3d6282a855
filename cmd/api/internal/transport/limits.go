package transport

import (
	"net/http"
	"time"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
)

// Limits bound what one client can hold of a server: connections, streams,
// header bytes and time. Every request is a small message answered in
// microseconds, so a client that is slower than these bounds is stuck or
// hostile; without them, one that opens a request and never finishes its
// body, keeps idle connections or opens hundreds of HTTP/2 streams holds a
// goroutine and buffers for each, before any token is checked.
type Limits struct {
	// ReadTimeout bounds reading a whole request, headers and body; for
	// HTTP/2 it applies to each stream.
	ReadTimeout time.Duration
	// WriteTimeout bounds a request from the end of its headers to the end
	// of its answer.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections (and HTTP/2 connections
	// without streams) that carry nothing for this long.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds the request line and headers (HTTP/1.1) or the
	// header list (HTTP/2). A bearer token and gRPC's headers take a few
	// hundred bytes.
	MaxHeaderBytes int
	// MaxConcurrentStreams bounds the HTTP/2 streams one connection may
	// have open at once.
	MaxConcurrentStreams int
	// UnreadPerWorkspace bounds the calls of one workspace on the grpc-go
	// port whose message has not all arrived (0: no bound). grpc-go
	// buffers a message whole before any hook of the layer sees it, so
	// this, the message cap and the call's deadline (ReadTimeout and
	// WriteTimeout together) are what bound the memory one key's
	// unfinished messages hold there.
	UnreadPerWorkspace int
}

// HTTPServer returns an HTTP server for handler with l's bounds, speaking
// HTTP/1.1 and h2c (HTTP/2 without TLS, for gRPC clients). A connection
// that has carried no authenticated request of a [Layer] route is closed
// after ReadTimeout once it answers nothing, and at the latest
// ReadTimeout and WriteTimeout after that (see conns.go); the caller caps
// the connections (see LimitListener).
func (l Limits) HTTPServer(handler http.Handler) *http.Server {
	conns := &connStates{deadline: l.ReadTimeout, grace: l.ReadTimeout + l.WriteTimeout}
	return &http.Server{
		Handler:        handler,
		ConnContext:    conns.connContext,
		ConnState:      conns.connState,
		Protocols:      cmdutil.Protocols(),
		ReadTimeout:    l.ReadTimeout,
		WriteTimeout:   l.WriteTimeout,
		IdleTimeout:    l.IdleTimeout,
		MaxHeaderBytes: l.MaxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: l.MaxConcurrentStreams,
			// A connection whose peer stops answering pings is closed
			// instead of holding its streams until the OS gives up.
			SendPingTimeout: l.IdleTimeout,
			PingTimeout:     l.ReadTimeout,
		},
	}
}
