package daemon

import (
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/cmd/api/internal/pipeline"
	"github.com/unkeyed/ratelimit/cmd/api/internal/transport"
	"github.com/unkeyed/ratelimit/internal/certs"
	"github.com/unkeyed/ratelimit/internal/cmdutil"
	"github.com/unkeyed/ratelimit/internal/envconfig"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
	"github.com/unkeyed/ratelimit/services/ratelimit/redisstore"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// Config is the API server's configuration, read from the environment by
// [LoadConfig]: each exported field is one variable, with its default and
// its help text (what api --help prints).
type Config struct {
	Region   string `env:"UNKEY_REGION,required" help:"this process's region: 1-48 printable ASCII characters, no spaces"`
	HTTPAddr string `env:"UNKEY_HTTP_ADDR" envDefault:":7070" help:"where the API listens (Connect, gRPC, gRPC-Web, Unkey v2, /json, /metrics, /dashboard); host:port"`
	// GRPCAddr, if set, serves gRPC over grpc-go there too: about half the
	// CPU of a call on the main port.
	GRPCAddr string `env:"UNKEY_GRPC_ADDR" help:"where to serve gRPC on grpc-go as well (half the CPU a call; point Envoy here); empty: not served"`
	// GRPCMaxConnections bounds the connections the grpc-go port holds at
	// once; more wait to be accepted. Envoy multiplexes its calls over a
	// few HTTP/2 connections.
	GRPCMaxConnections int `env:"UNKEY_GRPC_MAX_CONNECTIONS" envDefault:"1000" help:"the most connections the grpc-go port holds at once: 1 to 1000000"`
	// GRPCUnreadPerWorkspace bounds the calls of one workspace on the
	// grpc-go port whose message has not all arrived: what one key's
	// unfinished messages may hold there is this many times 1 MiB at
	// most, each for at most the call's deadline.
	GRPCUnreadPerWorkspace int `env:"UNKEY_GRPC_UNREAD_PER_WORKSPACE" envDefault:"64" help:"the most calls of one workspace on the grpc-go port whose message has not all arrived; past it a call is answered busy: 1 to 100000"`
	// HTTPMaxConnections bounds the connections the main port holds at
	// once; more wait to be accepted. Keep it under the process's file
	// descriptor limit (ulimit -n), less what the stores' clients need.
	HTTPMaxConnections int `env:"UNKEY_HTTP_MAX_CONNECTIONS" envDefault:"10000" help:"the most connections the main port holds at once; keep it under ulimit -n: 1 to 1000000"`
	// DebugAddr, if set, serves Go's profiles (/debug/pprof/) there. Keep it
	// on loopback: profiles show the process's internals.
	DebugAddr string `env:"UNKEY_DEBUG_ADDR" help:"where to serve Go's profiles (/debug/pprof/); keep it on loopback; empty: not served"`
	// DebugContention samples contention for the mutex and block
	// profiles, which are empty without it: one in 100 contended locks,
	// and blocking of 10 µs and more, at a small cost to every lock.
	DebugContention bool `env:"UNKEY_DEBUG_CONTENTION" envDefault:"false" help:"with UNKEY_DEBUG_ADDR: sample contended locks (1 in 100) and blocking (10 µs and more) for /debug/pprof/mutex and /debug/pprof/block, which are empty without it; costs every lock a little"`
	// MetricsAddr, if set, serves /metrics there, without a token, instead
	// of on the API's port (where, once keys exist, it needs a key with
	// status.read). Keep it on the network only Prometheus reaches.
	MetricsAddr string `env:"UNKEY_METRICS_ADDR" help:"where to serve /metrics without a token, instead of on the API's port (where it needs a key with status.read once keys exist); keep it where only Prometheus reaches; empty: on the API's port"`
	// TLSCertFile and TLSKeyFile, if set, serve both ports over TLS (HTTP/2
	// and HTTP/1.1 by ALPN), the files read again when they change;
	// TLSClientCAFile turns on mutual TLS.
	TLSCertFile     string `env:"UNKEY_TLS_CERT_FILE" help:"PEM certificate (with its chain): both ports speak TLS only; set with UNKEY_TLS_KEY_FILE"`
	TLSKeyFile      string `env:"UNKEY_TLS_KEY_FILE" help:"PEM key of UNKEY_TLS_CERT_FILE"`
	TLSClientCAFile string `env:"UNKEY_TLS_CLIENT_CA_FILE" help:"PEM CA certificates: mutual TLS; needs the two above"`
	// GRPCTLSCertFile and its key, if set, serve the grpc-go port over TLS
	// with this certificate instead (mutual with GRPCTLSClientCAFile),
	// whether or not the main port speaks TLS: Envoy's calls over TLS
	// while the kubelet's health checks stay plain HTTP.
	GRPCTLSCertFile     string `env:"UNKEY_GRPC_TLS_CERT_FILE" help:"PEM certificate of the grpc-go port alone (instead of UNKEY_TLS_CERT_FILE); set with UNKEY_GRPC_TLS_KEY_FILE"`
	GRPCTLSKeyFile      string `env:"UNKEY_GRPC_TLS_KEY_FILE" help:"PEM key of UNKEY_GRPC_TLS_CERT_FILE"`
	GRPCTLSClientCAFile string `env:"UNKEY_GRPC_TLS_CLIENT_CA_FILE" help:"PEM CA certificates: mutual TLS on the grpc-go port; needs the two above"`
	RedisURL            string `env:"UNKEY_REDIS_URL" help:"the region's Redis: redis://, rediss://, redis+cluster://host:port[,host:port...]; empty: no regional store"`
	// RedisTLSCAFile and the client certificate, for a Redis over TLS
	// (rediss://) whose certificate a private CA signed, or that asks
	// its clients for one; read at start.
	RedisTLSCAFile   string `env:"UNKEY_REDIS_TLS_CA_FILE" help:"PEM CA certificates the Redis server's certificate must chain to (a rediss:// URL); empty: the system's"`
	RedisTLSCertFile string `env:"UNKEY_REDIS_TLS_CERT_FILE" help:"PEM client certificate for Redis over mutual TLS (a rediss:// URL); set with UNKEY_REDIS_TLS_KEY_FILE"`
	RedisTLSKeyFile  string `env:"UNKEY_REDIS_TLS_KEY_FILE" help:"PEM key of UNKEY_REDIS_TLS_CERT_FILE"`
	MySQLDSN         string `env:"UNKEY_MYSQL_DSN" help:"the MySQL (8.0.17+) or MariaDB (10.6+) every region shares, user:password@tcp(host:3306)/db; empty: no global counters"`
	AuthTokens       string `env:"UNKEY_AUTH_TOKENS" help:"comma-separated token=workspace_id entries with every permission; tokens at least 16 characters; with no keys anywhere the API is open"`
	// AuthKeysFile names a file of keys (digests, workspaces and
	// permissions; see package keys), read again when it changes.
	AuthKeysFile string `env:"UNKEY_AUTH_KEYS_FILE" help:"a JSON file of key digests, workspaces and permissions, read again every second"`
	// ReservationSecret, if set (at least 32 bytes), signs reservation
	// tokens in every process configured with it; without it the processes
	// share one they store in MySQL (or, without MySQL, in the region's
	// Redis).
	ReservationSecret string `env:"UNKEY_RESERVATION_SECRET" help:"at least 32 bytes that sign reservation tokens; empty: a secret stored in MySQL (or Redis) on first use"`
	// AnalyticsFlushInterval is how often the process adds the decisions
	// it counted to the analytics (MySQL, or its memory): how far
	// GetRatelimits lags behind.
	AnalyticsFlushInterval time.Duration `env:"UNKEY_ANALYTICS_FLUSH_INTERVAL" envDefault:"10s" help:"how often the process adds what it counted to the analytics: 100ms to 1h"`
	cmdutil.Log
	cmdutil.Settings

	// MaxWindowsPerWorkspace caps the windows one workspace may hold in a
	// process's memory.
	MaxWindowsPerWorkspace int64 `env:"UNKEY_MAX_WINDOWS_PER_WORKSPACE" envDefault:"1000000" help:"the most windows one workspace may hold in a process's memory: at least 1"`

	// MaxOverridesPerWorkspace caps the live overrides of one workspace:
	// every process loads every tenant's overrides.
	MaxOverridesPerWorkspace int64 `env:"UNKEY_MAX_OVERRIDES_PER_WORKSPACE" envDefault:"100000" help:"the most live overrides one workspace may hold: at least 1"`
	// MaxOverridePatternsPerNamespace caps the live patterns of one
	// namespace: a decision may try those that share its identifier's
	// literal prefix or suffix.
	MaxOverridePatternsPerNamespace int `env:"UNKEY_MAX_OVERRIDE_PATTERNS_PER_NAMESPACE" envDefault:"1000" help:"the most live override patterns (with *) one namespace may hold: at least 1"`
	// BatchEntriesInFlightPerWorkspace bounds the batch entries one
	// workspace may have being decided at once; 0 is a full BatchLimit for
	// every two cores.
	BatchEntriesInFlightPerWorkspace int64 `env:"UNKEY_BATCH_ENTRIES_IN_FLIGHT_PER_WORKSPACE" envDefault:"0" help:"the most batch entries one workspace may have being decided at once; 0: a full BatchLimit for every two cores"`
	// OverridesPollInterval is how often the process reads other processes'
	// override and key changes from MySQL.
	OverridesPollInterval time.Duration `env:"UNKEY_OVERRIDES_POLL_INTERVAL" envDefault:"2s" help:"how often the process reads override and key changes from MySQL: 100ms to 1h"`
	// PenaltiesPollInterval is how often the process reads the penalty
	// blocks other processes started: a block holds fleet-wide within
	// about this.
	PenaltiesPollInterval time.Duration `env:"UNKEY_PENALTIES_POLL_INTERVAL" envDefault:"1s" help:"how often the process reads the penalty blocks other processes started, from MySQL: 100ms to 1h"`
	// MaxPenaltyBlocks caps the penalty boxes a process keeps in memory
	// (about 200 bytes each): an offence past it blocks nothing.
	MaxPenaltyBlocks int64 `env:"UNKEY_MAX_PENALTY_BLOCKS" envDefault:"1000000" help:"the most penalty boxes a process keeps in memory: at least 1"`

	// The global counters' schedule: how often the process publishes the
	// cells that crossed their floor (a twentieth of the limit for windows
	// of a minute or more, half of it below; any count once another region
	// shares the cell) or grew by a flush step (a tenth of the limit, less
	// for a region with under half of a shared cell's count), how often it
	// publishes every cell that grew, and how often it reads the other
	// regions' changes. 10s for all three is the conservative setting: a
	// tenth of the writes and idle reads, ten times the cross-region
	// latency.
	GlobalFlushInterval     time.Duration `env:"UNKEY_GLOBAL_FLUSH_INTERVAL" envDefault:"1s" help:"how often the process publishes the cells that crossed their floor or grew by a step: 100ms to 1h"`
	GlobalFullFlushInterval time.Duration `env:"UNKEY_GLOBAL_FULL_FLUSH_INTERVAL" envDefault:"10s" help:"how often it publishes every shared cell that grew: 100ms to 1h, at least UNKEY_GLOBAL_FLUSH_INTERVAL"`
	GlobalSyncInterval      time.Duration `env:"UNKEY_GLOBAL_SYNC_INTERVAL" envDefault:"1s" help:"how often it reads the other regions' changes: 100ms to 1h"`

	// Envoy's rate limit service (package envoyrls).
	// RLSConfig names a file or a directory of envoyproxy/ratelimit's .yaml
	// files, read again every RLSConfigInterval; without it no rule applies
	// and every descriptor is answered OK. RLSShadowMode answers OK whatever the rules decide.
	// RLSResponseHeaders adds the limit, remaining and reset headers of the
	// descriptor closest to its limit, under envoyproxy/ratelimit's names
	// unless renamed.
	RLSConfig         string        `env:"UNKEY_RLS_CONFIG" help:"envoyproxy/ratelimit's rule files: a .yaml file or a directory of them; empty: every descriptor answered OK"`
	RLSConfigInterval time.Duration `env:"UNKEY_RLS_CONFIG_INTERVAL" envDefault:"1s" help:"how often the rule files are read for changes: 100ms to 1h"`
	RLSShadowMode     bool          `env:"UNKEY_RLS_SHADOW_MODE" help:"answer OK to every ShouldRateLimit, counting as usual"`
	// RLSXDSServer, if set, takes the rules from an xDS management server
	// (State of the World, RateLimitConfig resources, as envoyproxy/
	// ratelimit's GRPC_XDS_SOTW and Envoy Gateway's runner) instead of
	// files: the two are exclusive. Until the first configuration arrives
	// the process is not ready and ShouldRateLimit is answered
	// unavailable, unless RLSStartWithoutConfig lets it answer OK.
	RLSXDSServer          string `env:"UNKEY_RLS_XDS_SERVER" help:"an xDS management server (host:port) that pushes the rules (RateLimitConfig, State of the World); exclusive with UNKEY_RLS_CONFIG"`
	RLSXDSNodeID          string `env:"UNKEY_RLS_XDS_NODE_ID" envDefault:"default" help:"the node id this process gives the xDS management server (Envoy Gateway pushes to envoy-ratelimit)"`
	RLSXDSTLS             bool   `env:"UNKEY_RLS_XDS_TLS" help:"speak TLS to the xDS management server"`
	RLSXDSCAFile          string `env:"UNKEY_RLS_XDS_CA_FILE" help:"PEM CA certificates the xDS server's certificate must chain to; empty: the system's"`
	RLSXDSCertFile        string `env:"UNKEY_RLS_XDS_CERT_FILE" help:"PEM client certificate for mutual TLS to the xDS server; set with UNKEY_RLS_XDS_KEY_FILE"`
	RLSXDSKeyFile         string `env:"UNKEY_RLS_XDS_KEY_FILE" help:"PEM key of UNKEY_RLS_XDS_CERT_FILE"`
	RLSXDSServerName      string `env:"UNKEY_RLS_XDS_SERVER_NAME" help:"the name the xDS server's certificate must carry; empty: the host of UNKEY_RLS_XDS_SERVER"`
	RLSStartWithoutConfig bool   `env:"UNKEY_RLS_START_WITHOUT_CONFIG" help:"with UNKEY_RLS_XDS_SERVER: ready, and every ShouldRateLimit answered OK, before the first rules arrive"`
	// RLSMaxDepth, RLSMaxDescriptors and RLSMaxRulesBytes bound a
	// configuration of rules, from files or xDS (see rlsconfig.Bounds):
	// one past them is refused, the last good one staying in force.
	RLSMaxDepth       int   `env:"UNKEY_RLS_MAX_DEPTH" envDefault:"32" help:"the deepest descriptors of the rules may nest (a request's descriptor matches at most 32 levels); deeper rules are refused (an xDS config NACKed), the last good ones stay: 1 to 32"`
	RLSMaxDescriptors int   `env:"UNKEY_RLS_MAX_DESCRIPTORS" envDefault:"100000" help:"the most descriptors the rules may hold, all domains and levels together; more are refused (an xDS config NACKed), the last good ones stay: at least 1"`
	RLSMaxRulesBytes  int64 `env:"UNKEY_RLS_MAX_RULES_BYTES" envDefault:"67108864" help:"the most memory the compiled rules may take, as estimated from their paths and metadata before compiling; past it they are refused (an xDS config NACKed), the last good ones stay: 1048576 to 17179869184"`
	// RLSCalendarUnits decides a rule's DAY, WEEK, MONTH and YEAR as
	// that calendar period in RLSTimeZone (see rlsconfig.Compiler).
	RLSCalendarUnits bool   `env:"UNKEY_RLS_CALENDAR_UNITS" help:"decide every rule's unit of day, week, month or year (from files and xDS) as that calendar period in UNKEY_RLS_TIME_ZONE, not its length (a month of 30 days); a token bucket or a concurrency rule keeps the length; a calendar unit's unit_multiplier other than 1 is then refused"`
	RLSTimeZone      string `env:"UNKEY_RLS_TIME_ZONE" envDefault:"UTC" help:"the IANA time zone (such as Europe/Berlin) of the calendar periods of UNKEY_RLS_CALENDAR_UNITS"`
	// RLSCountOverLimit counts a hit over its limit, as envoyproxy/
	// ratelimit does (an AI gateway's usage report must spend the budget
	// it crosses); false counts only admitted hits.
	RLSCountOverLimit bool `env:"UNKEY_RLS_COUNT_OVER_LIMIT" envDefault:"true" help:"count a hit over its limit, as envoyproxy/ratelimit does; false counts only admitted hits"`
	// RLSFixedWindows decides every Envoy rule as a fixed window, as
	// envoyproxy/ratelimit counts, whatever its algorithm: the same counts
	// as that service during a migration.
	RLSFixedWindows bool `env:"UNKEY_RLS_FIXED_WINDOWS" help:"decide every Envoy rule as a fixed window, whatever its algorithm: envoyproxy/ratelimit's counts exactly, for a migration (a calendar's periods stay its windows)"`
	// RLSResponseDynamicMetadata answers Envoy's dynamic metadata with
	// every ShouldRateLimit (envoyproxy/ratelimit's
	// RESPONSE_DYNAMIC_METADATA).
	RLSResponseDynamicMetadata bool    `env:"UNKEY_RLS_RESPONSE_DYNAMIC_METADATA" help:"answer Envoy's dynamic metadata with every ShouldRateLimit"`
	RLSNearLimitRatio          float64 `env:"UNKEY_RLS_NEAR_LIMIT_RATIO" envDefault:"0.8" help:"the share of a limit past which a hit counts as near it in unkey_rls_near_limit_total: strictly between 0 and 1"`
	RLSResponseHeaders         bool    `env:"UNKEY_RLS_RESPONSE_HEADERS" help:"add the limit, remaining and reset headers to ShouldRateLimit answers"`
	// RLSIETFHeaders adds the IETF's RateLimit-Policy and RateLimit
	// fields to ShouldRateLimit answers (beside the three above, or
	// instead where RLSResponseHeaders is off).
	RLSIETFHeaders bool `env:"UNKEY_RLS_IETF_HEADERS" help:"add the IETF's RateLimit-Policy and RateLimit fields (draft-ietf-httpapi-ratelimit-headers) to ShouldRateLimit answers"`
	// RLSRetryAfter adds Retry-After to every refusal of ShouldRateLimit.
	RLSRetryAfter      bool   `env:"UNKEY_RLS_RETRY_AFTER" envDefault:"true" help:"add Retry-After (RFC 9110: seconds, rounded up, until the request would pass with no other traffic) to every OVER_LIMIT answer of ShouldRateLimit, which Envoy puts on its 429; none when no wait helps"`
	RLSLimitHeader     string `env:"UNKEY_RLS_LIMIT_HEADER" envDefault:"RateLimit-Limit" help:"the limit header's name: a valid HTTP header name"`
	RLSRemainingHeader string `env:"UNKEY_RLS_REMAINING_HEADER" envDefault:"RateLimit-Remaining" help:"the remaining header's name: a valid HTTP header name"`
	RLSResetHeader     string `env:"UNKEY_RLS_RESET_HEADER" envDefault:"RateLimit-Reset" help:"the reset header's name: a valid HTTP header name"`

	// Envoy's Rate Limit Quota Service (package rlqs): what a bucket no
	// rule limits is assigned, and the bounds on what one caller holds.
	RLQSNoRule                  string        `env:"UNKEY_RLQS_NO_RULE" envDefault:"allow_all" help:"what Envoy's quota filter is assigned for a bucket no rule limits: allow_all or deny_all"`
	RLQSMaxStreamsPerConnection int           `env:"UNKEY_RLQS_MAX_STREAMS_PER_CONNECTION" envDefault:"16" help:"the most quota streams one connection may have open (Envoy opens one per server and domain): 1 to 10000"`
	RLQSMaxStreamsPerWorkspace  int           `env:"UNKEY_RLQS_MAX_STREAMS_PER_WORKSPACE" envDefault:"1000" help:"the most quota streams the keys of one workspace may have open on one process: 1 to 1000000"`
	RLQSMaxBucketsPerStream     int           `env:"UNKEY_RLQS_MAX_BUCKETS_PER_STREAM" envDefault:"1000" help:"the most buckets one quota stream may report; past it the stream ends, resource_exhausted: 1 to 1000000"`
	RLQSMaxBucketsPerWorkspace  int           `env:"UNKEY_RLQS_MAX_BUCKETS_PER_WORKSPACE" envDefault:"10000" help:"the most buckets the quota streams of one workspace may report to one process, all together: 1 to 10000000"`
	RLQSAbandonAfter            time.Duration `env:"UNKEY_RLQS_ABANDON_AFTER" envDefault:"60s" help:"how long a quota bucket may report no request before its Envoy is told to abandon it: 10s to 24h"`

	// Bounds on what one client may hold of the server; see
	// transport.Limits.
	ReadTimeout          time.Duration `env:"UNKEY_HTTP_READ_TIMEOUT" envDefault:"10s" help:"the longest a client may take to send a whole request: 100ms to 1h"`
	WriteTimeout         time.Duration `env:"UNKEY_HTTP_WRITE_TIMEOUT" envDefault:"15s" help:"the longest from a request's headers to the end of its answer: 100ms to 1h"`
	IdleTimeout          time.Duration `env:"UNKEY_HTTP_IDLE_TIMEOUT" envDefault:"60s" help:"how long a connection may carry nothing before it is closed: 100ms to 1h"`
	MaxHeaderBytes       int           `env:"UNKEY_HTTP_MAX_HEADER_BYTES" envDefault:"16384" help:"the most bytes of request line and headers: 1024 to 1048576"`
	MaxConcurrentStreams int           `env:"UNKEY_HTTP2_MAX_CONCURRENT_STREAMS" envDefault:"100" help:"the most HTTP/2 streams one connection may have open at once: 1 to 10000"`
	// DecodeBudgetBytes bounds the bytes of request messages being read
	// and decoded at once, across every client and both ports (see
	// transport.Budget): what bounds the heap requests can take.
	DecodeBudgetBytes int64 `env:"UNKEY_DECODE_BUDGET_BYTES" envDefault:"67108864" help:"the most bytes of requests being read and decoded at once, all clients together; past it a request is answered busy: 1048576 to 17179869184"`
	// DecodeShareBytes bounds what one workspace holds of the decode
	// budget, so that one key's stalled bodies leave the rest to others.
	DecodeShareBytes int64 `env:"UNKEY_DECODE_BUDGET_SHARE_BYTES" envDefault:"16777216" help:"the most bytes of the decode budget one workspace holds at once; past it its request is answered busy: 1048576 to UNKEY_DECODE_BUDGET_BYTES"`

	// MaxSettlementsPerWorkspace bounds a workspace's live settlements in
	// MySQL (kept until their reservation could no longer be settled, up
	// to a day): past it a settle goes on unrecorded.
	MaxSettlementsPerWorkspace int64 `env:"UNKEY_MAX_SETTLEMENTS_PER_WORKSPACE" envDefault:"1000000" help:"the most live reservation settlements (kept up to a day) one workspace holds in MySQL; past it a settle goes on unrecorded, giving nothing back: at least 1"`

	// AuditChangesPerSecond bounds a workspace's audited changes (keys and
	// overrides): past it a change is refused, resource_exhausted, so that
	// the audit log grows at most at this rate per workspace.
	AuditChangesPerSecond float64 `env:"UNKEY_AUDIT_CHANGES_PER_SECOND" envDefault:"10" help:"the most audited changes (keys, overrides) a workspace makes a second, 20 times as many at once; past it a change is refused: 0.01 to 10000"`

	// Derived by LoadConfig.
	tokens access.Tokens
	redis  *redis.Options // nil without UNKEY_REDIS_URL, or for a cluster
	// redisCluster is set instead of redis for a redis+cluster:// URL.
	redisCluster *redis.ClusterOptions
	mysql        *mysql.Config // nil without UNKEY_MYSQL_DSN
}

// maxRegionLength is the width of the region column of the global counter
// table.
const maxRegionLength = 48

// LoadConfig reads the configuration from environ (as from os.Environ). A
// missing required variable, or a value that is malformed or not one of the
// allowed ones, is an error that names the variable and the rule; so is an
// UNKEY_* variable the API does not read, unless
// UNKEY_ALLOW_UNKNOWN_SETTINGS allows it (see cmdutil.Settings).
func LoadConfig(environ []string) (Config, error) {
	var c Config
	if err := envconfig.Parse(environ, &c); err != nil {
		return Config{}, err
	}
	if err := c.CheckUnknown(environ, c); err != nil {
		return Config{}, err
	}
	if len(c.Region) > maxRegionLength || !access.Printable(c.Region) {
		return Config{}, fmt.Errorf("UNKEY_REGION: must be 1 to %d printable characters, got %q", maxRegionLength, c.Region)
	}
	if err := c.Log.Validate(); err != nil {
		return Config{}, err
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"UNKEY_HTTP_READ_TIMEOUT", c.ReadTimeout}, {"UNKEY_HTTP_WRITE_TIMEOUT", c.WriteTimeout}, {"UNKEY_HTTP_IDLE_TIMEOUT", c.IdleTimeout},
		{"UNKEY_OVERRIDES_POLL_INTERVAL", c.OverridesPollInterval}, {"UNKEY_PENALTIES_POLL_INTERVAL", c.PenaltiesPollInterval},
		{"UNKEY_GLOBAL_FLUSH_INTERVAL", c.GlobalFlushInterval},
		{"UNKEY_GLOBAL_FULL_FLUSH_INTERVAL", c.GlobalFullFlushInterval}, {"UNKEY_GLOBAL_SYNC_INTERVAL", c.GlobalSyncInterval},
		{"UNKEY_RLS_CONFIG_INTERVAL", c.RLSConfigInterval}, {"UNKEY_ANALYTICS_FLUSH_INTERVAL", c.AnalyticsFlushInterval}} {
		if d.v < 100*time.Millisecond || d.v > time.Hour {
			return Config{}, fmt.Errorf("%s: must be between 100ms and 1h, got %s", d.name, d.v)
		}
	}
	if c.GlobalFullFlushInterval < c.GlobalFlushInterval {
		return Config{}, fmt.Errorf("UNKEY_GLOBAL_FULL_FLUSH_INTERVAL: must be at least UNKEY_GLOBAL_FLUSH_INTERVAL (%s), got %s",
			c.GlobalFlushInterval, c.GlobalFullFlushInterval)
	}
	if c.RLSMaxDepth < 1 || c.RLSMaxDepth > 32 {
		return Config{}, fmt.Errorf("UNKEY_RLS_MAX_DEPTH: must be between 1 and 32, got %d", c.RLSMaxDepth)
	}
	if c.RLSMaxDescriptors < 1 {
		return Config{}, fmt.Errorf("UNKEY_RLS_MAX_DESCRIPTORS: must be at least 1, got %d", c.RLSMaxDescriptors)
	}
	if c.RLSMaxRulesBytes < 1<<20 || c.RLSMaxRulesBytes > 16<<30 {
		return Config{}, fmt.Errorf("UNKEY_RLS_MAX_RULES_BYTES: must be between 1048576 and 17179869184, got %d", c.RLSMaxRulesBytes)
	}
	if _, err := calendar.New(calendar.Month, c.RLSTimeZone); err != nil {
		return Config{}, fmt.Errorf("UNKEY_RLS_TIME_ZONE: must be a time zone of the IANA database (such as Europe/Berlin) or UTC, got %q", c.RLSTimeZone)
	}
	if !(c.RLSNearLimitRatio > 0 && c.RLSNearLimitRatio < 1) {
		return Config{}, fmt.Errorf("UNKEY_RLS_NEAR_LIMIT_RATIO: must be between 0 and 1 (exclusive), got %v", c.RLSNearLimitRatio)
	}
	for _, h := range []struct{ name, v string }{{"UNKEY_RLS_LIMIT_HEADER", c.RLSLimitHeader},
		{"UNKEY_RLS_REMAINING_HEADER", c.RLSRemainingHeader}, {"UNKEY_RLS_RESET_HEADER", c.RLSResetHeader}} {
		if !access.Printable(h.v) || strings.ContainsAny(h.v, ":()<>@,;\\\"/[]?={}") {
			return Config{}, fmt.Errorf("%s: must be an HTTP header name, got %q", h.name, h.v)
		}
	}
	if c.BatchEntriesInFlightPerWorkspace < 0 {
		return Config{}, fmt.Errorf("UNKEY_BATCH_ENTRIES_IN_FLIGHT_PER_WORKSPACE: must be 0 (a full BatchLimit for every two cores) or more, got %d", c.BatchEntriesInFlightPerWorkspace)
	}
	if c.MaxOverridePatternsPerNamespace < 1 {
		return Config{}, fmt.Errorf("UNKEY_MAX_OVERRIDE_PATTERNS_PER_NAMESPACE: must be at least 1, got %d", c.MaxOverridePatternsPerNamespace)
	}
	if c.MaxPenaltyBlocks < 1 {
		return Config{}, fmt.Errorf("UNKEY_MAX_PENALTY_BLOCKS: must be at least 1, got %d", c.MaxPenaltyBlocks)
	}
	if c.MaxOverridesPerWorkspace < 1 {
		return Config{}, fmt.Errorf("UNKEY_MAX_OVERRIDES_PER_WORKSPACE: must be at least 1, got %d", c.MaxOverridesPerWorkspace)
	}
	if c.MaxWindowsPerWorkspace < 1 {
		return Config{}, fmt.Errorf("UNKEY_MAX_WINDOWS_PER_WORKSPACE: must be at least 1, got %d", c.MaxWindowsPerWorkspace)
	}
	if c.MaxHeaderBytes < 1024 || c.MaxHeaderBytes > 1<<20 {
		return Config{}, fmt.Errorf("UNKEY_HTTP_MAX_HEADER_BYTES: must be between 1024 and 1048576, got %d", c.MaxHeaderBytes)
	}
	if c.DebugContention && c.DebugAddr == "" {
		return Config{}, fmt.Errorf("UNKEY_DEBUG_CONTENTION: needs UNKEY_DEBUG_ADDR, where the profiles it samples are served")
	}
	if c.GRPCMaxConnections < 1 || c.GRPCMaxConnections > 1_000_000 {
		return Config{}, fmt.Errorf("UNKEY_GRPC_MAX_CONNECTIONS: must be between 1 and 1000000, got %d", c.GRPCMaxConnections)
	}
	if c.MaxConcurrentStreams < 1 || c.MaxConcurrentStreams > 10_000 {
		return Config{}, fmt.Errorf("UNKEY_HTTP2_MAX_CONCURRENT_STREAMS: must be between 1 and 10000, got %d", c.MaxConcurrentStreams)
	}
	if c.DecodeBudgetBytes < transport.MaxRequestBytes || c.DecodeBudgetBytes > 16<<30 {
		return Config{}, fmt.Errorf("UNKEY_DECODE_BUDGET_BYTES: must be between %d (one request of the largest size) and %d, got %d",
			transport.MaxRequestBytes, int64(16<<30), c.DecodeBudgetBytes)
	}
	if c.DecodeShareBytes < transport.MaxRequestBytes || c.DecodeShareBytes > c.DecodeBudgetBytes {
		return Config{}, fmt.Errorf("UNKEY_DECODE_BUDGET_SHARE_BYTES: must be between %d (one request of the largest size) and UNKEY_DECODE_BUDGET_BYTES (%d), got %d",
			transport.MaxRequestBytes, c.DecodeBudgetBytes, c.DecodeShareBytes)
	}
	if c.GRPCUnreadPerWorkspace < 1 || c.GRPCUnreadPerWorkspace > 100_000 {
		return Config{}, fmt.Errorf("UNKEY_GRPC_UNREAD_PER_WORKSPACE: must be between 1 and 100000, got %d", c.GRPCUnreadPerWorkspace)
	}
	if c.RLQSNoRule != "allow_all" && c.RLQSNoRule != "deny_all" {
		return Config{}, fmt.Errorf("UNKEY_RLQS_NO_RULE: must be allow_all or deny_all, got %q", c.RLQSNoRule)
	}
	for _, b := range []struct {
		name    string
		v, most int
	}{{"UNKEY_RLQS_MAX_STREAMS_PER_CONNECTION", c.RLQSMaxStreamsPerConnection, 10_000},
		{"UNKEY_RLQS_MAX_STREAMS_PER_WORKSPACE", c.RLQSMaxStreamsPerWorkspace, 1_000_000},
		{"UNKEY_RLQS_MAX_BUCKETS_PER_STREAM", c.RLQSMaxBucketsPerStream, 1_000_000},
		{"UNKEY_RLQS_MAX_BUCKETS_PER_WORKSPACE", c.RLQSMaxBucketsPerWorkspace, 10_000_000}} {
		if b.v < 1 || b.v > b.most {
			return Config{}, fmt.Errorf("%s: must be between 1 and %d, got %d", b.name, b.most, b.v)
		}
	}
	if c.RLQSAbandonAfter < 10*time.Second || c.RLQSAbandonAfter > 24*time.Hour {
		return Config{}, fmt.Errorf("UNKEY_RLQS_ABANDON_AFTER: must be between 10s and 24h, got %s", c.RLQSAbandonAfter)
	}
	if c.HTTPMaxConnections < 1 || c.HTTPMaxConnections > 1_000_000 {
		return Config{}, fmt.Errorf("UNKEY_HTTP_MAX_CONNECTIONS: must be between 1 and 1000000, got %d", c.HTTPMaxConnections)
	}
	if c.MaxSettlementsPerWorkspace < 1 {
		return Config{}, fmt.Errorf("UNKEY_MAX_SETTLEMENTS_PER_WORKSPACE: must be at least 1, got %d", c.MaxSettlementsPerWorkspace)
	}
	if !(c.AuditChangesPerSecond >= 0.01 && c.AuditChangesPerSecond <= 10_000) {
		return Config{}, fmt.Errorf("UNKEY_AUDIT_CHANGES_PER_SECOND: must be between 0.01 and 10000, got %v", c.AuditChangesPerSecond)
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return Config{}, fmt.Errorf("UNKEY_TLS_CERT_FILE and UNKEY_TLS_KEY_FILE: must be set together, or neither")
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		return Config{}, fmt.Errorf("UNKEY_TLS_CLIENT_CA_FILE: needs UNKEY_TLS_CERT_FILE and UNKEY_TLS_KEY_FILE: mutual TLS is TLS")
	}
	if (c.GRPCTLSCertFile == "") != (c.GRPCTLSKeyFile == "") {
		return Config{}, fmt.Errorf("UNKEY_GRPC_TLS_CERT_FILE and UNKEY_GRPC_TLS_KEY_FILE: must be set together, or neither")
	}
	if c.GRPCTLSClientCAFile != "" && c.GRPCTLSCertFile == "" {
		return Config{}, fmt.Errorf("UNKEY_GRPC_TLS_CLIENT_CA_FILE: needs UNKEY_GRPC_TLS_CERT_FILE and UNKEY_GRPC_TLS_KEY_FILE: mutual TLS is TLS")
	}
	if c.GRPCTLSCertFile != "" && c.GRPCAddr == "" {
		return Config{}, fmt.Errorf("UNKEY_GRPC_TLS_CERT_FILE: needs UNKEY_GRPC_ADDR, the port it serves")
	}
	if c.RLSXDSServer != "" && c.RLSConfig != "" {
		return Config{}, fmt.Errorf("UNKEY_RLS_XDS_SERVER and UNKEY_RLS_CONFIG: the rules come from files or from xDS, not both")
	}
	if c.RLSXDSServer == "" {
		for _, v := range []struct {
			name string
			set  bool
		}{{"UNKEY_RLS_XDS_TLS", c.RLSXDSTLS}, {"UNKEY_RLS_XDS_CA_FILE", c.RLSXDSCAFile != ""}, {"UNKEY_RLS_XDS_CERT_FILE", c.RLSXDSCertFile != ""},
			{"UNKEY_RLS_XDS_SERVER_NAME", c.RLSXDSServerName != ""}, {"UNKEY_RLS_START_WITHOUT_CONFIG", c.RLSStartWithoutConfig}} {
			if v.set {
				return Config{}, fmt.Errorf("%s: needs UNKEY_RLS_XDS_SERVER", v.name)
			}
		}
	}
	if (c.RLSXDSCertFile == "") != (c.RLSXDSKeyFile == "") {
		return Config{}, fmt.Errorf("UNKEY_RLS_XDS_CERT_FILE and UNKEY_RLS_XDS_KEY_FILE: must be set together, or neither")
	}
	if !c.RLSXDSTLS && (c.RLSXDSCAFile != "" || c.RLSXDSCertFile != "" || c.RLSXDSServerName != "") {
		return Config{}, fmt.Errorf("UNKEY_RLS_XDS_CA_FILE, UNKEY_RLS_XDS_CERT_FILE and UNKEY_RLS_XDS_SERVER_NAME: need UNKEY_RLS_XDS_TLS=true")
	}
	if c.RLSXDSServer != "" {
		if _, _, err := net.SplitHostPort(c.RLSXDSServer); err != nil {
			return Config{}, fmt.Errorf("UNKEY_RLS_XDS_SERVER: must be host:port, got %q", c.RLSXDSServer)
		}
	}
	if strings.Contains(c.RedisURL, "+cluster://") {
		opts, err := redisstore.ClusterOptions(c.RedisURL)
		if err != nil {
			return Config{}, fmt.Errorf("UNKEY_REDIS_URL: must be redis+cluster://host:port[,host:port...] or rediss+cluster://: %w", err)
		}
		c.redisCluster = opts
	} else if c.RedisURL != "" {
		opts, err := redisstore.Options(c.RedisURL)
		if err != nil {
			return Config{}, fmt.Errorf("UNKEY_REDIS_URL: must be a redis:// or rediss:// URL: %w", err)
		}
		c.redis = opts
	}
	if err := c.redisTLS(); err != nil {
		return Config{}, err
	}
	if c.MySQLDSN != "" {
		dsn, err := cmdutil.ParseMySQLDSN(c.MySQLDSN)
		if err != nil {
			return Config{}, err
		}
		c.mysql = dsn
	}
	if c.ReservationSecret != "" && len(c.ReservationSecret) < reservation.MinSecretLength {
		return Config{}, fmt.Errorf("UNKEY_RESERVATION_SECRET: must be at least %d bytes, got %d", reservation.MinSecretLength, len(c.ReservationSecret))
	}
	tokens, err := access.ParseTokens(c.AuthTokens)
	if err != nil {
		return Config{}, fmt.Errorf("UNKEY_AUTH_TOKENS: %w", err)
	}
	c.tokens = tokens
	return c, nil
}

