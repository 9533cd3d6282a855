package ratelimit

import (
	"context"

	"github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"
)

// calendarWindow is the model of a request that names a calendar
// (Request.Calendar): a fixed window whose cells are the calendar's
// periods in its time zone (days, ISO weeks, months, years). What the
// same identity's period counted in other zones is carried into this
// zone's before each decision (see zones.go).
type calendarWindow struct{ plainCells }

func (m calendarWindow) decide(ctx context.Context, s *Service, req *Request, key *cells.Key, sp spec, now int64) (Response, bool, error) {
	return s.decideInWindow(ctx, m, req, key, sp, now, (*Service).carryZones)
}

func (calendarWindow) count(s *Service, w *cells.Window, _ *bucket, now int64, sp spec, cost int64, report, speculative bool) (decision, *cells.Cell, bool) {
	return s.countWindow(w, now, sp, cost, report, speculative, true)
}
