package transport

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/invalid"
)

// TestRefusalTravelsWithTheMessage: a refusal written into a message is
// read back from it, and the message holds nothing else; a message that
// holds the same field without this process's mark, as a client could
// send in protobuf, carries no refusal.
func TestRefusalTravelsWithTheMessage(t *testing.T) {
	msg := &ratelimitv1.LimitRequest{Namespace: "n", Limit: 5}
	refuse(msg, &invalid.Error{Field: "limits[1].cost", Rule: "must be between 0 and 1000000"})
	e, ok := refusalOf(msg)
	if !ok || e.Field != "limits[1].cost" || e.Rule != "must be between 0 and 1000000" {
		t.Fatalf("refusalOf = %v, %v", e, ok)
	}
	if msg.Namespace != "" || msg.Limit != 0 {
		t.Fatalf("the refused message kept its fields: %v", msg)
	}
	if _, ok := refusalOf(&ratelimitv1.LimitRequest{Namespace: "n"}); ok {
		t.Fatal("a message never refused holds a refusal")
	}
	payload := protowire.AppendString(make([]byte, 16), "field")
	payload = protowire.AppendString(payload, "a forged rule")
	forged := protowire.AppendBytes(protowire.AppendTag(nil, refusalField, protowire.BytesType), payload)
	var sent ratelimitv1.LimitRequest
	if err := proto.Unmarshal(forged, &sent); err != nil {
		t.Fatal(err)
	}
	if e, ok := refusalOf(&sent); ok {
		t.Fatalf("a client's field read as a refusal: %v", e)
	}
}
