package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"connectrpc.com/grpchealth"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/cmd/api/internal/connectapi"
	"github.com/unkeyed/ratelimit/cmd/api/internal/dashboard"
	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/rlqs"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/cmd/api/internal/unkeyv2"
	"github.com/unkeyed/ratelimit/internal/certs"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/services/analytics"
	"github.com/unkeyed/ratelimit/services/audit"
	"github.com/unkeyed/ratelimit/services/keys"
	"github.com/unkeyed/ratelimit/services/overrides"
	"github.com/unkeyed/ratelimit/services/penalties"
	"github.com/unkeyed/ratelimit/services/ratelimit"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// TracingService is the API's service.name in its spans, unless
// OTEL_SERVICE_NAME names another.
const TracingService = "unkey-ratelimit-api"

// Daemon is one API process: a limiter behind the protocol adapters, with
// health, readiness and metrics endpoints, and the loops that keep its
// stores in step. Build it with [New]; serve it with [Daemon.Serve].
type Daemon struct {
	cfg      Config
	logger   *slog.Logger
	registry *prometheus.Registry
	limiter  *ratelimit.Service
	// layer is the transport every adapter shares.
	layer    *transport.Layer
	adapters []Adapter
	// quota is Envoy's quota service, whose streams are drained before
	// the servers stop (they would otherwise hold the stop to its end).
	quota *rlqs.Service
	// loops run from Serve until the servers stopped.
	loops []Loop
	// loads run before the process reports ready.
	loads []load
	// tls serves both ports over TLS; nil: cleartext (h2c).
	tls *certs.Certificates
	// grpcTLS serves the grpc-go port over TLS instead of tls, where
	// UNKEY_GRPC_TLS_CERT_FILE is set.
	grpcTLS *certs.Certificates
	health  *grpchealth.StaticChecker
	ready   atomic.Bool
	// readyChecks must all pass, besides ready, for the process to report
	// ready: what it waits for while it already serves.
	readyChecks []readyCheck
	// redis is the region's client, warmed before serving; nil without
	// UNKEY_REDIS_URL.
	redis redis.UniversalClient
	// open reports whether no key is configured anywhere.
	open func() bool
	// closers run after the loops stopped: tracing's exporter, then the
	// stores' clients.
	closers []closer
}

// New builds a Daemon from cfg, logging to logger. It starts nothing; a
// configuration the stores or the rule files refuse is an error that names
// its variable.
func New(cfg Config, logger *slog.Logger) (*Daemon, error) {
	d := &Daemon{cfg: cfg, logger: logger, registry: prometheus.NewRegistry()}
	if err := d.build(); err != nil {
		d.close() // what was opened before the failure
		return nil, err
	}
	return d, nil
}

