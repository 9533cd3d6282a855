package ratelimit

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit/calendar"
)

// Bounds of a valid [Request]. Names and identifiers fit the 255-character
// columns of the global counter table; counts stay exact in a float64 (2^53),
// which is what JSON clients can represent.
const (
	MaxNameLength = 255
	MaxLimit      = 1 << 53
	MaxCost       = 1 << 53
	MinDuration   = time.Second
	MaxDuration   = 30 * 24 * time.Hour
	// MaxWindow is the longest window Service.Decide accepts: a year, the
	// longest unit of Envoy's rate limit rules (365 days), and one day to
	// spare. Callers of the API are held to MaxDuration by Validate; the
	// limiter's maths and stores hold durations to the millisecond in 64
	// bits, so a year costs nothing more than a day.
	MaxWindow = 366 * 24 * time.Hour
	// MaxBatch is the most limits one [Service.MultiLimit] call may hold.
	MaxBatch = 100
)

// Bounds are what one kind of sender may ask of the limiter: the rules
// are the limiter's, one set for every entry point, and the bounds the
// sender's. The API's callers send within [CallerBounds]; an operator's
// rules (Envoy's rule files, an override) within [OperatorBounds]: a
// year's window, a limit of 0 that blocks. An entry point that digests
// long identifiers into counter names allows them longer.
type Bounds struct {
	// MaxIdentifier is the most characters an identifier may hold: 0 is
	// [MaxNameLength], the column of the global counter table.
	MaxIdentifier int
	// MaxDuration is the longest window: 0 is [MaxDuration]; at most
	// [MaxWindow].
	MaxDuration time.Duration
	// ZeroBlocks allows a limit of 0, which refuses every request and
	// counts nothing: an operator's block, never a caller's limit.
	ZeroBlocks bool
}

// The bounds of the API's callers and of operators' rules.
var (
	CallerBounds   = Bounds{}
	OperatorBounds = Bounds{MaxDuration: MaxWindow, ZeroBlocks: true}
)

// maxIdentifier returns b's longest identifier.
func (b Bounds) maxIdentifier() int {
	if b.MaxIdentifier == 0 {
		return MaxNameLength
	}
	return b.MaxIdentifier
}

// maxDuration returns b's longest window.
func (b Bounds) maxDuration() time.Duration {
	if b.MaxDuration == 0 {
		return MaxDuration
	}
	return min(b.MaxDuration, MaxWindow)
}

// CheckRequest reports the first field of r that breaks a rule within b,
// or nil. The workspace is not checked: it comes from the caller's
// credentials, not from the request.
func (b Bounds) CheckRequest(r *Request) error {
	if err := b.checkLimit(r.Namespace, r.Identifier, r.Limit, b.ZeroBlocks); err != nil {
		return err
	}
	if err := checkModel(r, b.maxDuration()); err != nil {
		return err
	}
	if err := CheckCost("cost", r.Cost); err != nil {
		return err
	}
	if err := checkReserve(r.Reserve, r.Report, r.Cost); err != nil {
		return err
	}
	return checkWait(r)
}

// checkWait checks a request's MaxWait: a duration up to MaxDuration, on
// a model that books (a sliding or fixed window, a token bucket), in a request
// that may wait (not a report, spent already, nor a reservation, whose
// estimate would hold capacity it may give back).
func checkWait(r *Request) error {
	switch {
	case r.MaxWait == 0:
		return nil
	case r.MaxWait < time.Millisecond || r.MaxWait > MaxDuration:
		return &invalid.Error{Field: "max_wait", Rule: fmt.Sprintf("must be between 0 and %d milliseconds", MaxDuration.Milliseconds())}
	case r.Report:
		return &invalid.Error{Field: "max_wait", Rule: "must be 0 in a report (report: true), which was spent already"}
	case r.Reserve:
		return &invalid.Error{Field: "max_wait", Rule: "must be 0 with reserve: a reservation does not wait"}
	case !r.Calendar.IsZero():
		return &invalid.Error{Field: "max_wait", Rule: "must be 0 with a calendar, whose next period is not booked ahead: book on a sliding or fixed window or a token bucket"}
	}
	return nil
}

// CheckAcquisition reports the first field of a that breaks a rule within
// b, or nil: a's lease is whole seconds from [MinLease] to [MaxLease]
// whatever b's longest window, and it takes 1 slot or more.
func (b Bounds) CheckAcquisition(a *Acquisition) error {
	if err := b.checkLimit(a.Namespace, a.Identifier, a.Limit, b.ZeroBlocks); err != nil {
		return err
	}
	if err := CheckLease("lease", a.Lease); err != nil {
		return err
	}
	if a.Cost < 1 {
		return &invalid.Error{Field: "cost", Rule: fmt.Sprintf("must be between 1 and %d: the slots to acquire", int64(MaxCost))}
	}
	return CheckCost("cost", a.Cost)
}

