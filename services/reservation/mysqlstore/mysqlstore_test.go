package mysqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

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

// TestWorkspaceCap: a workspace holds at most its cap of live settlements.
// Before, one client kept 980 rows a second for up to a day. Here the cap
// is 50: A's 51st claim is refused with ErrFull and writes nothing, B is
// unaffected, and once A's rows expire the recount makes room.
func TestWorkspaceCap(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	now := time.Now()
	clock := func() time.Time { return now }
	l := mysqlstore.New(sqlDB, mysqlstore.WithMaxPerWorkspace(50), mysqlstore.WithClock(clock))
	ctx := context.Background()
	claim := func(ws string, expires time.Time) error {
		_, _, err := l.Claim(ctx, reservation.NewID(), ws, 1, expires)
		return err
	}
	soon := now.Add(time.Minute)
	for i := range 50 {
		if err := claim("ws_a", soon); err != nil {
			t.Fatalf("claim %d of 50: %v", i, err)
		}
	}
	if err := claim("ws_a", soon); !errors.Is(err, mysqlstore.ErrFull) {
		t.Fatalf("A's 51st live settlement: %v, want ErrFull", err)
	}
	var rows int
	sqlDB.QueryRow("SELECT COUNT(*) FROM ratelimit_reservation_settlements WHERE workspace_id = 'ws_a'").Scan(&rows)
	if rows != 50 {
		t.Fatalf("A holds %d rows, want 50", rows)
	}
	if err := claim("ws_b", soon); err != nil {
		t.Fatalf("B's claim with A at its cap: %v", err)
	}
	// A's settlements expire: the next recount makes room.
	now = now.Add(2 * time.Minute)
	if err := claim("ws_a", now.Add(time.Minute)); err != nil {
		t.Fatalf("A's claim after its settlements expired: %v", err)
	}
}
