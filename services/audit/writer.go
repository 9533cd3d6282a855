package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/unkeyed/ratelimit/services/audit/store"
)

// Writer records entries in a Log after the change they describe has been
// made. A change is never undone because its entry could not be stored: a
// Record that fails is logged at error level, with the whole entry, so
// that the log pipeline keeps what the table could not, and counted.
//
// Every audited change is admitted first ([Writer.Admit]): a workspace
// makes at most its rate of changes, so that one tenant's loop cannot
// grow the log (a kilobyte an entry, kept for months) at request rate.
// An entry is never dropped instead: a change past the rate is refused
// before it is made.
type Writer struct {
	log      store.Log
	logger   *slog.Logger
	failures prometheus.Counter
	perSec   rate.Limit
	burst    int
	// limiters holds each workspace's rate. Workspaces come from the
	// keys, never from what a caller sends.
	limiters sync.Map // string → *rate.Limiter
}

// DefaultChangesPerSecond is a workspace's sustained rate of audited
// changes, UNKEY_AUDIT_CHANGES_PER_SECOND's default; a burst of
// [BurstSeconds] times as many passes at once.
const DefaultChangesPerSecond = 10

// BurstSeconds is how many seconds of its rate a workspace may change at
// once: a script setting a few hundred overrides is not refused.
const BurstSeconds = 20

// A WriterOption configures a Writer.
type WriterOption func(*Writer)

// WithChangesPerSecond sets a workspace's sustained rate of audited
// changes (default DefaultChangesPerSecond).
func WithChangesPerSecond(perSecond float64) WriterOption {
	return func(w *Writer) {
		w.perSec = rate.Limit(perSecond)
		w.burst = max(1, int(perSecond*BurstSeconds))
	}
}

// NewWriter returns a Writer to log, registering its metric with reg.
func NewWriter(log store.Log, logger *slog.Logger, reg prometheus.Registerer, opts ...WriterOption) (*Writer, error) {
	w := &Writer{log: log, logger: logger, failures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "unkey_audit_write_failures_total",
		Help: "Audit entries the audit log could not store (each logged at error level in full).",
	})}
	WithChangesPerSecond(DefaultChangesPerSecond)(w)
	for _, o := range opts {
		o(w)
	}
	if err := reg.Register(w.failures); err != nil {
		return nil, err
	}
	return w, nil
}

// RateError refuses a change past its workspace's rate of audited changes.
type RateError struct {
	PerSecond float64
	Burst     int
}

func (e *RateError) Error() string {
	return fmt.Sprintf("too many changes: a workspace makes at most %g a second (UNKEY_AUDIT_CHANGES_PER_SECOND), "+
		"%d at once; try again in a second", e.PerSecond, e.Burst)
}

// Exhausted marks the error a cap's refusal (resource_exhausted).
func (e *RateError) Exhausted() bool { return true }

// Admit takes one change of workspace's rate, or refuses it with a
// *RateError: call it before making a change that Write will record.
func (w *Writer) Admit(workspace string) error {
	l, ok := w.limiters.Load(workspace)
	if !ok {
		l, _ = w.limiters.LoadOrStore(workspace, rate.NewLimiter(w.perSec, w.burst))
	}
	if !l.(*rate.Limiter).Allow() {
		return &RateError{PerSecond: float64(w.perSec), Burst: w.burst}
	}
	return nil
}

// Write records e, unless it changed nothing (Before and After are the
// same): the log keeps changes, not requests. A ctx already ended does
// not stop it: the change it describes was made.
func (w *Writer) Write(ctx context.Context, e store.Entry) {
	if e.Before == e.After {
		return
	}
	if err := w.log.Record(context.WithoutCancel(ctx), e); err != nil {
		w.failures.Inc()
		w.logger.ErrorContext(ctx, "audit entry not stored", "error", err, "workspace", e.Workspace, "actor", e.Actor,
			"action", e.Action, "target", e.Target, "before", e.Before, "after", e.After, "request_id", e.RequestID)
	}
}

// JSON returns v as JSON for an entry's Before and After; nil is "".
func JSON(v any) string {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
