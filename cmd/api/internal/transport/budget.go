package transport

import (
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
)

// Budget bounds the bytes of request messages being read and decompressed
// at once, across every request of the process. A request size on the wire
// says little about what decoding it costs, and many large requests at once
// would grow the heap without bound; reading past the budget fails the
// request with [ErrBusy] instead, and the client may retry. Its methods are
// safe for concurrent use.
type Budget struct {
	max   int64
	inUse atomic.Int64
}

// DefaultBudget is 64 MiB, UNKEY_DECODE_BUDGET_BYTES's default: 64
// messages of the largest size, or tens of thousands of ordinary ones (a
// Limit call is about 200 bytes), in flight at once. What a request holds is given back when it is answered; a
// decompressor's output, once it has been decompressed.
const DefaultBudget = 64 << 20

// NewBudget returns a budget of max bytes.
func NewBudget(max int64) *Budget { return &Budget{max: max} }

// ErrBusy refuses a request for want of decode budget. It is
// [failure.ErrBusy], so every adapter answers it as it answers the other
// caps (resource_exhausted, HTTP 429), inside a Connect error of that code
// so that connect-go hands it to the client as it is.
var ErrBusy = connect.NewError(connect.CodeResourceExhausted, failure.ErrBusy)

// take reserves n bytes, or reports that the budget is spent.
func (b *Budget) take(n int64) bool {
	if b.inUse.Add(n) > b.max {
		b.inUse.Add(-n)
		return false
	}
	return true
}

// give returns n bytes.
func (b *Budget) give(n int64) { b.inUse.Add(-n) }

// lease is what one reader took from a budget; release gives it all back.
type lease struct {
	budget *Budget
	held   int64
}

// take reserves n more bytes for the lease.
func (l *lease) take(n int) error {
	if n <= 0 || l.budget == nil {
		return nil
	}
	if !l.budget.take(int64(n)) {
		return ErrBusy
	}
	l.held += int64(n)
	return nil
}

// release gives back everything the lease holds.
func (l *lease) release() {
	if l.budget != nil && l.held > 0 {
		l.budget.give(l.held)
		l.held = 0
	}
}

// InUse returns the bytes the budget has given out and not yet got back.
func (b *Budget) InUse() int64 { return b.inUse.Load() }