// CheckHold reports the first field of h that breaks a rule within b, or
// nil. A hold was admitted under its limit, which is never 0 (a block
// admits nothing).
func (b Bounds) CheckHold(h *Hold) error {
	if err := b.checkLimit(h.Namespace, h.Identifier, h.Limit, false); err != nil {
		return err
	}
	if err := CheckDuration("duration", h.Duration, b.maxDuration()); err != nil {
		return err
	}
	return CheckCost("amount", h.Amount)
}

// checkLimit checks what names a limit within b, its namespace and
// identifier, and its limit (0 only if zeroBlocks).
func (b Bounds) checkLimit(namespace, identifier string, limit int64, zeroBlocks bool) error {
	if err := CheckName("namespace", namespace, MaxNameLength); err != nil {
		return err
	}
	if err := CheckName("identifier", identifier, b.maxIdentifier()); err != nil {
		return err
	}
	return CheckLimit("limit", limit, zeroBlocks)
}

// CheckInBatch refuses what a request may not be in a batch: a
// reservation in any (it answers with a token of its own, which a
// batch's answer has no room for) and, in one decided together (all or
// nothing), a report, which is counted whatever the verdict.
func CheckInBatch(r *Request, together bool) error {
	switch {
	case r.Reserve:
		return &invalid.Error{Field: "reserve", Rule: "must be false in a batch: reserve with Limit"}
	case together && r.Report:
		return &invalid.Error{Field: "report", Rule: "must be false in a MultiLimit, which counts all or nothing: send reports as Limit or BatchLimit entries"}
	}
	return nil
}

// Validate is [CallerBounds].CheckRequest(r).
func (r *Request) Validate() error { return CallerBounds.CheckRequest(r) }

// NewCalendar returns the periods of unit in the IANA time zone named
// zone ("" or "UTC" for UTC), or a [*invalid.Error] naming calendar.unit
// or calendar.time_zone.
func NewCalendar(unit calendar.Unit, zone string) (calendar.Period, error) {
	if unit < calendar.Day || unit > calendar.Year {
		return calendar.Period{}, &invalid.Error{Field: "calendar.unit", Rule: "must be day, week, month or year"}
	}
	p, err := calendar.New(unit, zone)
	if err != nil {
		return calendar.Period{}, &invalid.Error{Field: "calendar.time_zone",
			Rule: fmt.Sprintf("must be a time zone of the IANA database (such as Europe/Berlin), or empty for UTC, got %q", truncate(zone, calendar.MaxTimeZoneLength))}
	}
	return p, nil
}

// truncate returns s cut to at most n bytes, for a message that quotes a
// caller's value.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// checkModel checks r's model: its algorithm, its burst (a token bucket's
// alone), and either a duration up to max or a calendar (a window model's
// alone), never both.
func checkModel(r *Request, max time.Duration) error {
	if r.Algorithm > TokenBucket {
		return &invalid.Error{Field: "algorithm", Rule: "must be a sliding window, a fixed window or a token bucket"}
	}
	if r.Algorithm == TokenBucket {
		if r.Burst < 0 || r.Burst > MaxLimit {
			return &invalid.Error{Field: "burst", Rule: fmt.Sprintf("must be between 1 and %d (0: the limit)", int64(MaxLimit))}
		}
		if r.Reserve {
			// A bucket takes what it sees counted, never what is given
			// back: a refund would return no tokens.
			return &invalid.Error{Field: "reserve", Rule: "must be false with a token bucket: reserve on a sliding or fixed window"}
		}
	} else if r.Burst != 0 {
		return &invalid.Error{Field: "burst", Rule: "must be unset but with a token bucket, whose capacity it is"}
	}
	if r.Calendar.IsZero() {
		if r.Duration == 0 {
			return &invalid.Error{Field: "duration", Rule: "missing: a limit needs the length of its window in milliseconds, or a calendar"}
		}
		return CheckDuration("duration", r.Duration, max)
	}
	switch {
	case r.Algorithm == TokenBucket:
		return &invalid.Error{Field: "calendar", Rule: "must be unset with a token bucket: a calendar's periods are fixed windows"}
	case r.Duration != 0:
		return &invalid.Error{Field: "duration", Rule: "must be omitted with a calendar, whose periods are the windows"}
	case r.Reserve:
		return &invalid.Error{Field: "reserve", Rule: "must be false with a calendar: reserve on a sliding or fixed window of a duration"}
	}
	return nil
}

// checkReserve refuses a request that is both a reservation and a report
// (a report was spent already, there is nothing to give back), and a
// reservation of nothing (cost 0 reserves nothing to settle).
func checkReserve(reserve, report bool, cost int64) error {
	switch {
	case reserve && report:
		return &invalid.Error{Field: "reserve", Rule: "must be false in a report (report: true), which counts what was spent already"}
	case reserve && cost < 1:
		return &invalid.Error{Field: "cost", Rule: "must be at least 1 in a reservation: the estimate to reserve"}
	}
	return nil
}

