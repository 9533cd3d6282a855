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
}

// HTTPServer returns an HTTP server for handler with l's bounds, speaking
// HTTP/1.1 and h2c (HTTP/2 without TLS, for gRPC clients).
func (l Limits) HTTPServer(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:        handler,
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
