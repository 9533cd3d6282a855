// Package mysqlstore records settled reservations in MySQL, for every region,
// and keeps there the secret every region signs reservations with.
package mysqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/reservation"
)

// Ledger is a store.Ledger on the ratelimit_reservation_settlements table, which
// every region shares: a reservation settles once across all of them.
type Ledger struct{ q *db.Queries }

// New returns a ledger on sqlDB.
func New(sqlDB *sql.DB) *Ledger { return &Ledger{q: db.New(sqlDB)} }

// Claim implements store.Ledger: the insert of the first claim wins; a later
// one reads its cost.
func (m *Ledger) Claim(ctx context.Context, id [16]byte, _ string, cost int64, expires time.Time) (bool, int64, error) {
	n, err := m.q.SettlementClaim(ctx, db.SettlementClaimParams{ID: id[:], Cost: uint64(cost), ExpiresAt: uint64(expires.UnixMilli())})
	if err != nil {
		return false, 0, fmt.Errorf("record settlement: %w", err)
	}
	if n == 1 {
		return true, cost, nil
	}
	first, err := m.q.SettlementCost(ctx, id[:])
	if err != nil {
		return false, 0, fmt.Errorf("read settlement: %w", err)
	}
	return false, int64(first), nil
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
