package transport

import (
	"bytes"
	"context"
	"crypto/rand"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/unkeyed/ratelimit/internal/invalid"
)

// A request whose JSON the codec refuses carries its failure to the
// handler's interceptor in the message itself. connect-go wraps a codec's
// error in its own words (an interceptor's it does not), so the codec
// empties the message, writes the failure into its unknown fields under
// refusalField, stamped with this process's refusalMark, and reports
// success; the interceptor reads it there and answers it. Nothing outside
// the request holds it, and a client cannot forge one in a protobuf
// request: the mark is random per process.

// refusalField is the field number of a refusal: the largest a message
// may have, which no message of the API uses.
const refusalField = protowire.MaxValidNumber

// refusalMark opens every refusal of this process.
var refusalMark = func() []byte {
	b := make([]byte, 16)
	rand.Read(b)
	return b
}()

// refuse empties msg and writes e into it, for the interceptor.
func refuse(msg proto.Message, e *invalid.Error) {
	proto.Reset(msg)
	payload := append([]byte(nil), refusalMark...)
	payload = protowire.AppendString(payload, e.Field)
	payload = protowire.AppendString(payload, e.Rule)
	raw := protowire.AppendTag(nil, refusalField, protowire.BytesType)
	msg.ProtoReflect().SetUnknown(protowire.AppendBytes(raw, payload))
}

// refusalOf returns the refusal refuse wrote into msg, if it holds one.
func refusalOf(msg any) (*invalid.Error, bool) {
	m, ok := msg.(proto.Message)
	if !ok {
		return nil, false
	}
	raw := m.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return nil, false
		}
		raw = raw[n:]
		if num != refusalField || typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, raw); n < 0 {
				return nil, false
			}
			raw = raw[n:]
			continue
		}
		payload, n := protowire.ConsumeBytes(raw)
		if n < 0 || !bytes.HasPrefix(payload, refusalMark) {
			return nil, false
		}
		payload = payload[len(refusalMark):]
		field, n := protowire.ConsumeString(payload)
		if n < 0 {
			return nil, false
		}
		rule, m := protowire.ConsumeString(payload[n:])
		if m < 0 {
			return nil, false
		}
		return &invalid.Error{Field: field, Rule: rule}, true
	}
	return nil, false
}

// decodeFailures is the interceptor that answers a refused request with its
// failure, classified as any failure of a request (failure.Classify).
type decodeFailures struct{ l *Layer }

func (d decodeFailures) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if e, ok := refusalOf(req.Any()); ok {
			return nil, d.l.ConnectError(ctx, req.Spec().Procedure, e)
		}
		return next(ctx, req)
	}
}

func (d decodeFailures) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (d decodeFailures) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
