package rlsconfig

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/anypb"
)

// ErrNoConfig answers a request for rules before the management server
// sent any (where the process may not answer without them).
var ErrNoConfig = errors.New("no rate limit configuration yet: the xDS management server has sent none")

// xdsKeepalive is how often the stream's connection is pinged while it is
// quiet: past grpc-go servers' default minimum of 5 minutes.
const xdsKeepalive = 6 * time.Minute

// MaxXDSBytes bounds one response of the management server: every
// domain's rules, as one message.
const MaxXDSBytes = 16 << 20

// XDSSource holds the configuration a management server pushes over xDS
// (State of the World, on the aggregated stream, of the type
// RateLimitConfig), as envoyproxy/ratelimit's GRPC_XDS_SOTW source does:
// each response holds every domain, and replaces the configuration in force
// as one step once it compiles (it is then acknowledged); one that does
// not is refused with its error (a NACK) and the last good configuration
// stays. While the server is away the last good configuration stays in
// force, and the stream is opened again after a backoff.
type XDSSource struct {
	server string
	node   *corev3.Node
	creds  func() (credentials.TransportCredentials, error)
	logger *slog.Logger
	reg    prometheus.Registerer
	// backoff is the wait after a failed stream: from minBackoff, doubled
	// each failure up to maxBackoff, with jitter; a response resets it.
	minBackoff, maxBackoff time.Duration

	current atomic.Pointer[Config]
	loaded  atomic.Bool
	// firstLoad is closed when the first configuration is in force.
	firstLoad chan struct{}

	loads     *loadCounters
	connected prometheus.Gauge

	// compiler compiles each configuration received.
	compiler Compiler
	// seen holds the latest configurations compiled, good and refused,
	// across streams (a server that sends a bad one and hangs up is not
	// compiled again at each reconnection); refusals are logged at most
	// once per refusalLogInterval (loggedAt), unlogged counting those
	// since, the latest of them in unloggedVersion and unloggedErr. Run's
	// goroutine alone uses them.
	seen            compiledCache
	loggedAt        time.Time
	unlogged        int
	unloggedVersion string
	unloggedErr     error
}

// XDSOption configures an XDSSource.
type XDSOption func(*XDSSource)

// WithXDSCredentials sets the transport credentials of the connection to
// the management server, made again at each connection (so that rotated
// certificate files are read): insecure (plain HTTP/2) without it.
func WithXDSCredentials(f func() (credentials.TransportCredentials, error)) XDSOption {
	return func(s *XDSSource) { s.creds = f }
}

// WithXDSBackoff sets the wait after a failed stream: min first, doubled
// up to max (250ms and 2s: a server that is back is reconnected to within
// about two seconds).
func WithXDSBackoff(min, max time.Duration) XDSOption {
	return func(s *XDSSource) { s.minBackoff, s.maxBackoff = min, max }
}

// WithXDSCompiler sets how each configuration received is compiled
// (within DefaultBounds, units as lengths): one past its bounds is refused
// naming the bound.
func WithXDSCompiler(c Compiler) XDSOption { return func(s *XDSSource) { s.compiler = c } }

// WithXDSLogger sets the logger of loads, refusals and reconnections.
func WithXDSLogger(l *slog.Logger) XDSOption { return func(s *XDSSource) { s.logger = l } }

// WithXDSRegisterer registers the source's metrics with reg.
func WithXDSRegisterer(reg prometheus.Registerer) XDSOption {
	return func(s *XDSSource) { s.reg = reg }
}

// NewXDSSource returns the source of the rules server (host:port) pushes to
// the node nodeID. It starts nothing: Run connects. Until the first
// configuration arrives, Config is the empty one (no rule applies).
func NewXDSSource(server, nodeID string, opts ...XDSOption) (*XDSSource, error) {
	if server == "" {
		return nil, errors.New("xds: the management server's address must not be empty")
	}
	s := &XDSSource{server: server, node: &corev3.Node{Id: nodeID}, logger: slog.New(slog.DiscardHandler),
		creds:      func() (credentials.TransportCredentials, error) { return insecure.NewCredentials(), nil },
		minBackoff: 250 * time.Millisecond, maxBackoff: 2 * time.Second, firstLoad: make(chan struct{})}
	for _, o := range opts {
		o(s)
	}
	if s.reg == nil {
		s.reg = prometheus.NewRegistry()
	}
	empty, err := Load()
	if err != nil {
		return nil, err
	}
	s.current.Store(empty)
	if s.loads, err = registerLoads(s.reg, "Rate limit configurations received that were compiled (one a stream compiled lately, a version flapping back, is not compiled again), by result: ok (in force now) or error (refused; the last good configuration stays).", s.Config); err != nil {
		return nil, err
	}
	s.connected = prometheus.NewGauge(prometheus.GaugeOpts{Name: "unkey_rls_xds_connected",
		Help: "1 while the stream to the xDS management server is open (its first request sent), 0 while it is being opened again."})
	if err := s.reg.Register(s.connected); err != nil {
		return nil, err
	}

	return s, nil
}

