package envoyrls

import (
	"context"
	"io"
	"net/http"

	"connectrpc.com/connect"
	rlcommonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/internal/wirecount"
)

// ServiceName and Procedure name Envoy's rate limit service and its one
// method.
var (
	ServiceName = rlsv3.RateLimitService_ServiceDesc.ServiceName
	Procedure   = "/" + ServiceName + "/ShouldRateLimit"
)

// codecs are the service's hooks into the layer's codecs: a request whose
// encoding holds more descriptors or entries than a request may is
// refused before it is decoded.
var codecs = transport.Codecs{Decode: refuseOversized}

// Register serves ShouldRateLimit on mux behind the layer: gRPC (as Envoy calls
// it), gRPC-Web and Connect at Procedure, and envoyproxy/ratelimit's
// POST /json. Any other path under the service's prefix is answered
// that the service has no such method (see transport.KnownMethods).
func (s *Service) Register(mux *http.ServeMux) {
	l := s.layer
	sd := rlsv3.File_envoy_service_ratelimit_v3_rls_proto.Services().ByName("RateLimitService")
	mux.Handle("/"+ServiceName+"/", l.Route("", l.ConnectRenderer(), transport.KnownMethods(sd, connect.NewUnaryHandler(Procedure,
		func(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
			resp, err := s.ShouldRateLimit(ctx, req.Msg)
			if err != nil {
				return nil, l.ConnectError(ctx, Procedure, err)
			}
			return connect.NewResponse(resp), nil
		}, l.HandlerOptions(codecs)...)), "ShouldRateLimit"))
	render := func(w http.ResponseWriter, r *http.Request, err error) { writeJSONError(w, l, r, err) }
	mux.Handle("POST /json", l.Route("json", render, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.serveJSON(w, r, l)
	}), "json"))
}

// Services returns Envoy's rate limit service.
func (s *Service) Services() []string { return []string{ServiceName} }

// Routes names envoyproxy/ratelimit's JSON route.
func (s *Service) Routes() string { return "POST /json" }

// Codecs returns the service's hooks into the layer's codecs.
func (s *Service) Codecs() transport.Codecs { return codecs }

// RegisterGRPC serves ShouldRateLimit on a grpc-go server of the layer
// (see [transport.Layer.GRPCServer]); its failures are answered there.
func (s *Service) RegisterGRPC(srv *grpc.Server) {
	rlsv3.RegisterRateLimitServiceServer(srv, grpcService{s: s})
}

type grpcService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	s *Service
}

func (g grpcService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return g.s.ShouldRateLimit(ctx, req)
}

// serveJSON serves envoyproxy/ratelimit's /json endpoint: a
// RateLimitRequest in protobuf's JSON mapping, answered with the
// RateLimitResponse, status 200 if it is OK and 429 if over the limit.
func (s *Service) serveJSON(w http.ResponseWriter, r *http.Request, l *transport.Layer) {
	if err := transport.CheckJSONContentType(r); err != nil {
		writeJSONError(w, l, r, err)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSONError(w, l, r, err)
		return
	}
	var req rlsv3.RateLimitRequest
	if !refuseOversized(body, &req, true) && !fastRateLimitRequest(body, &req) {
		if err := protojson.Unmarshal(body, &req); err != nil {
			writeJSONError(w, l, r, decodeError(body, &req))
			return
		}
	}
	resp, err := s.ShouldRateLimit(r.Context(), &req)
	if err != nil {
		writeJSONError(w, l, r, err)
		return
	}
	out, ok := appendRateLimitResponse(make([]byte, 0, 256), resp)
	if !ok {
		if out, err = transport.ProtoJSON(resp, false); err != nil {
			writeJSONError(w, l, r, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
		w.WriteHeader(http.StatusTooManyRequests)
	}
	w.Write(out)
}

// decodeError is the failure of body, a request to /json that protojson
// refused: the first field that breaks a rule, named as the Connect
// routes name it (transport.CheckJSON), or the request as a whole; never
// the decoder's own text.
func decodeError(body []byte, req *rlsv3.RateLimitRequest) error {
	if err := transport.CheckJSON(body, req.ProtoReflect().Descriptor(), nil); err != nil {
		return err
	}
	return &invalid.Error{Field: "body",
		Rule: "must be a RateLimitRequest in protobuf's JSON mapping (see envoy.service.ratelimit.v3)"}
}

// jsonStatus is the HTTP status of each kind of failure on /json.
var jsonStatus = [...]int{
	failure.KindInternal:          http.StatusInternalServerError,
	failure.KindInvalidArgument:   http.StatusBadRequest,
	failure.KindUnauthenticated:   http.StatusUnauthorized,
	failure.KindNotFound:          http.StatusNotFound,
	failure.KindResourceExhausted: http.StatusTooManyRequests,
	failure.KindCanceled:          499,
	failure.KindDeadlineExceeded:  http.StatusGatewayTimeout,
	failure.KindPermissionDenied:  http.StatusForbidden,
	failure.KindUnavailable:       http.StatusServiceUnavailable,
	failure.KindConflict:          http.StatusConflict,
}

// writeJSONError answers a failure on /json with the status of its kind
// and a JSON body, {"code": …, "message": …}, as the API's other JSON
// routes (envoyproxy/ratelimit answers in plain text: a client that shows
// the body shows the message either way).
func writeJSONError(w http.ResponseWriter, l *transport.Layer, r *http.Request, err error) {
	f := l.Classify(r.Context(), "/json", "", err)
	msg := f.JSONMessage() // a field as the JSON names it, as on the API's other routes
	if f.Kind == failure.KindInternal {
		msg = transport.InternalMessage(f.RequestID)
	}
	transport.WriteJSONError(w, jsonStatus[f.Kind], f.Kind, msg)
}

// Field numbers of RateLimitRequest.descriptors and
// RateLimitDescriptor.entries.
const descriptorsField, entriesField = 2, 1

// refuseOversized reports whether an encoded RateLimitRequest holds more
// descriptors, or more entries in all, than a request may, counted in the
// encoding before anything is decoded; it then leaves msg with one
// descriptor more than allowed, which validate refuses with ErrBounds. In
// JSON it counts the elements of every array at any depth: the
// descriptors and their entries. 1 MiB of `{},` entries would otherwise
// become hundreds of thousands of messages before validation refused them.
func refuseOversized(data []byte, msg any, json bool) bool {
	m, ok := msg.(*rlsv3.RateLimitRequest)
	if !ok {
		return false
	}
	var over bool
	if json {
		const most = MaxDescriptors * (MaxEntries + 1)
		over = wirecount.JSONValues(data, wirecount.EveryArray, most) > most
	} else {
		over = protoTooLarge(data)
	}
	if over {
		m.Reset()
		m.Descriptors = make([]*rlcommonv3.RateLimitDescriptor, MaxDescriptors+1)
	}
	return over
}

// protoTooLarge reports whether the protobuf encoding of a RateLimitRequest
// holds more descriptors, or more entries in all, than a request may. A
// malformed encoding is not: proto.Unmarshal says what is wrong.
func protoTooLarge(data []byte) bool {
	descriptors, entries := 0, 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false
		}
		data = data[n:]
		if num == descriptorsField && typ == protowire.BytesType {
			d, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return false
			}
			descriptors++
			entries += wirecount.ProtoFields(d, entriesField, MaxEntries+1)
			if descriptors > MaxDescriptors || entries > MaxDescriptors*MaxEntries {
				return true
			}
			data = data[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, data)
		if m < 0 {
			return false
		}
		data = data[m:]
	}
	return false
}
