package daemon

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"time"

	"github.com/XSAM/otelsql"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/telemetry"
	"github.com/unkeyed/ratelimit/services/analytics"
	analyticsmem "github.com/unkeyed/ratelimit/services/analytics/memstore"
	analyticsmysql "github.com/unkeyed/ratelimit/services/analytics/mysqlstore"
	auditmem "github.com/unkeyed/ratelimit/services/audit/memstore"
	auditmysql "github.com/unkeyed/ratelimit/services/audit/mysqlstore"
	auditstore "github.com/unkeyed/ratelimit/services/audit/store"
	keysmysql "github.com/unkeyed/ratelimit/services/keys/mysqlstore"
	keysstore "github.com/unkeyed/ratelimit/services/keys/store"
	overridesmysql "github.com/unkeyed/ratelimit/services/overrides/mysqlstore"
	overridesstore "github.com/unkeyed/ratelimit/services/overrides/store"
	penaltiesmysql "github.com/unkeyed/ratelimit/services/penalties/mysqlstore"
	penaltiesstore "github.com/unkeyed/ratelimit/services/penalties/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/mysqlstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	ledgermem "github.com/unkeyed/ratelimit/services/reservation/memstore"
	ledgermysql "github.com/unkeyed/ratelimit/services/reservation/mysqlstore"
	ledgerredis "github.com/unkeyed/ratelimit/services/reservation/redisstore"
	ledgerstore "github.com/unkeyed/ratelimit/services/reservation/store"
)

// MySQLConns bounds each of a process's two MySQL pools. The loops' pool
// serves the limiter's flush and its sync, the overrides poll, the keys
// poll, the penalties' writes and poll and the analytics flush (with the
// roll call after it): six connections, one each. The requests' pool serves what callers ask of
// MySQL: the analytics' queries, the audit log, keys, overrides,
// penalties (read, listed, lifted) and the reservations' ledger. No caller's query, however slow, takes a
// connection a loop needs: with one pool, six slow analytics queries of
// one tenant held another tenant's revoked key in force for 56.7 s. Six
// each keep the pools small for a fleet of hundreds of processes.
const MySQLConns = 6

// stores are the process's clients and the stores the configuration names:
// the region's Redis and the shared MySQL when configured, memory for what
// neither holds. Each field says what it is without either.
type stores struct {
	// closers close the clients, after the loops that use them stopped.
	closers []func() error
	// redis is the region's client; nil without UNKEY_REDIS_URL.
	redis redis.UniversalClient
	// regional is the limiter's regional store; nil without Redis.
	regional *redisstore.Store
	// global is the limiter's global store; nil without MySQL.
	global store.Global
	// overrides persist overrides; nil without MySQL (memory).
	// overridesPoll is the same table through the loops' pool.
	overrides, overridesPoll overridesstore.Overrides
	// penalties keep the penalty boxes; nil without MySQL (memory).
	// penaltiesLoop is the same table through the loops' pool.
	penalties, penaltiesLoop penaltiesstore.Penalties
	// keys are the managed keys; nil without MySQL: keys are not managed.
	// keysPoll is the same table through the loops' pool.
	keys, keysPoll keysstore.Store
	// audit holds the audit log: MySQL's, else this process's memory.
	audit auditstore.Log
	// ledger settles each reservation once in the widest scope there is:
	// every region with MySQL, the region with Redis alone, else this
	// process; ledgerScope names it ("" for every region).
	ledger      ledgerstore.Ledger
	ledgerScope string
	// loadSecret reads the shared reservation secret; nil without a store
	// that can hold it.
	loadSecret func(context.Context) ([]byte, error)
	// analytics and fleet: MySQL's, else this process's memory, as the
	// loops write them; analyticsQueries and fleetQueries as callers read
	// them (through the requests' pool).
	analytics        analytics.Store
	fleet            analytics.Fleet
	analyticsQueries analytics.Store
	fleetQueries     analytics.Fleet
}

