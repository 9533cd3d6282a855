package mysqlstore

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/dbtest"
	"github.com/unkeyed/ratelimit/services/ratelimit/store"
	"github.com/unkeyed/ratelimit/services/ratelimit/storetest"
)

// TestContract runs the global store's contract suite on a real MariaDB.
func TestContract(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	storetest.TestGlobal(t, func(*testing.T) store.Global { return New(sqlDB) })
}
