package transport

import (
	"crypto/rand"
	"encoding/hex"
)

// NewRequestID returns a new request id, "req_" and 16 hex digits: the id
// an internal error is logged under and its caller is told, and Unkey's
// meta.requestId.
func NewRequestID() string {
	var b [8]byte
	rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}
