package ratelimit

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
)

// Option configures a [Service].
type Option func(*Service)

// WithClock makes the service read time from clock instead of the wall clock.
func WithClock(clock Clock) Option {
	return func(s *Service) { s.clock = clock }
}

// WithLogger sets the logger for background work. The request path never
// logs. The default discards everything.
func WithLogger(logger *slog.Logger) Option {
	return func(s *Service) { s.logger = logger }
}

// WithRegisterer registers the service's metrics with reg. Without it the
// metrics are kept in a private registry.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(s *Service) { s.registerer = reg }
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
	return func(s *Service) {
		if n >= 1 {
			s.maxPerWorkspace = n
		}
	}
}
