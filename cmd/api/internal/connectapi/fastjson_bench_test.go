package connectapi

import (
	"testing"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
)

// BenchmarkFastLimitRequest reads the common Limit body on the fast path.
func BenchmarkFastLimitRequest(b *testing.B) {
	body := []byte(`{"namespace":"api.requests","identifier":"user_1234567","limit":100,"duration":"60000","cost":1}`)
	b.ReportAllocs()
	for b.Loop() {
		var m ratelimitv1.LimitRequest
		if !fastLimitRequest(body, &m) {
			b.Fatal("not read")
		}
	}
}