// openStores opens what cfg names. processID scopes a ledger that only this
// process holds. It starts nothing but the clients' connection pools.
func openStores(cfg Config, logger *slog.Logger, reg prometheus.Registerer, tracing *telemetry.Tracing, processID string) (*stores, error) {
	s := &stores{
		audit:       auditmem.New(auditmem.DefaultEntries),
		ledger:      ledgermem.New(ledgermem.DefaultRecords, time.Now),
		ledgerScope: "process:" + processID,
	}
	switch {
	case cfg.redis != nil:
		s.redis = redis.NewClient(cfg.redis)
		logger.Info("regional store configured", "redis", cfg.redis.Addr)
	case cfg.redisCluster != nil:
		s.redis = redis.NewClusterClient(cfg.redisCluster)
		logger.Info("regional store configured", "redis_cluster_seeds", cfg.redisCluster.Addrs)
	}
	if s.redis != nil {
		s.closers = append(s.closers, s.redis.Close)
		if tracing.On {
			// Every Redis command a span: the request path's reads and the
			// background replays and refreshes alike.
			if err := redisotel.InstrumentTracing(s.redis, redisotel.WithTracerProvider(tracing.Provider)); err != nil {
				return s, fmt.Errorf("trace redis: %w", err)
			}
		}
		regional, err := redisstore.New(s.redis, redisstore.WithLogger(logger), redisstore.WithRegisterer(reg))
		if err != nil {
			return s, err
		}
		client := s.redis
		s.regional = regional
		s.ledger, s.ledgerScope = ledgerredis.New(client), "region:"+cfg.Region
		s.loadSecret = func(ctx context.Context) ([]byte, error) { return ledgerredis.Secret(ctx, client) }
	}
	if cfg.mysql != nil {
		var traced []otelsql.Option
		if tracing.On {
			traced = append(traced, otelsql.WithTracerProvider(tracing.Provider))
		}
		loops, err := cmdutil.OpenMySQL(cfg.mysql, MySQLConns, traced...)
		if err != nil {
			return s, err
		}
		s.closers = append(s.closers, loops.Close)
		requests, err := cmdutil.OpenMySQL(cfg.mysql, MySQLConns, traced...)
		if err != nil {
			return s, err
		}
		s.closers = append(s.closers, requests.Close)
		s.useMySQL(loops, requests, cfg.MaxSettlementsPerWorkspace)
		logger.Info("global counters configured", "mysql", cfg.mysql.Addr, "database", cfg.mysql.DBName,
			"flush", cfg.GlobalFlushInterval, "full_flush", cfg.GlobalFullFlushInterval, "sync", cfg.GlobalSyncInterval)
	}
	if s.analytics == nil {
		a := analyticsmem.New(analyticsmem.DefaultRows, time.Now)
		s.analytics, s.fleet = a, a
		s.analyticsQueries, s.fleetQueries = a, a
	}
	return s, nil
}

// useMySQL puts MySQL's stores in place of memory's, and of Redis's ledger:
// what the loops read and write through loops, what callers ask through
// requests; a workspace keeps at most maxSettlements live settlements.
func (s *stores) useMySQL(loops, requests *sql.DB, maxSettlements int64) {
	s.global = mysqlstore.New(loops)
	s.overrides, s.overridesPoll = overridesmysql.New(requests), overridesmysql.New(loops)
	s.penalties, s.penaltiesLoop = penaltiesmysql.New(requests), penaltiesmysql.New(loops)
	s.audit = auditmysql.New(requests)
	s.keys, s.keysPoll = keysmysql.New(requests), keysmysql.New(loops)
	s.ledger, s.ledgerScope = ledgermysql.New(requests, ledgermysql.WithMaxPerWorkspace(maxSettlements)), ""
	a := analyticsmysql.New(loops, time.Now)
	s.analytics, s.fleet = a, a
	q := analyticsmysql.New(requests, time.Now)
	s.analyticsQueries, s.fleetQueries = q, q
	s.loadSecret = func(ctx context.Context) ([]byte, error) { return ledgermysql.Secret(ctx, requests) }
}
