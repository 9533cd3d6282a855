package mysqlstore_test

import (
	"context"
	"testing"

	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/services/reservation"
	"github.com/unkeyed/ratelimit/services/reservation/mysqlstore"
	"github.com/unkeyed/ratelimit/services/reservation/storetest"
)

// TestContract runs the contract suite on a real MariaDB, and two
// processes read the one secret the first stored.
func TestContract(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	storetest.TestLedger(t, mysqlstore.New(sqlDB))
	a, err := mysqlstore.Secret(context.Background(), sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := mysqlstore.Secret(context.Background(), sqlDB)
	if len(a) != reservation.MinSecretLength || string(a) != string(b) {
		t.Fatalf("two processes read secrets of %d and %d bytes, equal %v", len(a), len(b), string(a) == string(b))
	}
}
