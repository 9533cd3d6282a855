// Package store is the contract between package reservation and the
// ledgers that record settlements: [Ledger]. Package storetest holds the
// suite every ledger runs; memstore (one process), redisstore (the
// processes of a region) and mysqlstore (every region) implement it.
package store

import (
	"context"
	"time"
)

// Ledger records which reservations were settled, so that each settles
// once. Implementations: memstore (one process), redisstore (the
// processes of a region), mysqlstore (every region). A token carries the scope of the ledger of
// the process that issued it, and settles only where that ledger is.
type Ledger interface {
	// Claim records that reservation id of workspace is settled at cost,
	// keeping the record until expires. It returns true for the first
	// claim of id, and otherwise false and the cost of that first claim.
	Claim(ctx context.Context, id [16]byte, workspace string, cost int64, expires time.Time) (first bool, firstCost int64, err error)
}
