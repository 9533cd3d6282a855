package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
)

// FuzzFastLimitRequest: whatever the fast parser accepts, strictDecode
// accepts too, with the same result.
func FuzzFastLimitRequest(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"n","identifier":"a","limit":10,"duration":60000}`,
		`{"namespace":"n","identifier":"a","limit":10,"duration":60000,"cost":0}`,
		` { "identifier" : "é" , "namespace":"n","limit":-1,"duration":1, "cost": 5 } `,
		`{}`, `{"namespace":"n","namespace":"m"}`, `{"limit":1.5}`, `{"limit":01}`, `{"cost":null}`,
		`{"identifier":"a\u0041"}`, `{"NAMESPACE":"n"}`, `{"limit":99999999999999999999}`, `[]`, `{"limit":1}x`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast unkeyLimitRequest
		if !fastLimitRequest(body, &fast) {
			return
		}
		var slow unkeyLimitRequest
		if err := strictDecode(body, &slow, limitFields); err != nil {
			t.Fatalf("fast accepted %q, strictDecode refused it: %v", body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, strict %+v", body, fast, slow)
		}
	})
}

// TestLimitAnswerBytes: the appended answer is byte for byte what
// writeJSON writes for the same data.
func TestLimitAnswerBytes(t *testing.T) {
	for _, d := range []unkeyLimitData{
		{Limit: 10, Remaining: 9, Reset: 1795317060000, Success: true},
		{Limit: 0, Remaining: 0, Reset: 1, Success: false, OverrideID: "ovr_6f1c0a"},
		{Limit: 5, OverrideID: "odd<id>\"é"},
	} {
		rec := httptest.NewRecorder()
		writeJSON(rec, 200, map[string]any{"meta": map[string]string{"requestId": "req_0123abcd"}, "data": d})
		got := appendLimitAnswer(nil, "req_0123abcd", &d)
		if !bytes.Equal(got, rec.Body.Bytes()) {
			t.Fatalf("appended %s\nwriteJSON %s", got, rec.Body.Bytes())
		}
		if !json.Valid(got) {
			t.Fatalf("not JSON: %s", got)
		}
	}
}

// FuzzFastConnectLimitRequest: whatever the fast parser accepts, protojson
// (as the JSON codec runs it) reads the same.
func FuzzFastConnectLimitRequest(f *testing.F) {
	for _, seed := range []string{
		`{"namespace":"n","identifier":"a","limit":10,"duration":60000}`,
		`{"namespace":"n","identifier":"a","limit":"10","duration":"60000","cost":"0"}`,
		` { "identifier" : "é" , "namespace":"n","limit":-1,"duration":1, "cost": 5 } `,
		`{}`, `{"limit":"1.5"}`, `{"limit":"01"}`, `{"cost":null}`, `{"limit":" 1"}`, `{"retryAfter":1}`,
		`{"identifier":"a\u0041"}`, `{"NAMESPACE":"n"}`, `{"limit":99999999999999999999}`, `{"limit":1e3}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast ratelimitv1.LimitRequest
		if !fastConnectLimitRequest(body, &fast) {
			return
		}
		var slow ratelimitv1.LimitRequest
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(body, &slow); err != nil {
			t.Fatalf("fast accepted %q, protojson refused it: %v", body, err)
		}
		if !proto.Equal(&fast, &slow) {
			t.Fatalf("%q: fast %v, protojson %v", body, &fast, &slow)
		}
	})
}

// TestConnectLimitResponseJSON: the appended answer reads back, with
// protojson, as the message it was written from, and spells every field
// as protojson with EmitUnpopulated does.
func TestConnectLimitResponseJSON(t *testing.T) {
	for _, m := range []*ratelimitv1.LimitResponse{
		{Success: true, Limit: 10, Remaining: 9, Reset_: 1795317060000},
		{Limit: 1 << 53, RetryAfter: 41857, OverrideId: "ovr_6f1c0a"},
		{OverrideId: "odd<id>\"é"},
	} {
		got := appendConnectLimitResponse(nil, m)
		var back ratelimitv1.LimitResponse
		if err := protojson.Unmarshal(got, &back); err != nil || !proto.Equal(&back, m) {
			t.Fatalf("%s read back as %v (%v), want %v", got, &back, err, m)
		}
		want, _ := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
		var a, b map[string]any
		json.Unmarshal(got, &a)
		json.Unmarshal(want, &b)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("appended %s, protojson %s", got, want)
		}
	}
}