// Config returns the configuration in force. It never returns nil.
func (s *XDSSource) Config() *Config { return s.current.Load() }

// Loaded reports whether a configuration from the server is in force.
func (s *XDSSource) Loaded() bool { return s.loaded.Load() }

// FirstLoad is closed once the first configuration is in force.
func (s *XDSSource) FirstLoad() <-chan struct{} { return s.firstLoad }

// Run keeps a stream to the management server open until ctx ends, and
// puts in force every configuration it pushes that compiles.
func (s *XDSSource) Run(ctx context.Context) error {
	wait := s.minBackoff
	for ctx.Err() == nil {
		got, err := s.stream(ctx)
		s.connected.Set(0)
		if ctx.Err() != nil {
			break
		}
		if got {
			wait = s.minBackoff
		}
		s.logger.Warn("xds: the stream to the management server ended; the rules in force stay", "server", s.server,
			"error", err, "retry_in", wait.Round(time.Millisecond))
		// Jitter of up to a fifth, so that the processes of a fleet do
		// not reconnect at once.
		sleep(ctx, wait+rand.N(wait/5+1))
		wait = min(2*wait, s.maxBackoff)
	}
	return nil
}

// stream opens one connection and stream and reads responses until either
// fails; got reports whether a response arrived. Each stream starts from
// no version, so that a server that restarted numbering its versions
// anew sends what it has.
func (s *XDSSource) stream(ctx context.Context) (got bool, err error) {
	creds, err := s.creds()
	if err != nil {
		return false, fmt.Errorf("xds credentials: %w", err)
	}
	// Keepalive pings find a server that vanished without closing the
	// connection; no more often than a grpc-go server allows by default
	// (one every 5 minutes: Envoy Gateway's runner sets no policy), or it
	// closes the connection as too many pings.
	conn, err := grpc.NewClient(s.server, grpc.WithTransportCredentials(creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: xdsKeepalive, Timeout: 20 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxXDSBytes)))
	if err != nil {
		return false, fmt.Errorf("xds connect to %s: %w", s.server, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return false, fmt.Errorf("xds stream to %s: %w", s.server, err)
	}
	req := &discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: resource.RateLimitConfigType}
	if err := stream.Send(req); err != nil {
		return false, fmt.Errorf("xds request to %s: %w", s.server, err)
	}
	s.connected.Set(1) // open, whether or not the server has rules for this node yet
	var acked string   // the version in force from this stream
	// A server whose versions flap (one configuration, then another, and
	// back; or the same one under new versions) costs one compile per
	// distinct content: the latest configurations, good and refused, are
	// kept by their resources' digest (s.seen). After a refusal the next
	// response waits, doubling up to maxBackoff, so that a server that
	// answers a NACK at network speed (go-control-plane's cache sends the
	// version it holds again), or sends bad versions so, is answered at
	// that pace; refusals are logged at most once per refusalLogInterval
	// (see refused), and those kept back are told before the next good
	// configuration.
	var inForce [sha256.Size]byte
	wait := s.minBackoff
	var refusedAt time.Time
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, fmt.Errorf("xds receive from %s: %w", s.server, err)
		}
		got = true
		if !refusedAt.IsZero() {
			if err := sleep(ctx, wait-time.Since(refusedAt)); err != nil {
				return got, err
			}
		}
		reply := &discoveryv3.DiscoveryRequest{Node: s.node, TypeUrl: resource.RateLimitConfigType, ResponseNonce: resp.GetNonce()}
		var c *Config
		var digest [sha256.Size]byte
		if resp.GetTypeUrl() != resource.RateLimitConfigType {
			err = fmt.Errorf("type %q: this client asks for %s only", resp.GetTypeUrl(), resource.RateLimitConfigType)
		} else {
			digest = digestOf(resp.GetResources())
			var known bool
			if c, err, known = s.seen.get(digest); !known {
				c, err = s.compiler.decodeXDS(resp.GetResources())
				s.seen.put(digest, c, err)
				if err != nil {
					s.loads.failed()
				} else {
					s.loads.ok()
				}
			}
		}
		if err != nil {
			if !refusedAt.IsZero() {
				wait = min(2*wait, s.maxBackoff)
			}
			refusedAt = time.Now()
			s.refused(resp.GetVersionInfo(), err)
			reply.VersionInfo = acked
			reply.ErrorDetail = &status.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
		} else {
			refusedAt, wait = time.Time{}, s.minBackoff
			if s.unlogged > 0 {
				// Refusals the throttle kept back are told before the
				// good configuration is.
				s.logger.Error("xds: rate limit configs refused and not logged; the last good config stayed in force", "server", s.server,
					"refused", s.unlogged, "last_version", s.unloggedVersion, "last_error", s.unloggedErr)
				s.unlogged = 0
			}
			acked = resp.GetVersionInfo()
			reply.VersionInfo = acked
			if !s.loaded.Load() || digest != inForce {
				// Put back in force as compiled anew, so that what
				// follows configurations in order (see Newer) sees it
				// as the newest.
				s.current.Store(c.again())
				inForce = digest
				domains, rules := c.Domains()
				s.logger.Info("xds: rate limit config in force", "server", s.server, "version", acked, "domains", domains, "rules", rules)
			}
			if !s.loaded.Swap(true) {
				close(s.firstLoad)
			}
		}
		if err := stream.Send(reply); err != nil {
			return got, fmt.Errorf("xds reply to %s: %w", s.server, err)
		}
	}
}

