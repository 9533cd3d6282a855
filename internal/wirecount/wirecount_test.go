package wirecount

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
)

func TestJSONValues(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		a    Arrays
		want int
	}{
		{`{"limits":[{},{},{}]}`, MemberArrays, 3},
		{`{"limits":[]}`, MemberArrays, 0},
		{` { "limits" : [ {"namespace":"a,[{"}, { "x": [1,2,3] } ] }`, MemberArrays, 2},
		{`{"limits":[1, "two", null, true, {"a":"\"],"}]}`, MemberArrays, 5},
		{`{"other":{"limits":[{},{}]}}`, MemberArrays, 0},
		{`[{},{},{}]`, RootArray, 3},
		{`[[1,2],[3]]`, RootArray, 2},
		{`[]`, RootArray, 0},
		{`{"domain":"d","descriptors":[{"entries":[{"key":"a","value":"b"},{"key":"c"}]},{"entries":[]}]}`, EveryArray, 4},
		{`[[1,2],[3],"[4,5]"]`, EveryArray, 6},
		{`{"a":"[1,2,3]"}`, EveryArray, 0},
		{`[]`, EveryArray, 0},
		{`[{"x":[1,[2,3]]}]`, EveryArray, 5},
	} {
		if got := JSONValues([]byte(tc.doc), tc.a, 1000); got != tc.want {
			t.Errorf("JSONValues(%s, %d) = %d, want %d", tc.doc, tc.a, got, tc.want)
		}
	}
	if got := JSONValues([]byte(`{"limits":[`+strings.Repeat("{},", 5000)+`{}]}`), MemberArrays, 10); got != 11 {
		t.Errorf("the count went on past stop: %d, want 11", got)
	}
	// A malformed document stops the count; the decoder says what is wrong.
	if got := JSONValues([]byte(`[{},{},{]`), RootArray, 1000); got > 3 {
		t.Errorf("a malformed document counted %d", got)
	}
}

// TestJSONValuesAllocatesNothing: the bound costs no allocation, however
// large the document, so that counting cannot itself be amplified.
func TestJSONValuesAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector makes sync.Pool drop items at random")
	}
	doc := []byte(`{"limits":[` + strings.Repeat(`{"namespace":"n","identifier":"some \"id\"","limit":"10"},`, 2000) + `{}]}`)
	JSONValues(doc, MemberArrays, 1<<20) // warm the pool
	if n := testing.AllocsPerRun(20, func() { JSONValues(doc, MemberArrays, 1<<20) }); n != 0 {
		t.Fatalf("JSONValues allocated %v times a call", n)
	}
}

func TestProtoFields(t *testing.T) {
	msg := &ratelimitv1.BatchLimitRequest{}
	for range 7 {
		msg.Limits = append(msg.Limits, &ratelimitv1.LimitRequest{Namespace: "ns", Identifier: "id", Limit: 1, Duration: 1000})
	}
	b, err := proto.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got := ProtoFields(b, 1, 1000); got != 7 {
		t.Fatalf("ProtoFields = %d, want 7", got)
	}
	if got := ProtoFields(bytes.Repeat([]byte{0x0a, 0x00}, 5000), 1, 10); got != 11 {
		t.Fatalf("5,000 empty entries counted to %d, want the count to stop at 11", got)
	}
}

// BenchmarkJSONValues: counting the entries of a 1 MiB batch of empty
// entries, the amplification a bound must refuse cheaply.
func BenchmarkJSONValues(b *testing.B) {
	doc := []byte(`{"limits":[` + strings.Repeat(`{},`, (1<<20)/3-10) + `{}]}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		JSONValues(doc, MemberArrays, 1<<20)
	}
}
