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