// batchEntriesInFlight returns the bound on each workspace's batch entries
// in flight.
func (c Config) batchEntriesInFlight() int64 {
	if c.BatchEntriesInFlightPerWorkspace > 0 {
		return c.BatchEntriesInFlightPerWorkspace
	}
	return pipeline.DefaultBatchEntriesInFlight()
}

// redisTLS adds the CA and the client certificate of UNKEY_REDIS_TLS_* to
// the Redis client's TLS configuration, which a rediss:// URL makes.
func (c *Config) redisTLS() error {
	if c.RedisTLSCAFile == "" && c.RedisTLSCertFile == "" && c.RedisTLSKeyFile == "" {
		return nil
	}
	var tc *tls.Config
	switch {
	case c.redis != nil:
		tc = c.redis.TLSConfig
	case c.redisCluster != nil:
		tc = c.redisCluster.TLSConfig
	}
	if tc == nil {
		return fmt.Errorf("UNKEY_REDIS_TLS_CA_FILE, UNKEY_REDIS_TLS_CERT_FILE, UNKEY_REDIS_TLS_KEY_FILE: need a rediss:// or rediss+cluster:// UNKEY_REDIS_URL")
	}
	if (c.RedisTLSCertFile == "") != (c.RedisTLSKeyFile == "") {
		return fmt.Errorf("UNKEY_REDIS_TLS_CERT_FILE and UNKEY_REDIS_TLS_KEY_FILE: must be set together, or neither")
	}
	if c.RedisTLSCAFile != "" {
		pool, err := certs.ReadPool(c.RedisTLSCAFile)
		if err != nil {
			return fmt.Errorf("UNKEY_REDIS_TLS_CA_FILE: %w", err)
		}
		tc.RootCAs = pool
	}
	if c.RedisTLSCertFile != "" {
		pair, err := tls.LoadX509KeyPair(c.RedisTLSCertFile, c.RedisTLSKeyFile)
		if err != nil {
			return fmt.Errorf("UNKEY_REDIS_TLS_CERT_FILE, UNKEY_REDIS_TLS_KEY_FILE: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return nil
}
