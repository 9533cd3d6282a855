package main

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"connectrpc.com/connect"
)

// errBodyTooLarge is the validation error of an oversized request message.
// It is a Connect error so that connect-go hands it to the client as it is,
// with the code every other validation error has, in whichever protocol the
// client speaks.
var errBodyTooLarge = connect.NewError(connect.CodeInvalidArgument,
	fmt.Errorf("request body: must be at most %d bytes (1 MiB)", maxRequestBytes))

// grpcEnvelopeBytes is the prefix gRPC and gRPC-Web put before a message: a
// flags byte and a 4-byte length. The cap is on the message, so a gRPC body
// may be this much longer.
const grpcEnvelopeBytes = 5

// limitBody caps the request body at maxRequestBytes of message: the body
// itself for Connect, the body less its envelope for gRPC and gRPC-Web.
// Reading past the cap fails with errBodyTooLarge; nothing of such a request
// is decoded or counted. Compressed messages are capped after decompression
// by cappedGzip. The bytes read come out of budget until the request is
// answered.
func limitBody(budget *decodeBudget, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		limit := int64(maxRequestBytes)
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			limit += grpcEnvelopeBytes
		}
		body := &cappedBody{ReadCloser: r.Body, left: limit, lease: lease{budget: budget}}
		defer body.lease.release()
		r.Body = body
		next.ServeHTTP(w, r)
	})
}

type cappedBody struct {
	io.ReadCloser
	left  int64
	lease lease
}

func (b *cappedBody) Read(p []byte) (int, error) {
	n, err := readCapped(b.ReadCloser, &b.left, p)
	if leaseErr := b.lease.take(n); leaseErr != nil {
		return 0, leaseErr
	}
	return n, err
}

// readCapped reads from r into p while *left allows, and fails with
// errBodyTooLarge once r has more to give than *left.
func readCapped(r io.Reader, left *int64, p []byte) (int, error) {
	if *left <= 0 {
		// At the cap: the message is fine only if nothing follows.
		var one [1]byte
		n, err := r.Read(one[:])
		if n > 0 {
			return 0, errBodyTooLarge
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
// errBodyTooLarge once a message expands past maxRequestBytes, so a small
// body that inflates to gigabytes costs at most 1 MiB of work. What it
// produces comes out of the decode budget until it is closed.
type cappedGzip struct {
	gz    gzip.Reader
	left  int64
	lease lease
}

// newCappedGzip returns the constructor of decompressors drawing on budget.
func newCappedGzip(budget *decodeBudget) func() connect.Decompressor {
	return func() connect.Decompressor { return &cappedGzip{lease: lease{budget: budget}} }
}

func (d *cappedGzip) Read(p []byte) (int, error) {
	n, err := readCapped(&d.gz, &d.left, p)
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
	d.left = maxRequestBytes
	return d.gz.Reset(r)
}

// newGzipCompressor returns the compressor of answers (the standard one).
func newGzipCompressor() connect.Compressor { return gzip.NewWriter(nil) }
