package unkeyv2

import (
	"math/rand/v2"
	"testing"

	json "github.com/go-json-experiment/json"
)

// TestLimitAnswerAsWriteJSON: the hand-written answer of the limit route is
// byte for byte what writeJSON (encoding/json/v2) writes for it, for random
// numbers and for ids that need escaping or not.
func TestLimitAnswerAsWriteJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ids := []string{"", "ovr_6f1c0a", "odd<id>&\"é\\", "tab\there", "\u2028"}
	for range 1000 {
		d := &limitData{Limit: rng.Int64() - rng.Int64(), Remaining: rng.Int64N(1 << 53), Reset: rng.Int64(),
			Success: rng.IntN(2) == 0, OverrideID: ids[rng.IntN(len(ids))], Reservation: ids[rng.IntN(len(ids))]}
		requestID := []string{"req_0123456789abcdef", "req_<x>"}[rng.IntN(2)]
		want, err := json.Marshal(success{Data: d, Meta: meta{RequestID: requestID}})
		if err != nil {
			t.Fatal(err)
		}
		if got := appendSuccess(nil, d, requestID); string(got) != string(want)+"\n" {
			t.Fatalf("hand-written %s\nencoding/json/v2 %s", got, want)
		}
	}
}
