package main

import (
	"fmt"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
)

// jsonCodec is Connect's JSON codec with one change: it writes fields that
// hold their zero value. A denial then reads "success": false and a pass
// "retryAfter": "0" instead of leaving the keys out, which is what a person
// with curl (or a client in a loosely typed language) expects. 64-bit
// integers stay strings, as the protobuf JSON mapping requires. The Limit
// call's messages, nearly every call's, take a reflection-free path
// (fastjson.go) that reads and writes what protojson would.
type jsonCodec struct{ name string }

func (c jsonCodec) Name() string { return c.name }

func (jsonCodec) Marshal(v any) ([]byte, error) {
	if m, ok := v.(*ratelimitv1.LimitResponse); ok {
		return appendConnectLimitResponse(make([]byte, 0, 128), m), nil
	}
	msg, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", v)
	}
	return protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
}

func (jsonCodec) Unmarshal(data []byte, v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a protobuf message", v)
	}
	if len(data) == 0 {
		return fmt.Errorf("unmarshal %T: empty JSON body", v)
	}
	if m, ok := v.(*ratelimitv1.LimitRequest); ok && fastConnectLimitRequest(data, m) {
		return nil
	}
	if max, ok := batchEntries(v); ok && jsonEntries(data, false, max) > max {
		tooManyEntries(v, max)
		return nil
	}
	if _, ok := v.(*rlsv3.RateLimitRequest); ok && rlsJSONTooLarge(data) {
		tooManyEntries(v, envoyrls.MaxDescriptors)
		return nil
	}
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, msg)
}