// build wires d from its configuration.
func (d *Daemon) build() error {
	cfg, logger, reg := d.cfg, d.logger, d.registry
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	tracing, err := telemetry.Setup(context.Background(), TracingService)
	if err != nil {
		return err
	}
	if tracing.On {
		d.closers = append(d.closers, closer{"tracing exporter", func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return tracing.Shutdown(ctx)
		}})
		logger.Info("tracing on: every call a span, exported as OTEL_* says")
	}
	// processID names this process in the roll call and, without Redis or
	// MySQL, scopes its reservations' ledger.
	processID := reservation.NewProcessID()
	st, err := openStores(cfg, logger, reg, tracing, processID)
	for _, c := range st.closers {
		d.closers = append(d.closers, closer{"store client", c})
	}
	if err != nil {
		return err
	}

	limiterOpts := []ratelimit.Option{ratelimit.WithLogger(logger), ratelimit.WithRegisterer(reg),
		ratelimit.WithMaxWindowsPerWorkspace(cfg.MaxWindowsPerWorkspace)}
	if st.regional != nil {
		limiterOpts = append(limiterOpts, ratelimit.WithRegionalStore(st.regional))
		d.redis = st.redis
	}
	if st.global != nil {
		limiterOpts = append(limiterOpts, ratelimit.WithGlobalStore(st.global),
			ratelimit.WithGlobalFlushIntervals(cfg.GlobalFlushInterval, cfg.GlobalFullFlushInterval),
			ratelimit.WithGlobalSyncInterval(cfg.GlobalSyncInterval))
	}
	if d.limiter, err = ratelimit.New(cfg.Region, limiterOpts...); err != nil {
		return fmt.Errorf("create limiter: %w", err)
	}
	d.loops = append(d.loops, d.limiter)
	if cfg.DebugAddr != "" {
		d.loops = append(d.loops, debugServer(cfg.DebugAddr, cfg.DebugContention, logger))
	}
	if cfg.MetricsAddr != "" {
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", d.metricsHandler())
		d.loops = append(d.loops, sideServer{setting: "UNKEY_METRICS_ADDR", addr: cfg.MetricsAddr, what: "metrics", handler: mux, logger: logger})
	}

	ov, err := newOverrides(cfg, logger, reg, st)
	if err != nil {
		return err
	}
	d.loads = append(d.loads, load{ov, "load overrides: serving without them until a poll loads them"})
	d.loops = append(d.loops, ov)

	ring, table, err := d.newKeys(cfg, st)
	if err != nil {
		return err
	}
	d.open = ring.Open

	auditWriter, err := audit.NewWriter(st.audit, logger, reg, audit.WithChangesPerSecond(cfg.AuditChangesPerSecond))
	if err != nil {
		return fmt.Errorf("register audit metrics: %w", err)
	}
	var manager *keys.Manager // nil without MySQL: keys are not managed
	if st.keys != nil {
		// A change made here is in force here at once; the other
		// processes read it at their next poll.
		manager = keys.NewManager(st.keys, auditWriter, keys.WithApplied(table.Apply))
	}
	recorder, err := analytics.NewRecorder(st.analytics, logger, reg, analytics.WithFlushInterval(cfg.AnalyticsFlushInterval),
		analytics.WithRollCall(st.fleet, func() analytics.Process {
			p := analytics.Process{ID: processID, Region: cfg.Region, LastSync: d.limiter.LastGlobalSync()}
			if st.regional != nil {
				p.Breakers = st.regional.Breakers()
			}
			return p
		}))
	if err != nil {
		return fmt.Errorf("register analytics metrics: %w", err)
	}
	d.loops = append(d.loops, recorder)

	keyring, err := reservationKeyring(cfg, st, logger)
	if err != nil {
		return err
	}
	box, err := newPenalties(cfg, logger, reg, st)
	if err != nil {
		return err
	}
	d.loads = append(d.loads, load{box, "load penalties: blocks started before this process are enforced here once a poll reads them"})
	d.loops = append(d.loops, box)
	p, err := pipeline.New(d.limiter, ov, reg, pipeline.WithAudit(auditWriter),
		pipeline.WithReservations(keyring, st.ledger, st.ledgerScope), pipeline.WithLogger(logger), pipeline.WithAnalytics(recorder),
		pipeline.WithBatchEntriesInFlight(cfg.batchEntriesInFlight()), pipeline.WithPenalties(box))
	if err != nil {
		return fmt.Errorf("register api metrics: %w", err)
	}
	if d.layer, err = transport.NewLayer(ring, transport.NewBudget(cfg.DecodeBudgetBytes, cfg.DecodeShareBytes), logger, reg); err != nil {
		return err
	}
	if tracing.On {
		d.layer.WithTracing(tracing.Provider, tracing.Propagator)
	}
	if d.tls, d.grpcTLS, err = loadTLS(cfg, logger, reg); err != nil {
		return err
	}

	rls, err := d.newRLS(cfg, p)
	if err != nil {
		return err
	}
	if d.quota, err = d.newQuota(cfg, rls, p); err != nil {
		return err
	}
	d.adapters = []Adapter{
		connectapi.New(d.layer, p),
		connectapi.NewKeys(d.layer, manager),
		connectapi.NewAudit(d.layer, st.audit),
		connectapi.NewAnalytics(d.layer, st.analyticsQueries, st.fleetQueries, connectapi.AnalyticsProcess{Region: cfg.Region,
			FlushInterval: cfg.AnalyticsFlushInterval, InMemory: cfg.mysql == nil}),
		unkeyv2.New(d.layer, p),
		rls,
		rlqs.NewAdapter(d.layer, d.quota),
		dashboard.New(),
	}
	d.health = grpchealth.NewStaticChecker(d.services()...)
	return nil
}

// newOverrides builds the overrides registry on the store st holds, or in
// memory.
func newOverrides(cfg Config, logger *slog.Logger, reg prometheus.Registerer, st *stores) (*overrides.Registry, error) {
	opts := []overrides.Option{overrides.WithLogger(logger), overrides.WithPollInterval(cfg.OverridesPollInterval),
		overrides.WithMaxPerWorkspace(cfg.MaxOverridesPerWorkspace),
		overrides.WithMaxPatternsPerNamespace(cfg.MaxOverridePatternsPerNamespace), overrides.WithRegisterer(reg)}
	if st.overrides != nil {
		opts = append(opts, overrides.WithStore(st.overrides), overrides.WithPollStore(st.overridesPoll))
	}
	return overrides.New(opts...)
}

