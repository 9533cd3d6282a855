package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"connectrpc.com/grpchealth"
	"connectrpc.com/grpcreflect"
	"github.com/XSAM/otelsql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/unkeyed/ratelimit/cmd/api/internal/audit"
	"github.com/unkeyed/ratelimit/cmd/api/internal/connectapi"
	"github.com/unkeyed/ratelimit/cmd/api/internal/dashboard"
	"github.com/unkeyed/ratelimit/cmd/api/internal/envoyrls"
	"github.com/unkeyed/ratelimit/cmd/api/internal/keys"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/reservation"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/cmd/api/internal/unkeyv2"
	"github.com/unkeyed/ratelimit/connect/ratelimit/v1/ratelimitv1connect"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/overrides"
	overridesmysql "github.com/unkeyed/ratelimit/services/overrides/mysqlstore"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/ratelimit/mysqlstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
	"github.com/unkeyed/ratelimit/services/rlsconfig"
)

// shutdownTimeout bounds how long in-flight requests may take to finish
// after SIGTERM. Decisions take microseconds; the bound only matters for
// stuck clients. After it the limiter replays to Redis (at most 500 ms) and
// flushes to MySQL once more (at most 10 s on a connection of the pool, which
// keeps some idle): 15 s leaves the whole shutdown inside Kubernetes'
// default grace of 30 s.
const shutdownTimeout = 15 * time.Second

// tracingService is the API's service.name in its spans, unless
// OTEL_SERVICE_NAME names another.
const tracingService = "unkey-ratelimit-api"

// services are the gRPC services the server answers, for health checks,
// reflection and the answer to a path that names none of them.
var services = []string{ratelimitv1connect.RatelimitServiceName, ratelimitv1connect.KeyServiceName,
	ratelimitv1connect.AuditServiceName, ratelimitv1connect.AnalyticsServiceName, envoyrls.ServiceName}

// server is one API process: a limiter behind the protocol adapters, with
// health, readiness and metrics endpoints.
type server struct {
	logger    *slog.Logger
	limiter   *ratelimit.Service
	overrides *overrides.Registry
	registry  *prometheus.Registry
	layer     *transport.Layer
	limits    transport.Limits
	// grpcConns bounds the grpc-go port's connections.
	grpcConns int
	// tls serves both ports over TLS; nil: cleartext (h2c).
	tls       *transport.Certificates
	health    *grpchealth.StaticChecker
	ready     atomic.Bool
	closers   []func() error        // store clients, closed after the limiter
	redis     redis.UniversalClient // nil without UNKEY_REDIS_URL
	connect   *connectapi.Handler
	keyAPI    *connectapi.Keys
	auditAPI  *connectapi.Audit
	analytics *connectapi.Analytics
	recorder  *analytics.Recorder
	keys      *keys.Ring
	keyFile   *keys.File  // nil without UNKEY_AUTH_KEYS_FILE
	keyTable  *keys.Table // nil without MySQL
	unkey     *unkeyv2.Handler
	rls       *envoyrls.Service
	rlsSource *rlsconfig.Source // nil without UNKEY_RLS_CONFIG
}

