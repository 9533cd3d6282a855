package ratelimit

import (
	"time"
)

// A limit of 0 blocks, as Unkey documents an override of limit 0: every
// request it applies to is denied and nothing is counted. The limiter
// answers it on its clock without holding a window for the key: a blocked
// identifier costs no memory however many a caller makes up.

// blocked returns the answer to req, which a limit of 0 blocks, at now
// (unix ms): denied, nothing left, reset at the end of the current fixed
// window (or calendar period). No wait helps, so RetryAfter is zero.
func blocked(req *Request, now int64) Response {
	return Response{Reset: resetAt(req, now), Algorithm: req.Model()}
}

// resetAt returns the end of the fixed window (or calendar period) of req
// that holds now (unix ms): the reset of a decision at now.
func resetAt(req *Request, now int64) time.Time {
	if !req.Calendar.IsZero() {
		_, _, end := req.Calendar.At(now)
		return time.UnixMilli(end)
	}
	dur := req.Duration.Milliseconds()
	return time.UnixMilli((now/dur + 1) * dur)
}

// anyBlocked reports whether a limit of 0 blocks any of reqs.
func anyBlocked(reqs []Request) bool {
	for _, r := range reqs {
		if r.Limit == 0 {
			return true
		}
	}
	return false
}
