package transport

import (
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"

	"github.com/unkeyed/ratelimit/cmd/api/internal/failure"
)

// Budget bounds the bytes of request messages being read and decompressed
// at once, across every request of the process, and what one workspace
// holds of them. A request size on the wire says little about what
// decoding it costs, and many large requests at once would grow the heap
// without bound; reading past the budget fails the request with [ErrBusy]
// instead, and the client may retry. A body that arrives slowly holds what
// it has sent until it ends: without a share per workspace, one key's
// stalled bodies would hold the whole budget and every other tenant's
// calls would be answered busy. Its methods are safe for concurrent use.
type Budget struct {
	max   int64
	share int64
	inUse atomic.Int64
	// shares holds each workspace's bytes in use. Workspaces come from the
	// keys (the principal of an authenticated caller, or "" for the routes
	// that need none), never from what a caller sends, so the map is as
	// small as the key set.
	shares sync.Map // string → *atomic.Int64
}

// DefaultBudget is 64 MiB, UNKEY_DECODE_BUDGET_BYTES's default: 64
// messages of the largest size, or tens of thousands of ordinary ones (a
// Limit call is about 200 bytes), in flight at once. What a request holds
// is given back once its message has been read; a decompressor's output,
// once it has been decompressed.
const DefaultBudget = 64 << 20

// DefaultShare is 16 MiB, UNKEY_DECODE_BUDGET_SHARE_BYTES's default: a
// quarter of the default budget, so that one workspace leaves three
// quarters to the others.
const DefaultShare = 16 << 20

// NewBudget returns a budget of max bytes of which one workspace may hold
// at most share (share ≥ max: no share).
func NewBudget(max, share int64) *Budget { return &Budget{max: max, share: min(share, max)} }

// ErrBusy refuses a request for want of decode budget. It is
// [failure.ErrBusy], so every adapter answers it as it answers the other
// caps (resource_exhausted, HTTP 429), inside a Connect error of that code
// so that connect-go hands it to the client as it is.
var ErrBusy = connect.NewError(connect.CodeResourceExhausted, failure.ErrBusy)

// shareOf returns the bytes workspace holds.
func (b *Budget) shareOf(workspace string) *atomic.Int64 {
	if s, ok := b.shares.Load(workspace); ok {
		return s.(*atomic.Int64)
	}
	s, _ := b.shares.LoadOrStore(workspace, new(atomic.Int64))
	return s.(*atomic.Int64)
}

// take reserves n bytes for a holder of share (nil: of no workspace), or
// reports that the budget or the share is spent.
func (b *Budget) take(share *atomic.Int64, n int64) bool {
	if share != nil {
		if share.Add(n) > b.share {
			share.Add(-n)
			return false
		}
	}
	if b.inUse.Add(n) > b.max {
		b.inUse.Add(-n)
		if share != nil {
			share.Add(-n)
		}
		return false
	}
	return true
}

// give returns n bytes taken for share.
func (b *Budget) give(share *atomic.Int64, n int64) {
	b.inUse.Add(-n)
	if share != nil {
		share.Add(-n)
	}
}

// lease is what one reader took from a budget, for one workspace's share
// (nil: none); release gives it all back.
type lease struct {
	budget *Budget
	share  *atomic.Int64
	held   int64
}

// take reserves n more bytes for the lease.
func (l *lease) take(n int) error {
	if n <= 0 || l.budget == nil {
		return nil
	}
	if !l.budget.take(l.share, int64(n)) {
		return ErrBusy
	}
	l.held += int64(n)
	return nil
}

// release gives back everything the lease holds.
func (l *lease) release() {
	if l.budget != nil && l.held > 0 {
		l.budget.give(l.share, l.held)
		l.held = 0
	}
}

// InUse returns the bytes the budget has given out and not yet got back.
func (b *Budget) InUse() int64 { return b.inUse.Load() }