// ValidateBatch reports the first request of a batch decided together
// that breaks a rule within [CallerBounds] or [CheckInBatch], naming it by
// its place (such as "limits[2].cost"), or a batch that holds no request
// or more than [MaxBatch].
func ValidateBatch(reqs []Request) error {
	if err := CheckBatchSize("limits", len(reqs), MaxBatch); err != nil {
		return err
	}
	for i := range reqs {
		if err := CallerBounds.CheckRequest(&reqs[i]); err != nil {
			return invalid.InEntry("limits", i, err)
		}
		if err := CheckInBatch(&reqs[i], true); err != nil {
			return invalid.InEntry("limits", i, err)
		}
	}
	return nil
}

// CheckName returns a [*invalid.Error] naming field unless s is a name of
// 1 to maxChars characters of valid UTF-8 without control or format
// characters (see [IsControl] and [IsFormat]), or nil.
func CheckName(field, s string, maxChars int) error {
	if !validName(s, maxChars) {
		return &invalid.Error{Field: field,
			Rule: fmt.Sprintf("must be 1 to %d characters of valid UTF-8 without control or format characters", maxChars)}
	}
	return nil
}

// CheckLimit returns a [*invalid.Error] naming field unless limit is
// between 1 and [MaxLimit], or 0 too if zeroBlocks (a limit of 0 that an
// operator set blocks: every request denied, nothing counted), or nil.
func CheckLimit(field string, limit int64, zeroBlocks bool) error {
	switch {
	case zeroBlocks && (limit < 0 || limit > MaxLimit):
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must be between 0 (block) and %d", int64(MaxLimit))}
	case !zeroBlocks && (limit < 1 || limit > MaxLimit):
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must be between 1 and %d", int64(MaxLimit))}
	}
	return nil
}

// CheckDuration returns a [*invalid.Error] naming field unless d is
// between [MinDuration] and max, in whole milliseconds as the API gives
// them, or nil. max is at most [MaxWindow].
func CheckDuration(field string, d, max time.Duration) error {
	max = min(max, MaxWindow)
	if d < MinDuration || d > max {
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must be between %d and %d milliseconds",
			MinDuration.Milliseconds(), max.Milliseconds())}
	}
	return nil
}

// CheckCost returns a [*invalid.Error] naming field unless cost is
// between 0 and [MaxCost], or nil.
func CheckCost(field string, cost int64) error {
	if cost < 0 || cost > MaxCost {
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must be between 0 and %d", int64(MaxCost))}
	}
	return nil
}

// CheckBatchSize returns a [*invalid.Error] naming field unless a batch
// of n entries holds 1 to max of them, or nil.
func CheckBatchSize(field string, n, max int) error {
	if n < 1 || n > max {
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must hold 1 to %d limits", max)}
	}
	return nil
}

// IsControl reports whether r is a C0 or C1 control character or DEL, which
// no name may hold: they hide in logs and terminals, and a newline splits a
// log line.
func IsControl(r rune) bool { return r < 0x20 || (r >= 0x7f && r < 0xa0) }

// IsFormat reports whether r is a Unicode format character (category Cf)
// that a name may not hold: the bidirectional overrides and isolates
// (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), which made
// "…txt.exe" read "exe.txt" on the dashboard, and the invisible ones
// (U+200B, U+2060–U+2064, U+FEFF, U+00AD, tags), which make two names
// look alike. The joiners U+200C and U+200D are allowed: Persian and Indic
// names and emoji sequences need them, and they reorder nothing.
func IsFormat(r rune) bool {
	return r >= 0xad && r != 0x200c && r != 0x200d && unicode.Is(unicode.Cf, r)
}

// validName reports whether s is 1 to maxChars characters of valid UTF-8
// without control or format characters.
func validName(s string, maxChars int) bool {
	if len(s) == 0 {
		return false
	}
	// Fast path: printable ASCII, the common case, is one byte a character.
	ascii := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == 0x7f {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		return len(s) <= maxChars
	}
	n := 0
	for i, c := range s {
		if c == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return false
			}
		}
		if IsControl(c) || IsFormat(c) {
			return false
		}
		n++
	}
	return n <= maxChars
}

// Validate is [OperatorBounds].CheckAcquisition(a): it accepts a limit
// of 0, which refuses every acquisition; a caller that takes limits from
// callers checks theirs with [CallerBounds].
func (a *Acquisition) Validate() error { return OperatorBounds.CheckAcquisition(a) }

// CheckLease checks a lease: whole seconds from MinLease to MaxLease.
func CheckLease(field string, lease time.Duration) error {
	if lease < MinLease || lease > MaxLease || lease%time.Second != 0 {
		return &invalid.Error{Field: field, Rule: fmt.Sprintf("must be whole seconds between %d and %d: how long a slot is held if it is not released",
			int64(MinLease/time.Second), int64(MaxLease/time.Second))}
	}
	return nil
}
