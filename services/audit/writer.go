package audit

import (
	"context"
	"encoding/json"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/unkeyed/ratelimit/services/audit/store"
)

// Writer records entries in a Log after the change they describe has been
// made. A change is never undone because its entry could not be stored: a
// Record that fails is logged at error level, with the whole entry, so
// that the log pipeline keeps what the table could not, and counted.
type Writer struct {
	log      store.Log
	logger   *slog.Logger
	failures prometheus.Counter
}

// NewWriter returns a Writer to log, registering its metric with reg.
func NewWriter(log store.Log, logger *slog.Logger, reg prometheus.Registerer) (*Writer, error) {
	w := &Writer{log: log, logger: logger, failures: prometheus.NewCounter(prometheus.CounterOpts{
		Name: "unkey_audit_write_failures_total",
		Help: "Audit entries the audit log could not store (each logged at error level in full).",
	})}
	if err := reg.Register(w.failures); err != nil {
		return nil, err
	}
	return w, nil
}

// Write records e. A ctx already ended does not stop it: the change it
// describes was made.
func (w *Writer) Write(ctx context.Context, e store.Entry) {
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
