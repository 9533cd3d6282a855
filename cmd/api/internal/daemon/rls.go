package daemon

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/credentials"

	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/rlqs"
	"github.com/unkeyed/ratelimit/internal/certs"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// newRLS builds Envoy's rate limit service of cfg: its rules from
// UNKEY_RLS_CONFIG (refusing to start on a broken file, and following the
// file's changes in a loop), from an xDS management server
// (UNKEY_RLS_XDS_SERVER, a loop that keeps its stream open), or none.
func (d *Daemon) newRLS(cfg Config, p *pipeline.Pipeline) (*envoyrls.Service, error) {
	empty, err := rlsconfig.Load()
	if err != nil {
		return nil, err
	}
	current := func() *rlsconfig.Config { return empty }
	opts := []envoyrls.Option{envoyrls.WithShadowMode(cfg.RLSShadowMode), envoyrls.WithNearLimitRatio(cfg.RLSNearLimitRatio),
		envoyrls.WithOverLimitHitsCounted(cfg.RLSCountOverLimit), envoyrls.WithDynamicMetadata(cfg.RLSResponseDynamicMetadata),
		envoyrls.WithIETFHeaders(cfg.RLSIETFHeaders), envoyrls.WithFixedWindows(cfg.RLSFixedWindows),
		envoyrls.WithRetryAfter(cfg.RLSRetryAfter)}
	compiler := RulesCompiler(cfg)
	switch {
	case cfg.RLSConfig != "":
		src, err := rlsconfig.NewSource(cfg.RLSConfig, rlsconfig.WithInterval(cfg.RLSConfigInterval), rlsconfig.WithCompiler(compiler),
			rlsconfig.WithLogger(d.logger), rlsconfig.WithRegisterer(d.registry))
		if err != nil {
			return nil, fmt.Errorf("UNKEY_RLS_CONFIG: %w", err)
		}
		current = src.Config
		d.loops = append(d.loops, src)
		domains, rules := src.Config().Domains()
		d.logger.Info("envoy rate limit service configured", "path", cfg.RLSConfig, "domains", domains, "rules", rules,
			"shadow_mode", cfg.RLSShadowMode)
	case cfg.RLSXDSServer != "":
		xopts := []rlsconfig.XDSOption{rlsconfig.WithXDSLogger(d.logger), rlsconfig.WithXDSRegisterer(d.registry),
			rlsconfig.WithXDSCompiler(compiler)}
		if cfg.RLSXDSTLS {
			xopts = append(xopts, rlsconfig.WithXDSCredentials(func() (credentials.TransportCredentials, error) { return xdsTLS(cfg) }))
			if _, err := xdsTLS(cfg); err != nil { // files that cannot be read stop the start
				return nil, err
			}
		}
		src, err := rlsconfig.NewXDSSource(cfg.RLSXDSServer, cfg.RLSXDSNodeID, xopts...)
		if err != nil {
			return nil, fmt.Errorf("UNKEY_RLS_XDS_SERVER: %w", err)
		}
		current = src.Config
		d.loops = append(d.loops, src)
		if !cfg.RLSStartWithoutConfig {
			opts = append(opts, envoyrls.WithRulesLoaded(src.Loaded))
			// The address is named to an operator alone (a caller with
			// status.read): the probes answer anyone, and the address
			// is the deployment's own (the start's log line names it).
			d.readyChecks = append(d.readyChecks, readyCheck{what: "the first rate limit configuration from the xDS management server (UNKEY_RLS_XDS_SERVER)",
				detail: "at " + cfg.RLSXDSServer, done: src.FirstLoad()})
		}
		d.logger.Info("envoy rate limit service takes its rules over xDS", "server", cfg.RLSXDSServer, "node_id", cfg.RLSXDSNodeID,
			"tls", cfg.RLSXDSTLS, "start_without_config", cfg.RLSStartWithoutConfig, "shadow_mode", cfg.RLSShadowMode)
	}
	if cfg.RLSResponseHeaders {
		opts = append(opts, envoyrls.WithResponseHeaders(envoyrls.Headers{Limit: cfg.RLSLimitHeader,
			Remaining: cfg.RLSRemainingHeader, Reset: cfg.RLSResetHeader}))
	}
	return envoyrls.New(d.layer, p, current, d.registry, opts...)
}

// newQuota builds Envoy's quota service of cfg on the rate limit service's
// rules and decisions, its budgets shared through p's tallies.
func (d *Daemon) newQuota(cfg Config, rls *envoyrls.Service, p *pipeline.Pipeline) (*rlqs.Service, error) {
	noRule := typev3.RateLimitStrategy_ALLOW_ALL
	if cfg.RLQSNoRule == "deny_all" {
		noRule = typev3.RateLimitStrategy_DENY_ALL
	}
	// A store that does not answer is logged once a report a bucket:
	// throttled, as net/http's errors are, so that Envoys' reports cannot
	// grow the log without bound.
	logger := slog.New(cmdutil.Throttle(d.logger.Handler(), time.Second, 10))
	return rlqs.New(rls, p, d.registry, rlqs.WithLogger(logger), rlqs.WithNoRule(noRule), rlqs.WithLimits(rlqs.Limits{
		StreamsPerConnection: cfg.RLQSMaxStreamsPerConnection, StreamsPerWorkspace: cfg.RLQSMaxStreamsPerWorkspace,
		BucketsPerStream:    cfg.RLQSMaxBucketsPerStream,
		BucketsPerWorkspace: cfg.RLQSMaxBucketsPerWorkspace, AbandonAfter: cfg.RLQSAbandonAfter}))
}

// xdsTLS returns the TLS credentials of the connection to the xDS server,
// its files read now: the CA (the system's without one), the client
// certificate for mutual TLS, the name the server's certificate carries.
func xdsTLS(cfg Config) (credentials.TransportCredentials, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.RLSXDSServerName}
	if c.ServerName == "" {
		c.ServerName, _, _ = net.SplitHostPort(cfg.RLSXDSServer)
	}
	if cfg.RLSXDSCAFile != "" {
		pool, err := certs.ReadPool(cfg.RLSXDSCAFile)
		if err != nil {
			return nil, fmt.Errorf("UNKEY_RLS_XDS_CA_FILE: %w", err)
		}
		c.RootCAs = pool
	}
	if cfg.RLSXDSCertFile != "" {
		pair, err := tls.LoadX509KeyPair(cfg.RLSXDSCertFile, cfg.RLSXDSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("UNKEY_RLS_XDS_CERT_FILE, UNKEY_RLS_XDS_KEY_FILE: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return credentials.NewTLS(c), nil
}

// RulesCompiler returns how cfg's rules are compiled: within its bounds,
// with calendar units if it turns them on (the service's, and api rls
// check's).
func RulesCompiler(cfg Config) rlsconfig.Compiler {
	c := rlsconfig.Compiler{Bounds: rlsconfig.Bounds{MaxDepth: cfg.RLSMaxDepth, MaxDescriptors: cfg.RLSMaxDescriptors,
		MaxBytes: cfg.RLSMaxRulesBytes}}
	if cfg.RLSCalendarUnits {
		c.CalendarZone = &cfg.RLSTimeZone
	}
	return c
}
