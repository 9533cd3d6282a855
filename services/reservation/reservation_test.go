package reservation_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/unkeyed/ratelimit/services/reservation"
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
