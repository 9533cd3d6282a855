package transport

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/call"
	"github.com/unkeyed/ratelimit/internal/invalid"
)

// MaxRequestBytes bounds a request message: 100 limits of two
// 255-character names take under 120 KiB, and a BatchLimit of a thousand
// about 520 KiB, so 1 MiB is generous.
const MaxRequestBytes = 1 << 20

// ErrBodyTooLarge refuses a request message over [MaxRequestBytes], on the
// wire or once decompressed: a validation error of the field "request
// body", inside a Connect error of its code so that connect-go hands it to
// the client as it is, in whichever protocol the client speaks.
var ErrBodyTooLarge = connect.NewError(connect.CodeInvalidArgument, &invalid.Error{
	Field: "request body", Rule: fmt.Sprintf("must be at most %d bytes (1 MiB)", MaxRequestBytes)})

// tooLargeError refuses a message over max bytes: ErrBodyTooLarge for
// MaxRequestBytes, the same words with max for a route of its own cap.
func tooLargeError(max int64) error {
	if max == MaxRequestBytes {
		return ErrBodyTooLarge
	}
	return connect.NewError(connect.CodeInvalidArgument, &invalid.Error{
		Field: "request body", Rule: fmt.Sprintf("must be at most %d bytes", max)})
}

// grpcEnvelopeBytes is the prefix gRPC and gRPC-Web put before a message: a
// flags byte and a 4-byte length. The cap is on the message, so a gRPC body
// may be this much longer.
const grpcEnvelopeBytes = 5

// limitBody caps the request body at MaxRequestBytes of message: the body
// itself for Connect and JSON, the body less its envelope for gRPC and
// gRPC-Web. Reading past the cap fails with ErrBodyTooLarge; nothing of such
// a request is decoded or counted. Compressed messages are capped after
// decompression by the codecs' gzip (see [HandlerOptions]). The bytes read
// come out of budget, and of the caller's workspace's share of it (the
// principal is in the request's context by then), until the body has been
// read to its end or the request is answered.
func limitBody(budget *Budget, next http.Handler) http.Handler {
	return capBody(budget, MaxRequestBytes, func(r *http.Request) string { return call.Workspace(r.Context()) }, next)
}

// capBody caps the request body at max bytes of message, as limitBody
// does, taking what is read from budget under the share of workspace(r).
func capBody(budget *Budget, max int64, workspace func(*http.Request) string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := max
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			limit += grpcEnvelopeBytes
		}
		body := &cappedBody{ReadCloser: r.Body, left: limit, tooLarge: tooLargeError(max),
			lease: lease{budget: budget, share: budget.shareOf(workspace(r))}}
		defer body.lease.release()
		r.Body = body
		next.ServeHTTP(w, r)
	})
}

type cappedBody struct {
	io.ReadCloser
	left     int64
	tooLarge error
	lease    lease
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := readCapped(b.ReadCloser, &b.left, p)
	if err == ErrBodyTooLarge {
		err = b.tooLarge
	}
	if leaseErr := b.lease.take(n); leaseErr != nil {
		return 0, leaseErr
	}
	if err != nil {
		// The message is whole (or will never be): the bytes are the
		// reader's now, to be decoded at once, and no longer held by a
		// body that may stall.
		b.lease.release()
	}
	return n, err
}

// readCapped reads from r into p while *left allows, and fails with
// ErrBodyTooLarge once r has more to give than *left.
func readCapped(r io.Reader, left *int64, p []byte) (int, error) {
	if *left <= 0 {
		// At the cap: the message is fine only if nothing follows.
		var one [1]byte
		n, err := r.Read(one[:])
		if n > 0 {
			return 0, ErrBodyTooLarge
		}
		if err == nil {
			err = io.ErrNoProgress
		}
		if errors.Is(err, io.EOF) {
			return 0, io.EOF
		}
		return 0, err
	}
	if int64(len(p)) > *left {
		p = p[:*left]
	}
	n, err := r.Read(p)
	*left -= int64(n)
	return n, err
}

// cappedGzip is the gzip decompressor of the API: it stops with
// ErrBodyTooLarge once a message expands past MaxRequestBytes, so a small
// body that inflates to gigabytes costs at most 1 MiB of work. What it
// produces comes out of the decode budget until it is closed.
type cappedGzip struct {
	gz    gzip.Reader
	max   int64 // MaxRequestBytes, or the smaller cap of a route
	left  int64
	lease lease
}

func (d *cappedGzip) Read(p []byte) (int, error) {
	n, err := readCapped(&d.gz, &d.left, p)
	if err == ErrBodyTooLarge {
		err = tooLargeError(d.max)
	}
	if leaseErr := d.lease.take(n); leaseErr != nil {
		return 0, leaseErr
	}
	return n, err
}

func (d *cappedGzip) Close() error {
	d.lease.release()
	return d.gz.Close()
}

func (d *cappedGzip) Reset(r io.Reader) error {
	d.lease.release()
	d.left = d.max
	return d.gz.Reset(r)
}
