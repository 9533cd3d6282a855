package ratelimit

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
	"github.com/unkeyed/ratelimit/services/ratelimit/internal/global"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Option configures a [Service].
type Option func(*settings)

// settings is what the options set, before New builds the service from it.
type settings struct {
	clock           Clock
	logger          *slog.Logger
	registerer      prometheus.Registerer
	maxPerWorkspace int64
	regional        store.Regional
	global          store.Global
	globalEvery     global.Intervals
	// halfFloorOnly shares cells as before the presence floor and the
	// share-scaled flush step: from half the limit, a tenth of it at a
	// time. Only the accuracy report sets it, for its "before" rows.
	halfFloorOnly bool
	// beforeCAS runs before every compare-and-swap of a decision: a test's
	// way to make races lost (withBeforeCAS).
	beforeCAS func(w *cells.Window, c *cells.Cell, attempt int)
}

// WithClock makes the service read time from clock instead of the wall
// clock: every decision and every schedule of its loops.
func WithClock(clock Clock) Option {
	return func(s *settings) { s.clock = clock }
}

// WithLogger sets the logger for background work. The request path never
// logs. The default discards everything.
func WithLogger(logger *slog.Logger) Option {
	return func(s *settings) { s.logger = logger }
}

// WithRegisterer registers the service's metrics with reg. Without it the
// metrics are kept in a private registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(s *settings) { s.registerer = reg }
}

// DefaultMaxWindowsPerWorkspace is the cap on one workspace's windows when
// [WithMaxWindowsPerWorkspace] is not given: about 200 MB of memory at some
// 200 bytes a window, far more than a tenant with real users needs, and a
// bound on what a tenant minting identifiers can take from the others.
const DefaultMaxWindowsPerWorkspace = 1_000_000

// WithMaxWindowsPerWorkspace caps the windows one workspace may hold in
// memory at n. A request that would create one more gets a [*CapacityError];
// windows are never evicted to make room, since every held window may still
// affect a decision. n below 1 means the default.
func WithMaxWindowsPerWorkspace(n int64) Option {
	return func(s *settings) {
		if n >= 1 {
			s.maxPerWorkspace = n
		}
	}
}
