package cmdutil

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Throttle returns h letting through at most burst records at once and one
// every interval after that, for the logs that what a client sends can
// fill: a malformed HTTP/2 connection, a request that restate-server did
// not sign. A record let through after others were dropped carries how
// many (suppressed), so that the log says a flood happened without
// holding it.
func Throttle(h slog.Handler, interval time.Duration, burst int) slog.Handler {
	return &throttled{Handler: h, limit: rate.NewLimiter(rate.Every(interval), burst), dropped: new(atomic.Int64)}
}

type throttled struct {
	slog.Handler
	limit   *rate.Limiter
	dropped *atomic.Int64
}

func (t *throttled) Handle(ctx context.Context, r slog.Record) error {
	if !t.limit.Allow() {
		t.dropped.Add(1)
		return nil
	}
	if n := t.dropped.Swap(0); n > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int64("suppressed", n))
	}
	return t.Handler.Handle(ctx, r)
}

func (t *throttled) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &throttled{Handler: t.Handler.WithAttrs(attrs), limit: t.limit, dropped: t.dropped}
}

func (t *throttled) WithGroup(name string) slog.Handler {
	return &throttled{Handler: t.Handler.WithGroup(name), limit: t.limit, dropped: t.dropped}
}
