// Package mysqlstore records settled reservations in MySQL, for every region,
// and keeps there the secret every region signs reservations with.
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// Ledger is a store.Ledger on the ratelimit_reservation_settlements table, which
// every region shares: a reservation settles once across all of them. A
// workspace holds at most its cap of live settlements (those whose
// reservation could still be settled): a row is kept up to a day, and one
// client settling 980 a second would otherwise keep 84 million.
type Ledger struct {
	q      *db.Queries
	max    int64
	now    func() time.Time
	mu     sync.Mutex
	counts map[string]*liveCount // by workspace: the operator's, from the keys
}

// liveCount is what a ledger knows of a workspace's live settlements: the
// count it read at checked, plus those it added since.
type liveCount struct {
	n        int64
	checked  time.Time
	counting bool // a caller is counting again
}

// Refresh intervals of a workspace's count: every recountEvery as a rule,
// and every recountFull while it is at its cap (so that expiries make room
// soon). The other processes' settlements between two counts are not seen:
// a workspace may pass its cap by what the fleet settles in recountEvery.
const (
	recountEvery = 10 * time.Second
	recountFull  = time.Second
)

// DefaultMaxPerWorkspace is a workspace's cap of live settlements: about
// 100 MB of rows and index.
const DefaultMaxPerWorkspace = 1_000_000

// ErrFull is returned by Claim for a workspace at its cap of live
// settlements: the settle goes on unrecorded (nothing given back, any
// extra counted), as with any ledger that cannot record it.
var ErrFull = errors.New("reservation ledger: the workspace holds its most live settlements")

// An Option configures a Ledger.
type Option func(*Ledger)

// WithMaxPerWorkspace sets a workspace's cap of live settlements
// (DefaultMaxPerWorkspace).
func WithMaxPerWorkspace(n int64) Option { return func(l *Ledger) { l.max = n } }

// WithClock sets the ledger's clock, for its counts' refreshes.
func WithClock(now func() time.Time) Option { return func(l *Ledger) { l.now = now } }

// New returns a ledger on sqlDB.
func New(sqlDB *sql.DB, opts ...Option) *Ledger {
	l := &Ledger{q: db.New(sqlDB), max: DefaultMaxPerWorkspace, now: time.Now, counts: map[string]*liveCount{}}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Claim implements store.Ledger: the insert of the first claim wins; a later
// one reads its cost. A workspace at its cap is refused with ErrFull
// before anything is written.
func (m *Ledger) Claim(ctx context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (bool, int64, error) {
	if err := m.admit(ctx, workspace); err != nil {
		return false, 0, err
	}
	n, err := m.q.SettlementClaim(ctx, db.SettlementClaimParams{ID: id[:], Cost: uint64(cost), ExpiresAt: uint64(expires.UnixMilli()),
		WorkspaceID: workspace})
	if err != nil {
		return false, 0, fmt.Errorf("record settlement: %w", err)
	}
	if n == 1 {
		m.mu.Lock()
		m.counts[workspace].n++
		m.mu.Unlock()
		return true, cost, nil
	}
	first, err := m.q.SettlementCost(ctx, id[:])
	if err != nil {
		return false, 0, fmt.Errorf("read settlement: %w", err)
	}
	return false, int64(first), nil
}

// admit refuses a workspace at its cap, counting its live settlements
// again when the count it holds is old.
func (m *Ledger) admit(ctx context.Context, workspace string) error {
	m.mu.Lock()
	c, ok := m.counts[workspace]
	if !ok {
		c = &liveCount{}
		m.counts[workspace] = c
	}
	now := m.now()
	full := c.n >= m.max
	stale := c.checked.IsZero() || now.Sub(c.checked) >= recountEvery || (full && now.Sub(c.checked) >= recountFull)
	if stale && !c.checked.IsZero() {
		// One caller counts; the others go by the count they have, so
		// that a busy workspace costs one count per interval, not one
		// per concurrent settle.
		c.checked = now
		stale = !c.counting
		c.counting = true
	} else if stale {
		c.counting = true
	}
	m.mu.Unlock()
	if !stale {
		if full {
			return ErrFull
		}
		return nil
	}
	n, err := m.q.SettlementsLive(ctx, db.SettlementsLiveParams{WorkspaceID: workspace, Now: uint64(now.UnixMilli())})
	m.mu.Lock()
	c.counting = false
	if err == nil {
		c.n, c.checked = n, now
	}
	m.mu.Unlock()
	if err != nil {
		return fmt.Errorf("count live settlements: %w", err)
	}
	if n >= m.max {
		return ErrFull
	}
	return nil
}

// secretName names the reservation secret in ratelimit_secrets.
const secretName = "reservations"

// Secret returns the reservation secret every region shares, storing a
// new one if there is none yet: the first process to ask inserts it, and
// every other reads the same.
func Secret(ctx context.Context, sqlDB *sql.DB) ([]byte, error) {
	q := db.New(sqlDB)
	if err := q.SecretInsert(ctx, db.SecretInsertParams{Name: secretName, Secret: reservation.NewSecret()}); err != nil {
		return nil, fmt.Errorf("store the reservation secret: %w", err)
	}
	secret, err := q.SecretGet(ctx, secretName)
	if err != nil {
		return nil, fmt.Errorf("read the reservation secret: %w", err)
	}
	return secret, nil
}
