package transport

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/unkeyed/ratelimit/internal/invalid"
)

// Codecs are an adapter's own handling of the messages it knows, before
// and instead of the generic protobuf and JSON codecs.
type Codecs struct {
	// Decode, if set, is given every encoded request message before it is
	// decoded, with json true for JSON; it reports whether it took care
	// of msg itself. An adapter refuses an oversized batch there, counting
	// its entries in the encoding and leaving msg with one entry more than
	// its RPC allows instead of decoding it, so that validation refuses it
	// by the rule of any request over the bound; or decodes a common shape
	// without reflection.
	Decode func(data []byte, msg any, json bool) bool
	// EncodeJSON, if set, is given every answer before it is encoded as
	// JSON, and returns its encoding if it took care of it.
	EncodeJSON func(msg any) ([]byte, bool)
	// Required names the fields a JSON request of each of the adapter's
	// messages must give; one left out (or given as its zero) is refused
	// naming it. The layer knows no protocol's messages: the adapter says.
	Required Required
}

// compressMinBytes is the smallest answer compressed for a client that
// accepts gzip.
const compressMinBytes = 1024

// HandlerOptions returns the connect-go handler options of every route of
// the layer: c's codecs for protobuf and JSON, and gzip capped at
// [MaxRequestBytes] once decompressed.
//
// The 1 MiB cap on a message is the layer's (on the wire) and its gzip's
// (after decompression), not connect-go's read limit: theirs answers
// invalid_argument with the documented message in every protocol, and caps
// the message, not a gRPC envelope. An answer is tens of bytes: compressing
// it costs more CPU (about a sixth of a gRPC call's) than it saves on the
// wire, so only answers of a kilobyte or more (large batches) are
// compressed for the clients that accept it.
func (l *Layer) HandlerOptions(c Codecs) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &cappedGzip{max: MaxRequestBytes, lease: lease{budget: l.budget}} },
			func() connect.Compressor { return gzip.NewWriter(nil) }),
		connect.WithCompressMinBytes(compressMinBytes),
		connect.WithCodec(protoCodec{c}),
		connect.WithCodec(jsonCodec{name: "json", c: c}),
		connect.WithCodec(jsonCodec{name: "json; charset=utf-8", c: c}),
		connect.WithInterceptors(decodeFailures{l}),
	}
}

// protoCodec is connect-go's protobuf codec, with the adapter's Decode
// first.
type protoCodec struct{ c Codecs }

func (protoCodec) Name() string { return "proto" }

func (protoCodec) Marshal(v any) ([]byte, error) {
	msg, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", v)
	}
	return proto.Marshal(msg)
}

func (p protoCodec) Unmarshal(data []byte, v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a protobuf message", v)
	}
	if p.c.Decode != nil && p.c.Decode(data, v, false) {
		return nil
	}
	return proto.Unmarshal(data, msg)
}

// jsonCodec is connect-go's JSON codec with the adapter's hooks first and
// one change: it writes fields that hold their zero value. A denial then
// reads "success": false and a pass "retryAfter": "0" instead of leaving
// the keys out, which is what a person with curl (or a client in a loosely
// typed language) expects. 64-bit integers stay strings, as the protobuf
// JSON mapping requires. Unknown fields are refused; a request the decoder
// refuses, or that may lack a required field, is read again by CheckJSON,
// so that an unknown field, a wrong type or a missing required field is
// refused naming the field, with no decoder text.
type jsonCodec struct {
	name string
	c    Codecs
}

func (j jsonCodec) Name() string { return j.name }

func (j jsonCodec) Marshal(v any) ([]byte, error) {
	if j.c.EncodeJSON != nil {
		if b, ok := j.c.EncodeJSON(v); ok {
			return b, nil
		}
	}
	msg, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal %T: not a protobuf message", v)
	}
	return ProtoJSON(msg, true)
}

// ProtoJSON encodes msg in protobuf's JSON mapping (with the fields that
// hold their zero value where emitZero), compact: protojson spaces its
// output at random on purpose, so that no one relies on its bytes, and the
// adapters' fast encoders write compact JSON; one protocol answers in one
// style whichever encoder wrote an answer.
func ProtoJSON(msg proto.Message, emitZero bool) ([]byte, error) {
	b, err := protojson.MarshalOptions{EmitUnpopulated: emitZero}.Marshal(msg)
	if err != nil {
		return nil, err
	}
	return compact(b), nil
}

// compact returns b, valid JSON, without the whitespace between its
// tokens (b itself if it is not valid JSON, or holds no space or line
// break at all: most answers, which are then not copied).
func compact(b []byte) []byte {
	if !bytes.ContainsAny(b, " \n") {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b))
	if err := json.Compact(&out, b); err != nil {
		return b
	}
	return out.Bytes()
}

func (j jsonCodec) Unmarshal(data []byte, v any) error {
	msg, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal into %T: not a protobuf message", v)
	}
	if j.c.Decode != nil && len(data) > 0 && j.c.Decode(data, v, true) {
		return nil
	}
	// The strict decoder first: a request it takes with every required
	// field set is read once. Only a refusal, or a required field that may
	// be missing (or given as its zero), is read again by CheckJSON, to
	// name the field in the API's words.
	err := protojson.Unmarshal(data, msg)
	if err == nil && !j.c.Required.maybeMissing(msg.ProtoReflect()) {
		return nil
	}
	generic := &invalid.Error{Field: "body", Rule: "must be a JSON object of the RPC's request; see its fields in docs/api-reference.md"}
	var refusal *invalid.Error
	if cerr := CheckJSON(data, msg.ProtoReflect().Descriptor(), j.c.Required); cerr != nil {
		var ok bool
		if refusal, ok = invalid.As(cerr); !ok {
			refusal = generic
		}
	} else if err != nil {
		refusal = generic
	}
	if refusal != nil {
		refuse(msg, refusal) // for the interceptor: see refusal.go
	}
	return nil
}

// JSONCodec returns the layer's JSON codec with c's hooks, as
// [Layer.HandlerOptions] installs it, for tests and tools that decode a
// message as a route would.
func JSONCodec(c Codecs) connect.Codec { return jsonCodec{name: "json", c: c} }
