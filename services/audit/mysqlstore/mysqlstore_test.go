package mysqlstore_test

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/audit/mysqlstore"
	"github.com/unkeyed/ratelimit/services/audit/storetest"
)

// TestContract runs the contract suite on a real MariaDB.
func TestContract(t *testing.T) {
	t.Parallel()
	_, sqlDB := dbtest.Start(t)
	storetest.TestLog(t, mysqlstore.New(sqlDB))
}
