package reservation

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/db"
)

// MySQL is a Ledger on the ratelimit_reservation_settlements table, which
// every region shares: a reservation settles once across all of them.
type MySQL struct{ q *db.Queries }

// NewMySQL returns a ledger on sqlDB.
func NewMySQL(sqlDB *sql.DB) *MySQL { return &MySQL{q: db.New(sqlDB)} }

// Claim implements Ledger: the insert of the first claim wins; a later
// one reads its cost.
func (m *MySQL) Claim(ctx context.Context, id [16]byte, _ string, cost int64, expires time.Time) (bool, int64, error) {
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

// MySQLSecret returns the reservation secret every region shares, storing a
// new one if there is none yet: the first process to ask inserts it, and
// every other reads the same.
func MySQLSecret(ctx context.Context, sqlDB *sql.DB) ([]byte, error) {
	q := db.New(sqlDB)
	if err := q.SecretInsert(ctx, db.SecretInsertParams{Name: secretName, Secret: NewSecret()}); err != nil {
		return nil, fmt.Errorf("store the reservation secret: %w", err)
	}
	secret, err := q.SecretGet(ctx, secretName)
	if err != nil {
		return nil, fmt.Errorf("read the reservation secret: %w", err)
	}
	return secret, nil
}
