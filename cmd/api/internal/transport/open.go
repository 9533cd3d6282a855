package transport

import (
	"compress/gzip"
	"net/http"

	"connectrpc.com/connect"
)

// OpenMessageBytes caps the body of a route that needs no token (gRPC
// health checks and reflection, whose requests name a service or a
// symbol), on the wire and once decompressed: a few hundred bytes serve
// them, and a caller nobody knows gets no more.
const OpenMessageBytes = 64 << 10

// Open returns next, a route that needs no token, behind the layer's other
// bounds: a panic is recovered and answered as an internal error; the body
// is capped at [OpenMessageBytes], and what is read of it comes out of the
// decode budget under one share for every caller of such routes, so that
// they can neither grow the heap nor take the budget from the tenants.
// Its connect-go handler must be built with [Layer.OpenHandlerOptions].
func (l *Layer) Open(next http.Handler) http.Handler {
	return l.recover(l.ConnectRenderer(), capBody(l.budget, OpenMessageBytes, openWorkspace, next))
}

// openWorkspace is the share of the budget the routes without a token
// take from: no key's workspace is empty.
func openWorkspace(*http.Request) string { return "" }

// OpenHandlerOptions returns the connect-go options of a route served by
// [Layer.Open]: gzip stops at OpenMessageBytes once decompressed (a small
// body that would inflate to gigabytes costs at most that), and so does
// connect-go's own read limit.
func (l *Layer) OpenHandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCompression("gzip",
			func() connect.Decompressor {
				return &cappedGzip{max: OpenMessageBytes, lease: lease{budget: l.budget, share: l.budget.shareOf("")}}
			},
			func() connect.Compressor { return gzip.NewWriter(nil) }),
		connect.WithReadMaxBytes(OpenMessageBytes),
	}
}
