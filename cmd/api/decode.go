package main

import (
	"fmt"
	"sync/atomic"

	"connectrpc.com/connect"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// A request's size on the wire says little about what decoding it costs: 1
// MiB of "{}," is 349,525 empty entries, about 65 MB of decoded messages.
// So the entries of a batch are counted in the encoded message, without
// materialising anything, and a message with more than its RPC allows is
// refused before it is decoded; and the bytes of every message being read or
// decompressed at once come out of one budget.

// batchEntries returns how many entries msg's RPC allows, and whether msg
// is a batch at all.
func batchEntries(msg any) (int, bool) {
	switch msg.(type) {
	case *ratelimitv1.BatchLimitRequest:
		return pipeline.MaxBatchLimit, true
	case *ratelimitv1.MultiLimitRequest:
		return ratelimit.MaxBatch, true
	}
	return 0, false
}

// tooManyEntries leaves msg, a batch (or an Envoy request) whose encoding
// holds more entries than max, with max+1 empty entries instead of decoding
// it: the handler's validation then refuses it with the same message as any
// request over its bound, and nothing of the entries was materialised.
func tooManyEntries(msg any, max int) {
	switch m := msg.(type) {
	case *ratelimitv1.BatchLimitRequest:
		m.Reset()
		m.Limits = make([]*ratelimitv1.LimitRequest, max+1)
	case *ratelimitv1.MultiLimitRequest:
		m.Reset()
		m.Limits = make([]*ratelimitv1.LimitRequest, max+1)
	case *rlsv3.RateLimitRequest:
		m.Reset()
		m.Descriptors = make([]*rlcommonv3.RateLimitDescriptor, max+1)
	}
}

// protoEntries counts the occurrences of field 1 (limits, in both batch
// messages) at the top level of a protobuf message, up to stop. A malformed
// message stops the count: proto.Unmarshal then says what is wrong.
func protoEntries(data []byte, stop int) int {
	n := 0
	for len(data) > 0 && n <= stop {
		num, typ, tagLen := protowire.ConsumeTag(data)
		if tagLen < 0 {
			return n
		}
		valLen := protowire.ConsumeFieldValue(num, typ, data[tagLen:])
		if valLen < 0 {
			return n
		}
		if num == 1 {
			n++
		}
		data = data[tagLen+valLen:]
	}
	return n
}

// jsonEntries counts the values of the batch array of a JSON document, up
// to stop: the top-level array if rootArray, else the arrays that are
// members of the top-level object.
func jsonEntries(data []byte, rootArray bool, stop int) int {
	if rootArray {
		return jsonArrayValues(data, rootArrayValues, stop)
	}
	return jsonArrayValues(data, memberArrayValues, stop)
}

// arrayScope says which arrays' values jsonArrayValues counts.
type arrayScope int

const (
	everyArrayValue   arrayScope = iota // the values of every array, at any depth
	rootArrayValues                     // the values of the top-level array
	memberArrayValues                   // the values of the arrays that are members of the top-level object
)

// counts reports whether a value that begins in the innermost of the open
// containers is one that s counts.
func (s arrayScope) counts(open []byte) bool {
	if len(open) == 0 || open[len(open)-1] != '[' {
		return false
	}
	switch s {
	case rootArrayValues:
		return len(open) == 1
	case memberArrayValues:
		return len(open) == 2 && open[0] == '{'
	}
	return true
}

// jsonArrayValues counts the values of the arrays of a JSON document that
// scope names, up to stop. It looks at each byte once and allocates nothing
// for documents nested up to 64 deep; a malformed document stops or skews
// the count, and the decoder then says what is wrong.
func jsonArrayValues(data []byte, scope arrayScope, stop int) int {
	var stack [64]byte
	open := stack[:0] // the containers, innermost last
	n := 0
	inString, escaped, expecting := false, false, false
	for _, c := range data {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r', ':':
			continue
		case ',':
			expecting = scope.counts(open)
			continue
		case '}', ']':
			if len(open) > 0 {
				open = open[:len(open)-1]
			}
			expecting = false
			continue
		}
		if expecting {
			n++
			if n > stop {
				return n
			}
			expecting = false
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			open = append(open, c)
			expecting = scope.counts(open)
		}
	}
	return n
}

// protoCodec is Connect's protobuf codec, counting a batch's entries before
// decoding it.
type protoCodec struct{}

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(v any) ([]byte, error) {
	msg, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", v)
	}
	return proto.Marshal(msg)
}

func (protoCodec) Unmarshal(data []byte, v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a protobuf message", v)
	}
	if max, ok := batchEntries(v); ok && protoEntries(data, max) > max {
		tooManyEntries(v, max)
		return nil
	}
	if _, ok := v.(*rlsv3.RateLimitRequest); ok && rlsTooLarge(data) {
		tooManyEntries(v, envoyrls.MaxDescriptors)
		return nil
	}
	return proto.Unmarshal(data, msg)
}

// decodeBudget bounds the bytes of request messages being read and
// decompressed at once, across every request of the process. Reading past
// it fails the request with resource_exhausted (429 on the Unkey routes)
// instead of growing the heap: the client may retry.
type decodeBudget struct {
	max   int64
	inUse atomic.Int64
}

// defaultDecodeBudget is 64 MiB: 64 messages of the largest size, or tens
// of thousands of ordinary ones (a Limit call is about 200 bytes), in
// flight at once. What a request holds is given back when it is answered;
// a decompressor's output, once it has been decompressed.
const defaultDecodeBudget = 64 << 20

// errDecodeBudget answers a request refused for want of decode budget.
var errDecodeBudget = connect.NewError(connect.CodeResourceExhausted,
	fmt.Errorf("server busy: too many large requests are being read at once; retry shortly"))

// take reserves n bytes, or reports that the budget is spent.
func (b *decodeBudget) take(n int64) bool {
	if b.inUse.Add(n) > b.max {
		b.inUse.Add(-n)
		return false
	}
	return true
}

// give returns n bytes.
func (b *decodeBudget) give(n int64) { b.inUse.Add(-n) }

// lease is what one reader took from a budget; release gives it all back.
type lease struct {
	budget *decodeBudget
	held   int64
}

// take reserves n more bytes for the lease.
func (l *lease) take(n int) error {
	if n <= 0 || l.budget == nil {
		return nil
	}
	if !l.budget.take(int64(n)) {
		return errDecodeBudget
	}
	l.held += int64(n)
	return nil
}

// release gives back everything the lease holds.
func (l *lease) release() {
	if l.budget != nil && l.held > 0 {
		l.budget.give(l.held)
		l.held = 0
	}
}

// jsonElements counts the values of every array of a JSON document, at any
// depth, up to stop.
func jsonElements(data []byte, stop int) int {
	return jsonArrayValues(data, everyArrayValue, stop)
}
