package keys_test

import (
	"testing"

	"github.com/unkeyed/ratelimit/cmd/api/internal/keys"
	"github.com/unkeyed/ratelimit/cmd/api/internal/keys/keystest"
	"github.com/unkeyed/ratelimit/internal/dbtest"
)

func TestMemory(t *testing.T) {
	keystest.TestStore(t, func(*testing.T) keys.Store { return keys.NewMemory() })
}

// TestMySQL runs the contract on a real MariaDB, each subtest on its own
// emptied table.
func TestMySQL(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	keystest.TestStore(t, func(t *testing.T) keys.Store {
		if _, err := sqlDB.Exec("DELETE FROM ratelimit_keys"); err != nil {
			t.Fatal(err)
		}
		return keys.NewMySQL(sqlDB)
	})
}
