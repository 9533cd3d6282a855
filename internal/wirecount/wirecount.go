// Package wirecount counts the entries of an encoded request, protobuf or
// JSON, without decoding it: what an adapter refuses an oversized batch by
// before the decoder materialises it.
package wirecount

import (
	"bytes"
	"sync"

	"github.com/go-json-experiment/json/jsontext"
	"google.golang.org/protobuf/encoding/protowire"
)

// A request's size on the wire says little about what decoding it costs:
// 1 MiB of "{}," is 349,525 empty entries, about 65 MB of decoded
// messages. So adapters count the entries of a batch in the encoded
// message, without materialising anything, and refuse a message with more
// than its RPC allows before it is decoded.

// ProtoFields counts the occurrences of field number field at the top level
// of the protobuf message data, up to stop. A malformed message stops the
// count: proto.Unmarshal then says what is wrong.
func ProtoFields(data []byte, field protowire.Number, stop int) int {
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
		if num == field {
			n++
		}
		data = data[tagLen+valLen:]
	}
	return n
}

// Arrays names the arrays of a JSON document whose values [JSONValues]
// counts.
type Arrays int

const (
	// EveryArray is every array, at any depth.
	EveryArray Arrays = iota
	// RootArray is the document itself, an array.
	RootArray
	// MemberArrays are the arrays that are members of the document, an
	// object.
	MemberArrays
)

// counts reports whether the next value read by d, whose innermost open
// container is an array, is one that a counts.
func (a Arrays) counts(d *jsontext.Decoder) bool {
	depth := d.StackDepth()
	if kind, _ := d.StackIndex(depth); kind != '[' {
		return false
	}
	switch a {
	case RootArray:
		return depth == 1
	case MemberArrays:
		outer, _ := d.StackIndex(1)
		return depth == 2 && outer == '{'
	}
	return true
}

// countDecoder is a pooled tokenizer over a document held in memory.
type countDecoder struct {
	buf bytes.Buffer
	dec jsontext.Decoder
}

var countDecoders = sync.Pool{New: func() any { return new(countDecoder) }}

// JSONValues counts the values of the arrays of a JSON document that a
// names, up to stop, with jsontext's tokenizer: it reads each token once
// (skipping an entry whole where nothing inside it counts) and allocates
// nothing (the tokenizer reads the document in place and is
// reused). A malformed document stops the count, and the decoder then says
// what is wrong. Duplicate names are not looked for here, which would
// allocate: the decoder refuses them.
func JSONValues(data []byte, a Arrays, stop int) int {
	c := countDecoders.Get().(*countDecoder)
	defer countDecoders.Put(c)
	c.buf = *bytes.NewBuffer(data)
	c.dec.Reset(&c.buf, jsontext.AllowDuplicateNames(true))
	defer func() {
		// Keep no reference to data in the pool.
		c.buf = bytes.Buffer{}
		c.dec.Reset(&c.buf)
	}()
	n := 0
	for n <= stop {
		kind := c.dec.PeekKind()
		if kind == 0 { // the end, or malformed
			break
		}
		if kind != ']' && kind != '}' && a.counts(&c.dec) {
			n++
			if a != EveryArray {
				// Nothing inside an entry is counted: skip it whole.
				if c.dec.SkipValue() != nil {
					break
				}
				continue
			}
		}
		if _, err := c.dec.ReadToken(); err != nil {
			break
		}
	}
	return n
}
