package daemon

import (
	"fmt"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/internal/certs"
	"github.com/unkeyed/ratelimit/services/keys"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// Preflight does with cfg's files and addresses what serving does at
// start, short of serving: it reads and parses every file a setting names
// (the TLS certificates and keys, the keys file, the rules, the xDS
// server's certificates) and binds every address the process listens on
// and lets it go, so that an error serving would meet at start is met
// now, naming the variable. It connects to no store and starts nothing.
// `api config check` runs it (but with --static, for a deployment's
// manifests checked on a machine that is not where they run).
func Preflight(cfg Config) error {
	logger, reg := slog.New(slog.DiscardHandler), prometheus.NewRegistry()
	if _, _, err := loadTLS(cfg, logger, reg); err != nil {
		return err
	}
	if cfg.AuthKeysFile != "" {
		if _, err := keys.NewFile(cfg.AuthKeysFile, keys.NewRing(), keys.WithFileLogger(logger), keys.WithFileRegisterer(reg)); err != nil {
			return fmt.Errorf("UNKEY_AUTH_KEYS_FILE: %w", err)
		}
	}
	if cfg.RLSConfig != "" {
		if _, err := rlsconfig.NewSource(cfg.RLSConfig, rlsconfig.WithCompiler(RulesCompiler(cfg)), rlsconfig.WithLogger(logger), rlsconfig.WithRegisterer(reg)); err != nil {
			return fmt.Errorf("UNKEY_RLS_CONFIG: %w", err)
		}
	}
	if cfg.RLSXDSServer != "" && cfg.RLSXDSTLS {
		if _, err := xdsTLS(cfg); err != nil {
			return err
		}
	}
	// Every address held until all are bound, as serving holds them: two
	// settings that name one address fail here as they would there.
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, a := range []struct{ name, addr string }{{"UNKEY_HTTP_ADDR", cfg.HTTPAddr}, {"UNKEY_GRPC_ADDR", cfg.GRPCAddr},
		{"UNKEY_METRICS_ADDR", cfg.MetricsAddr}, {"UNKEY_DEBUG_ADDR", cfg.DebugAddr}} {
		if a.addr == "" {
			continue
		}
		l, err := net.Listen("tcp", a.addr)
		if err != nil {
			return fmt.Errorf("%s: cannot listen on %s: %w", a.name, a.addr, err)
		}
		held = append(held, l)
	}
	return nil
}

// loadTLS reads the certificates of the main port and of the grpc-go
// port, where settings name them (nil where not), registering their
// expiry gauges with reg, told apart by the listener; an error names the
// settings.
func loadTLS(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (api, grpc *certs.Certificates, err error) {
	if cfg.TLSCertFile != "" {
		if api, err = certs.Load(certs.Files{Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile, ClientCA: cfg.TLSClientCAFile},
			logger, prometheus.WrapRegistererWith(prometheus.Labels{"listener": "api"}, reg)); err != nil {
			return nil, nil, fmt.Errorf("UNKEY_TLS_CERT_FILE, UNKEY_TLS_KEY_FILE, UNKEY_TLS_CLIENT_CA_FILE: %w", err)
		}
	}
	if cfg.GRPCTLSCertFile != "" {
		if grpc, err = certs.Load(certs.Files{Cert: cfg.GRPCTLSCertFile, Key: cfg.GRPCTLSKeyFile, ClientCA: cfg.GRPCTLSClientCAFile},
			logger, prometheus.WrapRegistererWith(prometheus.Labels{"listener": "grpc"}, reg)); err != nil {
			return nil, nil, fmt.Errorf("UNKEY_GRPC_TLS_CERT_FILE, UNKEY_GRPC_TLS_KEY_FILE, UNKEY_GRPC_TLS_CLIENT_CA_FILE: %w", err)
		}
	}
	return api, grpc, nil
}