// newServer wires a server from cfg. It starts nothing.
func newServer(cfg config, logger *slog.Logger) (*server, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	opts := []ratelimit.Option{ratelimit.WithLogger(logger), ratelimit.WithRegisterer(reg),
		ratelimit.WithMaxWindowsPerWorkspace(cfg.MaxWindowsPerWorkspace)}
	ovOpts := []overrides.Option{overrides.WithLogger(logger), overrides.WithPollInterval(cfg.OverridesPollInterval),
		overrides.WithMaxPerWorkspace(cfg.MaxOverridesPerWorkspace),
		overrides.WithMaxPatternsPerNamespace(cfg.MaxOverridePatternsPerNamespace), overrides.WithRegisterer(reg)}
	tracing, err := telemetry.Setup(context.Background(), tracingService)
	if err != nil {
		return nil, err
	}
	var closers []func() error
	if tracing.On {
		closers = append(closers, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return tracing.Shutdown(ctx)
		})
		logger.Info("tracing on: every call a span, exported as OTEL_* says")
	}
	ring := keys.NewRing(keys.WithTokens(cfg.tokens))
	var keyFile *keys.File
	if cfg.AuthKeysFile != "" {
		var err error
		if keyFile, err = keys.NewFile(cfg.AuthKeysFile, ring, keys.WithFileLogger(logger), keys.WithFileRegisterer(reg)); err != nil {
			return nil, fmt.Errorf("UNKEY_AUTH_KEYS_FILE: %w", err)
		}
	}
	var auditLog audit.Log = audit.NewMemory(audit.DefaultMemoryEntries)
	var keyStore keys.Store // nil without MySQL: keys are not managed
	var keyTable *keys.Table
	// processID names this process in the roll call and, without Redis or
	// MySQL, as the scope of its reservations' ledger.
	processID := reservation.NewProcessID()
	// Reservations settle once in the widest scope there is: every region
	// with MySQL, the region with Redis alone, else this process.
	var ledger reservation.Ledger = reservation.NewMemory(reservation.DefaultMemoryRecords, time.Now)
	ledgerScope := "process:" + processID
	var loadSecret func(context.Context) ([]byte, error)
	var analyticsStore analytics.Store // and its fleet: MySQL's, else this process's memory
	var fleet analytics.Fleet
	var client redis.UniversalClient
	var redisStore *redisstore.Store // for the roll call's breakers
	switch {
	case cfg.redis != nil:
		client = redis.NewClient(cfg.redis)
		logger.Info("regional store configured", "redis", cfg.redis.Addr)
	case cfg.redisCluster != nil:
		client = redis.NewClusterClient(cfg.redisCluster)
		logger.Info("regional store configured", "redis_cluster_seeds", cfg.redisCluster.Addrs)
	}
	if client != nil {
		if tracing.On {
			// Every Redis command a span: the request path's reads and the
			// background replays and refreshes alike.
			if err := redisotel.InstrumentTracing(client, redisotel.WithTracerProvider(tracing.Provider)); err != nil {
				return nil, fmt.Errorf("trace redis: %w", err)
			}
		}
		closers = append(closers, client.Close)
		regional, err := redisstore.New(client, redisstore.WithLogger(logger), redisstore.WithRegisterer(reg))
		if err != nil {
			return nil, err
		}
		redisStore = regional
		opts = append(opts, ratelimit.WithRegionalStore(regional))
		ledger, ledgerScope = reservation.NewRedis(client), "region:"+cfg.Region
		loadSecret = func(ctx context.Context) ([]byte, error) { return reservation.RedisSecret(ctx, client) }
	}
	if cfg.mysql != nil {
		var traced []otelsql.Option
		if tracing.On {
			traced = append(traced, otelsql.WithTracerProvider(tracing.Provider))
		}
		sqlDB, err := cmdutil.OpenMySQL(cfg.mysql, mysqlConns, traced...)
		if err != nil {
			return nil, err
		}
		closers = append(closers, sqlDB.Close)
		opts = append(opts, ratelimit.WithGlobalStore(mysqlstore.New(sqlDB)),
			ratelimit.WithGlobalFlushIntervals(cfg.GlobalFlushInterval, cfg.GlobalFullFlushInterval),
			ratelimit.WithGlobalSyncInterval(cfg.GlobalSyncInterval))
		ovOpts = append(ovOpts, overrides.WithStore(overridesmysql.New(sqlDB)))
		auditLog, keyStore = audit.NewMySQL(sqlDB), keys.NewMySQL(sqlDB)
		ledger, ledgerScope = reservation.NewMySQL(sqlDB), ""
		a := analytics.NewMySQL(sqlDB, time.Now)
		analyticsStore, fleet = a, a
		loadSecret = func(ctx context.Context) ([]byte, error) { return reservation.MySQLSecret(ctx, sqlDB) }
		if keyTable, err = keys.NewTable(keyStore, ring, reg, keys.WithPollInterval(cfg.OverridesPollInterval),
			keys.WithTableLogger(logger)); err != nil {
			return nil, err
		}
		logger.Info("global counters configured", "mysql", cfg.mysql.Addr, "database", cfg.mysql.DBName,
			"flush", cfg.GlobalFlushInterval, "full_flush", cfg.GlobalFullFlushInterval, "sync", cfg.GlobalSyncInterval)
	}
	limiter, err := ratelimit.New(cfg.Region, opts...)
	if err != nil {
		return nil, fmt.Errorf("create limiter: %w", err)
	}
	ov, err := overrides.New(ovOpts...)
	if err != nil {
		return nil, err
	}
	auditWriter, err := audit.NewWriter(auditLog, logger, reg)
	if err != nil {
		return nil, fmt.Errorf("register audit metrics: %w", err)
	}
	var manager *keys.Manager
	if keyStore != nil {
		manager = keys.NewManager(keyStore, auditWriter)
	}
	analyticsInMemory := analyticsStore == nil
	if analyticsInMemory {
		a := analytics.NewMemory(analytics.DefaultMemoryRows, time.Now)
		analyticsStore, fleet = a, a
	}
	recorder, err := analytics.NewRecorder(analyticsStore, logger, reg, analytics.WithFlushInterval(cfg.AnalyticsFlushInterval),
		analytics.WithRollCall(fleet, func() analytics.Process {
			p := analytics.Process{ID: processID, Region: cfg.Region, LastSync: limiter.LastGlobalSync()}
			if redisStore != nil {
				p.Breakers = redisStore.Breakers()
			}
			return p
		}))
	if err != nil {
		return nil, fmt.Errorf("register analytics metrics: %w", err)
	}
	var keyring *reservation.Keyring
	if cfg.ReservationSecret != "" {
		if keyring, err = reservation.StaticKeyring([]byte(cfg.ReservationSecret)); err != nil {
			return nil, fmt.Errorf("UNKEY_RESERVATION_SECRET: %w", err)
		}
	} else {
		keyring = reservation.NewKeyring(loadSecret, logger)
	}
	p, err := pipeline.New(limiter, ov, reg, pipeline.WithKeys(ring), pipeline.WithAudit(auditWriter),
		pipeline.WithReservations(keyring, ledger, ledgerScope), pipeline.WithLogger(logger), pipeline.WithAnalytics(recorder),
		pipeline.WithBatchEntriesInFlight(cfg.batchEntriesInFlight()))
	if err != nil {
		return nil, fmt.Errorf("register api metrics: %w", err)
	}
	layer, err := transport.NewLayer(p, transport.NewBudget(transport.DefaultBudget), logger, reg)
	if err != nil {
		return nil, err
	}
	if tracing.On {
		layer.WithTracing(tracing.Provider, tracing.Propagator)
	}
	var certs *transport.Certificates
	if cfg.TLSCertFile != "" {
		if certs, err = transport.LoadCertificates(transport.TLSFiles{Cert: cfg.TLSCertFile, Key: cfg.TLSKeyFile,
			ClientCA: cfg.TLSClientCAFile}, logger, reg); err != nil {
			return nil, fmt.Errorf("UNKEY_TLS_CERT_FILE, UNKEY_TLS_KEY_FILE, UNKEY_TLS_CLIENT_CA_FILE: %w", err)
		}
	}
	rls, rlsSource, err := newRLS(cfg, logger, reg, p)
	if err != nil {
		return nil, err
	}
	return &server{
		logger:    logger,
		limiter:   limiter,
		overrides: ov,
		registry:  reg,
		layer:     layer,
		limits: transport.Limits{ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout,
			MaxHeaderBytes: cfg.MaxHeaderBytes, MaxConcurrentStreams: cfg.MaxConcurrentStreams},
		grpcConns: cfg.GRPCMaxConnections,
		tls:       certs,
		health:    grpchealth.NewStaticChecker(services...),
		closers:   closers,
		redis:     client,
		connect:   connectapi.New(layer),
		keyAPI:    connectapi.NewKeys(layer, manager),
		auditAPI:  connectapi.NewAudit(layer, auditLog),
		analytics: connectapi.NewAnalytics(layer, analyticsStore, fleet, connectapi.AnalyticsProcess{Region: cfg.Region,
			FlushInterval: cfg.AnalyticsFlushInterval, InMemory: analyticsInMemory}),
		recorder:  recorder,
		keys:      ring,
		keyFile:   keyFile,
		keyTable:  keyTable,
		unkey:     unkeyv2.New(layer),
		rls:       rls,
		rlsSource: rlsSource,
	}, nil
}

