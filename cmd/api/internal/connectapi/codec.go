package connectapi

import (
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	ratelimitv1 "github.com/unkeyed/ratelimit/connect/ratelimit/v1"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Codecs are the service's hooks into the layer's codecs: a batch whose
// encoding holds more entries than its RPC allows is refused before it is
// decoded (see [transport.Codecs]).
var Codecs = transport.Codecs{Decode: refuseOversized}

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
		n = transport.JSONValues(data, transport.MemberArrays, max)
	} else {
		n = transport.ProtoFields(data, limitsField, max)
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
