package main

import (
	"net/http"
	"time"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
)

// connLimits bounds what one client can hold of the server: connections,
// streams, header bytes and time. Every request is a small message answered
// in microseconds, so a client that is slower than these bounds is stuck or
// hostile; without them, one that opens a request and never finishes its body,
// keeps idle connections or opens hundreds of HTTP/2 streams holds a goroutine
// and buffers for each, before any token is checked.
type connLimits struct {
	// readTimeout bounds reading a whole request, headers and body; for
	// HTTP/2 it applies to each stream.
	readTimeout time.Duration
	// writeTimeout bounds a request from the end of its headers to the end
	// of its answer.
	writeTimeout time.Duration
	// idleTimeout closes keep-alive connections (and HTTP/2 connections
	// without streams) that carry nothing for this long.
	idleTimeout time.Duration
	// maxHeaderBytes bounds the request line and headers (HTTP/1.1) or the
	// header list (HTTP/2). A bearer token and gRPC's headers take a few
	// hundred bytes.
	maxHeaderBytes int
	// maxConcurrentStreams bounds the HTTP/2 streams one connection may
	// have open at once.
	maxConcurrentStreams int
}

// server returns an HTTP server for handler with l's bounds, speaking
// HTTP/1.1 and h2c (HTTP/2 without TLS, for gRPC clients).
func (l connLimits) server(handler http.Handler) *http.Server {
	return &http.Server{
		Handler:        handler,
		Protocols:      cmdutil.Protocols(),
		ReadTimeout:    l.readTimeout,
		WriteTimeout:   l.writeTimeout,
		IdleTimeout:    l.idleTimeout,
		MaxHeaderBytes: l.maxHeaderBytes,
		HTTP2: &http.HTTP2Config{
			MaxConcurrentStreams: l.maxConcurrentStreams,
			// A connection whose peer stops answering pings is closed
			// instead of holding its streams until the OS gives up.
			SendPingTimeout: l.idleTimeout,
			PingTimeout:     l.readTimeout,
		},
	}
}