// newRLS builds Envoy's rate limit service of cfg: its rules from
// UNKEY_RLS_CONFIG (refusing to start on a broken file), or none.
func newRLS(cfg config, logger *slog.Logger, reg prometheus.Registerer, p *pipeline.Pipeline) (*envoyrls.Service, *rlsconfig.Source, error) {
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
	opts := []envoyrls.Option{envoyrls.WithShadowMode(cfg.RLSShadowMode), envoyrls.WithNearLimitRatio(cfg.RLSNearLimitRatio),
		envoyrls.WithOverLimitHitsCounted(cfg.RLSCountOverLimit), envoyrls.WithDynamicMetadata(cfg.RLSResponseDynamicMetadata)}
	if cfg.RLSResponseHeaders {
		opts = append(opts, envoyrls.WithResponseHeaders(envoyrls.Headers{Limit: cfg.RLSLimitHeader,
			Remaining: cfg.RLSRemainingHeader, Reset: cfg.RLSResetHeader}))
	}
	svc, err := envoyrls.New(p, current, reg, opts...)
	if err != nil {
		return nil, nil, err
	}
	return svc, src, nil
}

// handler returns the routes of the main port: each protocol's adapter
// behind the shared layer, reflection and health for the gRPC services,
// and the probes and metrics.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	s.connect.Register(mux)
	s.keyAPI.Register(mux)
	s.auditAPI.Register(mux)
	s.analytics.Register(mux)
	s.unkey.Register(mux)
	s.rls.Register(mux, s.layer)
	dashboard.Register(mux)
	reflector := grpcreflect.NewStaticReflector(services...)
	mux.Handle(grpcreflect.NewHandlerV1(reflector))
	mux.Handle(grpcreflect.NewHandlerV1Alpha(reflector))
	mux.Handle(grpchealth.NewHandler(s.health))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{Registry: s.registry}))
	// Any other path, or a path above on another HTTP method, is answered
	// in JSON, saying what the port serves or which method the path takes.
	mux.Handle("/", transport.NoRoute(mux, slices.Concat(services, []string{grpchealth.HealthV1ServiceName,
		grpcreflect.ReflectV1ServiceName, grpcreflect.ReflectV1AlphaServiceName}),
		"POST "+strings.Join(s.unkey.Paths(), ", ")+", POST /json, GET /healthz, /readyz, /metrics, /dashboard"))
	return mux
}