// newPenalties builds the penalty boxes on the store st holds, or in
// memory.
func newPenalties(cfg Config, logger *slog.Logger, reg prometheus.Registerer, st *stores) (*penalties.Box, error) {
	opts := []penalties.Option{penalties.WithLogger(logger), penalties.WithPollInterval(cfg.PenaltiesPollInterval),
		penalties.WithMaxBlocks(cfg.MaxPenaltyBlocks), penalties.WithRegisterer(reg)}
	if st.penalties != nil {
		opts = append(opts, penalties.WithStore(st.penalties), penalties.WithLoopStore(st.penaltiesLoop))
	}
	return penalties.New(opts...)
}

// newKeys builds the ring of keys the API authenticates with: the tokens
// of UNKEY_AUTH_TOKENS, the keys file's and the keys table's (returned
// too; nil without MySQL), each source with the loop that follows its
// changes.
func (d *Daemon) newKeys(cfg Config, st *stores) (*keys.Ring, *keys.Table, error) {
	ring := keys.NewRing(keys.WithTokens(cfg.tokens))
	if cfg.AuthKeysFile != "" {
		file, err := keys.NewFile(cfg.AuthKeysFile, ring, keys.WithFileLogger(d.logger), keys.WithFileRegisterer(d.registry))
		if err != nil {
			return nil, nil, fmt.Errorf("UNKEY_AUTH_KEYS_FILE: %w", err)
		}
		d.loops = append(d.loops, file)
	}
	var table *keys.Table
	if st.keys != nil {
		var err error
		table, err = keys.NewTable(st.keysPoll, ring, d.registry, keys.WithPollInterval(cfg.OverridesPollInterval),
			keys.WithTableLogger(d.logger))
		if err != nil {
			return nil, nil, err
		}
		// A process that cannot read the keys answers unavailable to tokens
		// no other source knows until a poll does: it cannot tell a key
		// from a guess.
		d.loads = append(d.loads, load{table, "load keys: tokens only the keys table knows are answered unavailable until a poll loads them"})
		d.loops = append(d.loops, table)
	}
	return ring, table, nil
}

// reservationKeyring returns the keys that sign reservation tokens:
// UNKEY_RESERVATION_SECRET's, else the secret the stores share.
func reservationKeyring(cfg Config, st *stores, logger *slog.Logger) (*reservation.Keyring, error) {
	if cfg.ReservationSecret == "" {
		return reservation.NewKeyring(st.loadSecret, logger), nil
	}
	k, err := reservation.StaticKeyring([]byte(cfg.ReservationSecret))
	if err != nil {
		return nil, fmt.Errorf("UNKEY_RESERVATION_SECRET: %w", err)
	}
	return k, nil
}

// Registry returns the process's metrics registry: what GET /metrics serves.
func (d *Daemon) Registry() *prometheus.Registry { return d.registry }

// Limiter returns the process's limiter.
func (d *Daemon) Limiter() *ratelimit.Service { return d.limiter }

// Ready reports whether the process takes traffic: from the end of the
// loads before serving until the shutdown begins (what GET /readyz
// answers).
func (d *Daemon) Ready() bool { return d.notReady(false) == "" }

// readyCheck is something the process waits for before it reports ready,
// named for the answer of /readyz.
type readyCheck struct {
	what string
	// detail says more to an operator (a caller with status.read): the
	// address waited on, which the probes, open to anyone, do not name.
	detail string
	// done is closed once what it waits for is there, for good.
	done <-chan struct{}
}

// passed reports whether c's wait is over.
func (c readyCheck) passed() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// notReady returns what the process waits for, "" when it is ready; with
// its detail for an operator.
func (d *Daemon) notReady(operator bool) string {
	if !d.ready.Load() {
		return "not ready"
	}
	for _, c := range d.readyChecks {
		if !c.passed() {
			if operator && c.detail != "" {
				return "not ready: waiting for " + c.what + " " + c.detail
			}
			return "not ready: waiting for " + c.what
		}
	}
	return ""
}

// closer is one thing to close after the loops stopped, named for the
// error that reports its failure.
type closer struct {
	what  string
	close func() error
}

// close closes what the daemon opened, in order, and reports each failure
// naming what failed.
func (d *Daemon) close() error {
	var err error
	for _, c := range d.closers {
		if cerr := c.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("close %s: %w", c.what, cerr))
		}
	}
	d.closers = nil
	return err
}
