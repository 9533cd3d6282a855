package envoyrls

import (
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// BenchmarkFastRateLimitRequest reads /json's common body on the fast
// path.
func BenchmarkFastRateLimitRequest(b *testing.B) {
	body := []byte(`{"domain":"bench","descriptors":[{"entries":[{"key":"user","value":"u_1"},{"key":"path","value":"/v1/chat"}]}],"hitsAddend":1}`)
	b.ReportAllocs()
	for b.Loop() {
		var m rlsv3.RateLimitRequest
		if !fastRateLimitRequest(body, &m) {
			b.Fatal("not read")
		}
	}
}
