// Package transport is the HTTP and gRPC layer every protocol adapter of the
// API stands on: the bounds on what one client may hold (connections,
// streams, headers, time), the 1 MiB cap on a request message, the decode
// budget shared by every request being read, authentication before any of
// the body is read (by the keys it is given: package access), request ids,
// one panic recovery, the rendering of failures (package failure) that is
// the same for every protocol (an internal
// error is logged under a request id and answered without its detail), the
// JSON answers of a path or an HTTP method that no route takes (routes.go),
// the codecs of connect-go handlers, and the grpc-go server of
// UNKEY_GRPC_ADDR.
//
// It knows no use case: an adapter (package connectapi, unkeyv2 or
// envoyrls) translates its wire format to the pipeline's calls and back, and says how a failure is
// answered in its protocol (a [Renderer]); it takes everything else from
// here, so that a bound or a check added here holds on every route.
package transport
