package connectapi

import (
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/internal/wirecount"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// codecs are the services' hooks into the layer's codecs (see
// [transport.Codecs]): a batch whose encoding holds more entries than its
// RPC allows is refused before it is decoded, the Limit call's JSON is
// read and written without reflection (fastjson.go), and a JSON request
// that leaves out a field its RPC needs is refused naming it.
var codecs = transport.Codecs{Decode: decode, EncodeJSON: encodeJSON, Required: required}

// requiredFields are the fields, by JSON name, a request of each message
// must give: what has no meaningful zero.
var requiredFields = map[protoreflect.FullName][]string{
	"ratelimit.v1.LimitRequest":          {"namespace", "identifier", "limit"}, // duration: not with a calendar
	"ratelimit.v1.MultiLimitRequest":     {"limits"},
	"ratelimit.v1.BatchLimitRequest":     {"limits"},
	"ratelimit.v1.SettleRequest":         {"reservation", "cost"},
	"ratelimit.v1.AcquireRequest":        {"namespace", "identifier", "limit", "lease"},
	"ratelimit.v1.ReleaseRequest":        {"leaseId"},
	"ratelimit.v1.ExtendRequest":         {"leaseId"},
	"ratelimit.v1.SetOverrideRequest":    {"namespace", "identifier", "limit|shadow", "duration|shadow"}, // a shadow override may keep the requests' limits
	"ratelimit.v1.GetOverrideRequest":    {"namespace", "identifier"},
	"ratelimit.v1.DeleteOverrideRequest": {"namespace", "identifier"},
	"ratelimit.v1.ListOverridesRequest":  {"namespace"},
	"ratelimit.v1.GetPenaltyRequest":     {"namespace", "identifier"},
	"ratelimit.v1.DeletePenaltyRequest":  {"namespace", "identifier"},
	"ratelimit.v1.ListPenaltiesRequest":  {"namespace"},
	"ratelimit.v1.GetRatelimitsRequest":  {"namespace", "from", "to"},
	"ratelimit.v1.ListNamespacesRequest": {"from", "to"},
}

// required names the fields a request of the message name must give.
func required(name protoreflect.FullName) []string { return requiredFields[name] }

// decode reads a Limit call's JSON the fast way, or refuses an oversized
// batch, or leaves msg to the codec.
func decode(data []byte, msg any, json bool) bool {
	if m, ok := msg.(*ratelimitv1.LimitRequest); ok && json {
		return fastLimitRequest(data, m)
	}
	return refuseOversized(data, msg, json)
}

// encodeJSON writes a Limit answer the fast way.
func encodeJSON(msg any) ([]byte, bool) {
	if m, ok := msg.(*ratelimitv1.LimitResponse); ok {
		return appendLimitResponse(make([]byte, 0, 128), m), true
	}
	return nil, false
}

// limitsField is the field number of limits in both batch messages.
const limitsField = 1

// refuseOversized counts the entries of a batch in its encoding, up to
// one more than its RPC allows, and leaves a batch over the bound with
// that many empty entries instead of decoding it: the pipeline's
// validation then refuses it with the message of any batch over its
// bound, and nothing of the entries was materialised.
func refuseOversized(data []byte, msg any, json bool) bool {
	var max int
	switch msg.(type) {
	case *ratelimitv1.BatchLimitRequest:
		max = pipeline.MaxBatchLimit
	case *ratelimitv1.MultiLimitRequest:
		max = ratelimit.MaxBatch
	default:
		return false
	}
	var n int
	if json {
		n = wirecount.JSONValues(data, wirecount.MemberArrays, max)
	} else {
		n = wirecount.ProtoFields(data, limitsField, max)
	}
	if n <= max {
		return false
	}
	switch m := msg.(type) {
	case *ratelimitv1.BatchLimitRequest:
		m.Reset()
		m.Limits = make([]*ratelimitv1.LimitRequest, max+1)
	case *ratelimitv1.MultiLimitRequest:
		m.Reset()
		m.Limits = make([]*ratelimitv1.LimitRequest, max+1)
	}
	return true
}

// Codecs returns the service's hooks into the layer's codecs.
func (h *Handler) Codecs() transport.Codecs { return codecs }

// Codecs returns KeyService's hooks into the layer's codecs.
func (h *Keys) Codecs() transport.Codecs { return codecs }

// Codecs returns AuditService's hooks into the layer's codecs.
func (h *Audit) Codecs() transport.Codecs { return codecs }

// Codecs returns AnalyticsService's hooks into the layer's codecs.
func (h *Analytics) Codecs() transport.Codecs { return codecs }