// grpcServer returns the grpc-go server of UNKEY_GRPC_ADDR, with health and
// reflection, and the function that marks it not serving at shutdown.
func (s *server) grpcServer() (*grpc.Server, func()) {
	var opts []grpc.ServerOption
	if s.tls != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(s.tls.Config())))
	}
	srv := s.layer.GRPCServer(s.limits, transport.Codecs{Decode: func(data []byte, msg any, json bool) bool {
		return connectapi.Codecs.Decode(data, msg, json) || envoyrls.Codecs.Decode(data, msg, json)
	}}, opts...)
	s.connect.RegisterGRPC(srv)
	s.keyAPI.RegisterGRPC(srv)
	s.auditAPI.RegisterGRPC(srv)
	s.analytics.RegisterGRPC(srv)
	s.rls.RegisterGRPC(srv)
	hs := health.NewServer()
	for _, name := range append(services, "") {
		hs.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	healthpb.RegisterHealthServer(srv, hs)
	reflection.Register(srv)
	return srv, hs.Shutdown
}

// serve serves on ln (and gRPC over grpc-go on grpcLn, unless it is nil)
// until ctx is done or a server fails, then stops taking new work, lets
// in-flight requests finish (up to shutdownTimeout), and only then stops the
// background loops, so that the limiter's final replay and flush carry the
// last requests. One errgroup runs it all: the servers, the loops and the
// shutdown that orders them.
func (s *server) serve(ctx context.Context, ln, grpcLn net.Listener) error {
	srv := s.limits.HTTPServer(s.handler())
	// net/http logs each malformed connection: what any client can send,
	// so throttled (a line a second after a burst of ten, with a count of
	// what was dropped).
	srv.ErrorLog = slog.NewLogLogger(cmdutil.Throttle(s.logger.Handler(), time.Second, 10), slog.LevelWarn)

	// The loops outlive ctx: they stop once the servers have.
	loopsCtx, stopLoops := context.WithCancel(context.WithoutCancel(ctx))
	defer stopLoops()
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return s.limiter.Run(loopsCtx) })
	g.Go(func() error { return s.recorder.Run(loopsCtx) })
	// Overrides from MySQL before taking traffic, so that a restarted process
	// applies them from its first request: /readyz answers 503 until then.
	// A database that does not answer leaves the load to the poll loop; a
	// SIGTERM stops the load within one page, and the process then stops.
	if err := s.overrides.Load(ctx); err != nil {
		s.logger.Warn("load overrides: serving without them until a poll loads them", "error", err)
	}
	g.Go(func() error { s.overrides.Run(loopsCtx); return nil })
	// Keys from MySQL before taking traffic, too. A process that cannot
	// read them answers unavailable to tokens no other source knows until
	// a poll does: it cannot tell a key from a guess.
	if s.keyTable != nil {
		if err := s.keyTable.Load(ctx); err != nil {
			s.logger.Warn("load keys: tokens only the keys table knows are answered unavailable until a poll loads them", "error", err)
		}
		g.Go(func() error { return s.keyTable.Run(loopsCtx) })
	}
	if s.keyFile != nil {
		g.Go(func() error { return s.keyFile.Run(loopsCtx) })
	}
	if s.keys.Open() {
		s.logger.Warn("no keys configured (UNKEY_AUTH_TOKENS, UNKEY_AUTH_KEYS_FILE, or a key in MySQL): the API is open " +
			"and every caller shares the workspace " + pipeline.OpenWorkspace)
	}
	// The cluster's map of nodes before the first request, so that a master
	// that dies later is replaced by a replica the client knows of (see
	// redisstore.Warm). A Redis that does not answer is no reason not to
	// serve: decisions are local until it does.
	if s.redis != nil {
		warmCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := redisstore.Warm(warmCtx, s.redis); err != nil {
			s.logger.Warn("redis does not answer: serving on local decisions until it does", "error", err)
		}
		cancel()
	}
	if s.rlsSource != nil {
		g.Go(func() error { return s.rlsSource.Run(loopsCtx) })
	}
	g.Go(func() error {
		serve := func() error { return srv.Serve(ln) }
		if s.tls != nil {
			srv.TLSConfig = s.tls.Config()
			var p http.Protocols
			p.SetHTTP1(true)
			p.SetHTTP2(true)
			srv.Protocols = &p
			serve = func() error { return srv.ServeTLS(ln, "", "") }
		}
		if err := serve(); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve http: %w", err)
		}
		return nil
	})
	var grpcSrv *grpc.Server
	if grpcLn != nil {
		g2, stopHealth := s.grpcServer()
		grpcSrv = g2
		defer stopHealth()
		limited := transport.LimitListener(grpcLn, s.grpcConns)
		g.Go(func() error {
			if err := g2.Serve(limited); err != nil {
				return fmt.Errorf("serve grpc: %w", err)
			}
			return nil
		})
		s.logger.Info("serving gRPC over grpc-go", "addr", grpcLn.Addr().String())
	}
	s.ready.Store(true)
	s.logger.Info("serving", "addr", ln.Addr().String(), "region", s.limiter.Region())

	g.Go(func() error {
		<-gctx.Done() // ctx ended, or a server failed
		s.ready.Store(false)
		for _, name := range services {
			s.health.SetStatus(name, grpchealth.StatusNotServing)
		}
		s.logger.Info("shutting down")
		shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		var err error
		if serr := srv.Shutdown(shutdownCtx); serr != nil {
			err = fmt.Errorf("shut down http server: %w", serr)
		}
		if grpcSrv != nil {
			stopped := make(chan struct{})
			go func() { grpcSrv.GracefulStop(); close(stopped) }()
			select {
			case <-stopped:
			case <-shutdownCtx.Done():
				grpcSrv.Stop()
				err = errors.Join(err, fmt.Errorf("shut down grpc server: %w", shutdownCtx.Err()))
			}
		}
		stopLoops() // after the last request: the final flush carries it
		return err
	})
	err := g.Wait()
	for _, closeFn := range s.closers {
		if cerr := closeFn(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close store client: %w", cerr))
		}
	}
	return err
}

// mysqlConns bounds the API's MySQL pool. The loops use at most three
// connections at a time (one flush or sync, one overrides poll, one keys
// poll); five leave room for a slow one and for override and key writes.
const mysqlConns = 5
