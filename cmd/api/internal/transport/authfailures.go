package transport

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/access"
)

// authFailures counts the requests refused for their token, by reason:
// guessing keys is otherwise invisible. Each costs the process a header
// lookup and a SHA-256 of the token (about a microsecond), less than a
// decision, so they are counted, not throttled: a client that sends bad
// keys at a rate that would cost the others is a client that would cost
// them as much with good ones, which the per-workspace bounds limit.
type authFailures struct {
	missing, unknown, expired, notLoaded prometheus.Counter
}

func (a *authFailures) register(reg prometheus.Registerer) error {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "unkey_auth_failures_total",
		Help: "Requests refused for their bearer token, both ports, by reason: missing, unknown (or revoked), expired, not_loaded (the keys not read yet since start).",
	}, []string{"reason"})
	if err := reg.Register(vec); err != nil {
		return fmt.Errorf("register auth failures metric: %w", err)
	}
	a.missing, a.unknown = vec.WithLabelValues("missing"), vec.WithLabelValues("unknown")
	a.expired, a.notLoaded = vec.WithLabelValues("expired"), vec.WithLabelValues("not_loaded")
	return nil
}

// authenticated counts err, access.Authenticate's refusal, and passes pr
// and err on.
func (l *Layer) authenticated(pr access.Principal, err error) (access.Principal, error) {
	if err == nil {
		return pr, nil
	}
	switch {
	case errors.Is(err, access.ErrMissingToken):
		l.authFailures.missing.Inc()
	case errors.Is(err, access.ErrExpiredToken):
		l.authFailures.expired.Inc()
	case errors.Is(err, access.ErrKeysNotLoaded):
		l.authFailures.notLoaded.Inc()
	default:
		l.authFailures.unknown.Inc()
	}
	return pr, err
}
