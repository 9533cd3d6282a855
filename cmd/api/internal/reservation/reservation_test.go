package reservation_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/unkeyed/ratelimit/cmd/api/internal/reservation"
	"github.com/unkeyed/ratelimit/internal/testkit/dbtest"
	"github.com/unkeyed/ratelimit/internal/testkit/testserver"
)

func token() *reservation.Token {
	return &reservation.Token{ID: reservation.NewID(), Workspace: "ws", Namespace: "llm.tokens", Identifier: "team:42",
		Duration: time.Minute, Limit: 100_000, Sequence: 29_999_999, Reserved: 4096}
}

func TestTokenRoundTrip(t *testing.T) {
	s, err := reservation.NewSigner(reservation.NewSecret())
	if err != nil {
		t.Fatal(err)
	}
	want := token()
	got, err := s.Open(s.Sign(want))
	if err != nil || got != *want {
		t.Fatalf("Open(Sign(%+v)) = %+v, %v", *want, got, err)
	}
}

// TestForgedTokens: a token changed in any byte, signed with another
// secret, cut short or made up does not open.
func TestForgedTokens(t *testing.T) {
	s, _ := reservation.NewSigner(reservation.NewSecret())
	other, _ := reservation.NewSigner(reservation.NewSecret())
	good := s.Sign(token())
	bad := []string{"", "x", good[:len(good)-1], good + "A", other.Sign(token()), strings.Repeat("A", len(good))}
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
	for i := range good {
		b := []byte(good)
		b[i] = alphabet[(strings.IndexByte(alphabet, b[i])+1)%len(alphabet)]
		bad = append(bad, string(b))
	}
	for _, tok := range bad {
		if got, err := s.Open(tok); !errors.Is(err, reservation.ErrInvalid) {
			t.Errorf("Open(%q) = %+v, %v; want ErrInvalid", tok, got, err)
		}
	}
	if _, err := reservation.NewSigner(make([]byte, 31)); err == nil {
		t.Error("a 31-byte secret was taken")
	}
}

// TestKeyringFallsBackToItsOwnSecret: while the shared secret cannot be
// loaded a keyring signs with its own, and opens those tokens still once
// the shared one is loaded; another keyring on the same shared secret
// opens only what was signed with it.
func TestKeyringFallsBackToItsOwnSecret(t *testing.T) {
	shared := reservation.NewSecret()
	var down atomic.Bool
	var loads atomic.Int64
	load := func(context.Context) ([]byte, error) {
		loads.Add(1)
		if down.Load() {
			return nil, errors.New("dial tcp: connection refused")
		}
		return shared, nil
	}
	ctx := context.Background()
	down.Store(true)
	a := reservation.NewKeyring(load, slog.New(slog.DiscardHandler))
	own := a.Sign(ctx, token())
	a.Sign(ctx, token()) // within the retry interval: no second load
	if loads.Load() != 1 {
		t.Fatalf("%d loads while the store was down, want 1 per retry interval", loads.Load())
	}
	b, _ := reservation.StaticKeyring(shared)
	if _, err := b.Open(ctx, own); err == nil {
		t.Fatal("another process opened a token signed with this one's own secret")
	}
	if _, err := a.Open(ctx, own); err != nil {
		t.Fatalf("the issuing process cannot open its own token: %v", err)
	}
	if _, err := a.Open(ctx, b.Sign(ctx, token())); !errors.Is(err, reservation.ErrSecretUnavailable) {
		t.Fatalf("a token of the shared secret while it cannot be loaded: %v, want ErrSecretUnavailable", err)
	}
	down.Store(false)
	c := reservation.NewKeyring(load, slog.New(slog.DiscardHandler))
	sharedToken := c.Sign(ctx, token())
	if _, err := b.Open(ctx, sharedToken); err != nil {
		t.Fatalf("a token signed with the shared secret does not open elsewhere: %v", err)
	}
}

// testLedger is the contract every Ledger keeps: the first claim of an id
// wins and says so; every later one, however many race, loses and reads
// the first one's cost.
func testLedger(t *testing.T, l reservation.Ledger) {
	ctx := context.Background()
	expires := time.Now().Add(time.Hour)
	id := reservation.NewID()
	first, cost, err := l.Claim(ctx, id, "ws", 700, expires)
	if err != nil || !first || cost != 700 {
		t.Fatalf("first claim: %v %d %v", first, cost, err)
	}
	first, cost, err = l.Claim(ctx, id, "ws", 900, expires)
	if err != nil || first || cost != 700 {
		t.Fatalf("second claim: first %v, cost %d, %v; want false, 700", first, cost, err)
	}
	race := reservation.NewID()
	var wins atomic.Int64
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			first, _, err := l.Claim(ctx, race, "ws", int64(i), expires)
			if err != nil {
				t.Error(err)
			}
			if first {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d of 16 racing claims won, want 1", wins.Load())
	}
}

func TestMemoryLedger(t *testing.T) {
	testLedger(t, reservation.NewMemory(100, time.Now))
	now := time.Now()
	clock := func() time.Time { return now }
	l := reservation.NewMemory(20, clock) // a workspace may hold 2
	ctx := context.Background()
	l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Second))
	l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Hour))
	if _, _, err := l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Hour)); !errors.Is(err, reservation.ErrLedgerFull) {
		t.Fatalf("a workspace's claim past its share: %v, want ErrLedgerFull", err)
	}
	if first, _, err := l.Claim(ctx, reservation.NewID(), "other", 1, now.Add(time.Hour)); !first || err != nil {
		t.Fatalf("another workspace's claim while one is at its share: %v %v", first, err)
	}
	now = now.Add(2 * time.Second) // the first record expired: room for one
	if first, _, err := l.Claim(ctx, reservation.NewID(), "greedy", 1, now.Add(time.Hour)); !first || err != nil {
		t.Fatalf("a claim once a record expired: %v %v", first, err)
	}
}

func TestRedisLedger(t *testing.T) {
	r := testserver.StartRedis(t)
	client := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { client.Close() })
	testLedger(t, reservation.NewRedis(client))
	a, err := reservation.RedisSecret(context.Background(), client)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := reservation.RedisSecret(context.Background(), client)
	if len(a) != reservation.MinSecretLength || string(a) != string(b) {
		t.Fatalf("two processes read secrets of %d and %d bytes, equal %v", len(a), len(b), string(a) == string(b))
	}
}

func TestMySQLLedger(t *testing.T) {
	_, sqlDB := dbtest.Start(t)
	testLedger(t, reservation.NewMySQL(sqlDB))
	a, err := reservation.MySQLSecret(context.Background(), sqlDB)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := reservation.MySQLSecret(context.Background(), sqlDB)
	if len(a) != reservation.MinSecretLength || string(a) != string(b) {
		t.Fatalf("two processes read secrets of %d and %d bytes, equal %v", len(a), len(b), string(a) == string(b))
	}
}
