package mysqlstore_test

import (
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/keys/mysqlstore"
	"github.com/unkeyed/ratelimit/services/keys/store"
	"github.com/unkeyed/ratelimit/services/keys/storetest"
)

// TestContract runs the contract on a real MariaDB, each subtest on its
// own emptied table.
func TestContract(t *testing.T) {
	t.Parallel()
	_, sqlDB := dbtest.Start(t)
	storetest.TestStore(t, func(t *testing.T) store.Store {
		if _, err := sqlDB.Exec("DELETE FROM ratelimit_keys"); err != nil {
			t.Fatal(err)
		}
		return mysqlstore.New(sqlDB)
	})
}
