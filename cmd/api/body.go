package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"

	"connectrpc.com/connect"
)

// errBodyTooLarge is the validation error of an oversized request body. It
// is a Connect error so that connect-go hands it to the client as it is,
// with the code every other validation error has, in whichever protocol the
// client speaks.
var errBodyTooLarge = connect.NewError(connect.CodeInvalidArgument,
	fmt.Errorf("request body: must be at most %d bytes (1 MiB)", maxRequestBytes))

// limitBody caps request bodies at maxRequestBytes. Reading past the cap
// fails with errBodyTooLarge; nothing of such a request is decoded or
// counted.
func limitBody(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = &cappedBody{ReadCloser: r.Body, left: maxRequestBytes}
		next.ServeHTTP(w, r)
	})
}

type cappedBody struct {
	io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// At the cap: the body is fine only if nothing follows.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
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
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}
