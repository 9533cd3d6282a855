package mysqlstore

import (
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/penalties/store"
	"github.com/unkeyed/ratelimit/services/penalties/storetest"
)

// TestContract runs the penalties store's contract suite on a real
// MariaDB.
func TestContract(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	storetest.TestPenalties(t, func(*testing.T) store.Penalties { return New(sqlDB) },
		func() int64 { return time.Now().UnixMilli() })
}
