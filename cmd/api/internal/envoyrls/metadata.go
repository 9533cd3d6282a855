package envoyrls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata is Envoy's dynamic metadata for an answer to req, as
// envoyproxy/ratelimit writes it with RESPONSE_DYNAMIC_METADATA (Envoy
// files it under envoy.filters.http.ratelimit):
//
//	{"domain": "rl",
//	 "descriptors": [{"entries": ["service=service_1"], "hitsAddend": 0}, …],
//	 "hitsAddend": 5,
//	 "metadata": {"service_with_quota": {"name": "service_2"}}}
//
// hitsAddend appears where the request (or the descriptor) sets one;
// metadata merges the files' metadata of the rules that were not over
// their limits (passed, in request order): a key the first gave stays, and
// two structs under one key merge, key by key. So a route can send the
// request to the backend whose quota is left:
// %DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:service_with_quota:name)%.
// envoyproxy/ratelimit also writes a descriptor's own limit there, as Go's
// text of its proto: that is left out.
func dynamicMetadata(req *rlsv3.RateLimitRequest, plans []plan, passed []int) *structpb.Struct {
	descriptors := make([]*structpb.Value, len(req.Descriptors))
	for i, d := range req.Descriptors {
		entries := make([]*structpb.Value, len(d.Entries))
		for j, e := range d.Entries {
			entries[j] = structpb.NewStringValue(e.Key + "=" + e.Value)
		}
		fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if h := d.GetHitsAddend(); h != nil {
			fields["hitsAddend"] = structpb.NewNumberValue(float64(h.Value))
		}
		descriptors[i] = structpb.NewStructValue(&structpb.Struct{Fields: fields})
	}
	out := &structpb.Struct{Fields: map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.Domain),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descriptors}),
	}}
	if req.HitsAddend != 0 {
		out.Fields["hitsAddend"] = structpb.NewNumberValue(float64(req.HitsAddend))
	}
	merged := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for _, i := range passed {
		if r := plans[i].rule; r != nil && r.Metadata != nil {
			merge(merged, r.Metadata)
		}
	}
	if len(merged.Fields) > 0 {
		out.Fields["metadata"] = structpb.NewStructValue(merged)
	}
	return out
}

// merge adds src's fields to dst: a field dst lacks is copied (src is the
// configuration's, shared by every request, so never aliased); two structs
// under one name merge; otherwise dst's value stays.
func merge(dst, src *structpb.Struct) {
	for name, v := range src.Fields {
		have, ok := dst.Fields[name]
		if !ok {
			dst.Fields[name] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if a, b := have.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			merge(a, b)
		}
	}
}
