package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// rlsServiceName and rlsProcedure name Envoy's rate limit service and its
// one method.
var (
	rlsServiceName = rlsv3.RateLimitService_ServiceDesc.ServiceName
	rlsProcedure   = "/" + rlsServiceName + "/ShouldRateLimit"
)

// newRLS builds the rate limit service of cfg: its rules from
// UNKEY_RLS_CONFIG (refusing to start on a broken file), or none.
func newRLS(cfg config, logger *slog.Logger, reg prometheus.Registerer, p *pipeline.Pipeline) (*rlsService, *rlsconfig.Source, error) {
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
	m, err := newRLSMetrics(reg, cfg.RLSNearLimitRatio)
	if err != nil {
		return nil, nil, fmt.Errorf("register rls metrics: %w", err)
	}
	s := &rlsService{pipeline: p, config: current, metrics: m, shadow: cfg.RLSShadowMode, now: time.Now,
		logger: logger}
	if cfg.RLSResponseHeaders {
		s.headers = &rlsHeaders{limit: cfg.RLSLimitHeader, remaining: cfg.RLSRemainingHeader, reset: cfg.RLSResetHeader}
	}
	return s, src, nil
}

// connectHandler serves ShouldRateLimit on the main port: gRPC (as Envoy
// calls it), gRPC-Web and Connect.
func (s *rlsService) connectHandler(opts ...connect.HandlerOption) http.Handler {
	return connect.NewUnaryHandler(rlsProcedure,
		func(ctx context.Context, req *connect.Request[rlsv3.RateLimitRequest]) (*connect.Response[rlsv3.RateLimitResponse], error) {
			resp, err := s.ShouldRateLimit(ctx, req.Msg)
			if err != nil {
				return nil, err
			}
			return connect.NewResponse(resp), nil
		}, opts...)
}

// jsonHandler serves envoyproxy/ratelimit's /json endpoint: a
// RateLimitRequest in protobuf's JSON mapping, answered with the
// RateLimitResponse, status 200 if it is OK and 429 if over the limit.
func (s *rlsService) jsonHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			msg := "request body: could not be read"
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				msg = fmt.Sprintf("request body: must be at most %d bytes (1 MiB)", maxRequestBytes)
			}
			http.Error(w, msg, http.StatusBadRequest)
			return
		}
		var req rlsv3.RateLimitRequest
		if jsonEntries(body, false, maxRLSDescriptors) > maxRLSDescriptors {
			http.Error(w, errRLSBounds.Error(), http.StatusBadRequest)
			return
		}
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "request body: must be a RateLimitRequest in JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := s.check(r.Context(), &req)
		if err != nil {
			ce := toConnectError(err)
			status := http.StatusInternalServerError
			switch connect.CodeOf(ce) {
			case connect.CodeInvalidArgument:
				status = http.StatusBadRequest
			case connect.CodeResourceExhausted:
				status = http.StatusTooManyRequests
			}
			if status == http.StatusInternalServerError {
				ce = opaqueError(r.Context(), s.logger, "/json", ce).(*connect.Error)
			}
			http.Error(w, connectMessage(ce), status)
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
			entries += protoEntries(d, maxRLSEntries+1)
			if descriptors > maxRLSDescriptors || entries > maxRLSDescriptors*maxRLSEntries {
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
