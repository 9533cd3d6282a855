package mysqlstore

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/overrides/store"
	"github.com/unkeyed/ratelimit/services/overrides/storetest"
)

// TestContract runs the overrides store's contract suite on a real
// MariaDB.
func TestContract(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	storetest.TestOverrides(t, func(*testing.T) store.Overrides { return New(sqlDB) })
}
