package ratelimit

import (
	"context"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// fixedWindow is the model of FixedWindow: each fixed window of the
// request's duration counted from zero, the current cell alone, as
// envoyproxy/ratelimit and limitador count. A denied request may pass
// again at the window's end.
type fixedWindow struct{ plainCells }

func (m fixedWindow) decide(ctx context.Context, s *Service, req *Request, key *cells.Key, sp spec, now int64) (Response, bool, error) {
	return s.decideInWindow(ctx, m, req, key, sp, now, nil)
}

func (fixedWindow) count(s *Service, w *cells.Window, _ *bucket, now int64, sp spec, cost int64, report, speculative bool) (decision, *cells.Cell, bool) {
	return s.countWindow(w, now, sp, cost, report, speculative, true)
}
