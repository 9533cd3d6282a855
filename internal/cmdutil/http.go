package cmdutil

import "net/http"

// Protocols returns the protocols both commands serve on one port: HTTP/1.1,
// and HTTP/2 without TLS (h2c), which gRPC clients and restate-server
// speak.
func Protocols() *http.Protocols {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &p
}
