package regional

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the tier's own metrics, made and registered by the limiter
// with the rest of its metrics (their names stay the limiter's).
type Metrics struct {
	// Ops counts calls to the store by operation (Op*) and result
	// (Result*); Latency times them by operation.
	Ops     *prometheus.CounterVec
	Latency *prometheus.HistogramVec
	// ReplayOverflow and RefreshOverflow count cells and windows that did
	// not fit in the replay and refresh queues.
	ReplayOverflow, RefreshOverflow prometheus.Counter
	// ReplayExpired counts units never replayed because their window
	// ended first; StrictActivations keys made strict.
	ReplayExpired, StrictActivations prometheus.Counter
}