// refusalLogInterval is the least time between two log lines of refused
// configurations.
const refusalLogInterval = time.Minute

// refused logs that the configuration of version was refused for err, or
// counts it when a refusal was logged less than refusalLogInterval ago.
func (s *XDSSource) refused(version string, err error) {
	if time.Since(s.loggedAt) < refusalLogInterval {
		s.unlogged++
		s.unloggedVersion, s.unloggedErr = version, err
		return
	}
	s.logger.Error("xds: rate limit config refused; the last good config stays in force", "server", s.server,
		"version", version, "error", err, "refused_and_not_logged_before", s.unlogged)
	s.loggedAt, s.unlogged = time.Now(), 0
}

// compiledCache holds the latest configurations compiled, good or
// refused, by their resources' digest (see digestOf): four, enough for a
// server that flaps between two good ones with a bad one or two among
// them.
type compiledCache struct {
	entries [4]struct {
		digest [sha256.Size]byte
		c      *Config
		err    error
	}
	next int
}

// get returns the configuration compiled from resources of digest, or
// why it was refused, and whether it is held.
func (m *compiledCache) get(digest [sha256.Size]byte) (*Config, error, bool) {
	for _, e := range m.entries {
		if (e.c != nil || e.err != nil) && e.digest == digest {
			return e.c, e.err, true
		}
	}
	return nil, nil, false
}

// put holds c, or err, as what resources of digest compile to, in place
// of the oldest.
func (m *compiledCache) put(digest [sha256.Size]byte, c *Config, err error) {
	e := &m.entries[m.next]
	e.digest, e.c, e.err = digest, c, err
	m.next = (m.next + 1) % len(m.entries)
}

// digestOf returns the SHA-256 of resources, each one's type and bytes in
// order: equal for the same resources under any version.
func digestOf(resources []*anypb.Any) [sha256.Size]byte {
	d := newDigester()
	for _, r := range resources {
		d.add([]byte(r.GetTypeUrl()))
		d.add(r.GetValue())
	}
	return d.sum()
}

// decodeXDS compiles a response's resources.
func (c Compiler) decodeXDS(resources []*anypb.Any) (*Config, error) {
	configs := make([]*rlsconfv3.RateLimitConfig, len(resources))
	for i, r := range resources {
		rc := &rlsconfv3.RateLimitConfig{}
		if r.GetTypeUrl() != resource.RateLimitConfigType {
			return nil, fmt.Errorf("resources[%d]: type %q: must be %s", i, r.GetTypeUrl(), resource.RateLimitConfigType)
		}
		if err := r.UnmarshalTo(rc); err != nil {
			return nil, fmt.Errorf("resources[%d]: %w", i, err)
		}
		configs[i] = rc
	}
	return c.LoadXDS(configs...)
}

// sleep waits for d, or until ctx ends, whose error it then returns.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
