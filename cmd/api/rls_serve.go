package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// rlsServiceName and rlsProcedure name Envoy's rate limit service and its
// one method.
var (
	rlsServiceName = rlsv3.RateLimitService_ServiceDesc.ServiceName
	rlsProcedure   = "/" + rlsServiceName + "/ShouldRateLimit"
)

// rls is Envoy's rate limit service as this server carries it: the
// envoyrls adapter, on connect-go, grpc-go and the /json route.
type rls struct {
	svc    *envoyrls.Service
	logger *slog.Logger
	rlsv3.UnimplementedRateLimitServiceServer
}

// newRLS builds the rate limit service of cfg: its rules from
// UNKEY_RLS_CONFIG (refusing to start on a broken file), or none.
func newRLS(cfg config, logger *slog.Logger, reg prometheus.Registerer, p *pipeline.Pipeline) (*rls, *rlsconfig.Source, error) {
	empty, err := rlsconfig.Load()
	if err != nil {
		return nil, nil, err
	}
	current := func() *rlsconfig.Config { return empty }
	var src *rlsconfig.Source
	if cfg.RLSConfig != "" {
		src, err = rlsconfig.NewSource(cfg.RLSConfig, rlsconfig.WithInterval(cfg.RLSConfigInterval),
			rlsconfig.WithLogger(logger), rlsconfig.WithRegisterer(reg))
		if err != nil {
			return nil, nil, fmt.Errorf("UNKEY_RLS_CONFIG: %w", err)
		}
		current = src.Config
		domains, rules := src.Config().Domains()
		logger.Info("envoy rate limit service configured", "path", cfg.RLSConfig, "domains", domains, "rules", rules,
			"shadow_mode", cfg.RLSShadowMode)
	}
	opts := []envoyrls.Option{envoyrls.WithShadowMode(cfg.RLSShadowMode), envoyrls.WithNearLimitRatio(cfg.RLSNearLimitRatio)}
	if cfg.RLSResponseHeaders {
		opts = append(opts, envoyrls.WithResponseHeaders(envoyrls.Headers{Limit: cfg.RLSLimitHeader,
			Remaining: cfg.RLSRemainingHeader, Reset: cfg.RLSResetHeader}))
	}
	svc, err := envoyrls.New(p, current, reg, opts...)
	if err != nil {
		return nil, nil, err
	}
	return &rls{svc: svc, logger: logger}, src, nil
}

// ShouldRateLimit serves grpc-go: the adapter's answer, its errors as
// Connect errors, which the grpc-go interceptor turns into statuses.
func (r *rls) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := r.svc.ShouldRateLimit(ctx, req)
	if err != nil {
		return nil, toConnectError(err)
	}
	return resp, nil
}

// connectHandler serves ShouldRateLimit on the main port: gRPC (as Envoy
// calls it), gRPC-Web and Connect.
func (r *rls) connectHandler(opts ...connect.HandlerOption) http.Handler {
	return connect.NewUnaryHandler(rlsProcedure,
		func(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
			resp, err := r.ShouldRateLimit(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}, opts...)
}

// jsonHandler serves envoyproxy/ratelimit's /json endpoint: a
// RateLimitRequest in protobuf's JSON mapping, answered with the
// RateLimitResponse, status 200 if it is OK and 429 if over the limit.
func (r *rls) jsonHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, hr *http.Request) {
		body, err := io.ReadAll(hr.Body)
		if err != nil {
			msg := "request body: could not be read"
			if errors.Is(err, errBodyTooLarge) {
				msg = fmt.Sprintf("request body: must be at most %d bytes (1 MiB)", maxRequestBytes)
			}
			http.Error(w, msg, http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if rlsJSONTooLarge(body) {
			http.Error(w, envoyrls.ErrBounds.Error(), http.StatusBadRequest)
			return
		}
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "request body: must be a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := r.svc.ShouldRateLimit(hr.Context(), &req)
		if err != nil {
			f := pipeline.Classify(err)
			switch f.Kind {
			case pipeline.KindInvalidArgument:
				http.Error(w, f.Message, http.StatusBadRequest)
			case pipeline.KindResourceExhausted:
				http.Error(w, f.Message, http.StatusTooManyRequests)
			default:
				ce := opaqueError(hr.Context(), r.logger, "/json", toConnectError(err))
				http.Error(w, connectMessage(ce), http.StatusInternalServerError)
			}
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "could not encode the answer", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		w.Write(out)
	})
}

// rlsTooLarge reports whether an encoded RateLimitRequest holds more
// descriptors, or more entries in all, than a request may: counted in the
// encoding, before anything is decoded (see batchEntries).
func rlsTooLarge(data []byte) bool {
	const descriptorsField, entriesField = 2, 1
	descriptors, entries := 0, 0
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return false // malformed: proto.Unmarshal says what is wrong
		}
		data = data[n:]
		if num == descriptorsField && typ == protowire.BytesType {
			d, m := protowire.ConsumeBytes(data)
			if m < 0 {
				return false
			}
			descriptors++
			entries += protoEntries(d, envoyrls.MaxEntries+1)
			if descriptors > envoyrls.MaxDescriptors || entries > envoyrls.MaxDescriptors*envoyrls.MaxEntries {
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

// rlsCheck compiles each path as UNKEY_RLS_CONFIG would load it, prints
// what it holds or why it is refused, and fails if any path is refused: for
// users' CI, before a file reaches the service.
func rlsCheck(out io.Writer, paths []string) error {
	failed := 0
	for _, path := range paths {
		c, err := rlsconfig.LoadPath(path)
		if err != nil {
			fmt.Fprintf(out, "FAIL %v\n", err)
			failed++
			continue
		}
		domains, rules := c.Domains()
		fmt.Fprintf(out, "ok   %s: %d domains, %d rules\n", path, domains, rules)
	}
	if failed > 0 {
		return fmt.Errorf("rls check: %d of %d paths refused", failed, len(paths))
	}
	return nil
}

// rlsJSONTooLarge reports whether a RateLimitRequest in JSON holds more array
// elements, at any depth, than a request within the bounds can: its
// descriptors and their entries. Counted without decoding, as rlsTooLarge
// counts the protobuf encoding: 1 MiB of `{},` entries would otherwise
// become hundreds of thousands of messages before validation refused them.
func rlsJSONTooLarge(data []byte) bool {
	const most = envoyrls.MaxDescriptors * (envoyrls.MaxEntries + 1)
	return jsonElements(data, most) > most
}
