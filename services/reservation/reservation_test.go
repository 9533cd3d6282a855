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
	lease := token()
	lease.Kind = reservation.KindLease
	got, err = s.Open(s.Sign(lease))
	if err != nil || got != *lease {
		t.Fatalf("Open(Sign(%+v)) = %+v, %v", *lease, got, err)
	}
	if s.Sign(lease)[1:] == s.Sign(want)[1:] {
		t.Fatal("a lease and a reservation of the same numbers sign alike")
	}
}

// TestLeaseExpiresWithItsSlots: a lease's token expires when its slots
// free themselves, the end of its cell on its lease's grid (2 s for a
// lease of 30 s); a reservation's an hour after the end of the window
// after its own.
func TestLeaseExpiresWithItsSlots(t *testing.T) {
	tok := reservation.Token{Duration: 30 * time.Second, Sequence: 100, IssuedAt: 100 * 30_000, Kind: reservation.KindLease}
	if got, want := tok.ExpiresAt().UnixMilli(), int64(100*2_000); got != want {
		t.Fatalf("lease expires at %d, want %d", got, want)
	}
	tok.Kind = reservation.KindReservation
	if got, want := tok.ExpiresAt().UnixMilli(), int64(102*30_000)+time.Hour.Milliseconds(); got != want {
		t.Fatalf("reservation expires at %d, want %d", got, want)
	}
}

// TestForgedTokens: a token changed in any byte, signed with another
// secret, cut short or made up does not open.
func TestForgedTokens(t *testing.T) {
	s, _ := reservation.NewSigner(reservation.NewSecret())
	other, _ := reservation.NewSigner(reservation.NewSecret())
	good := s.Sign(token())
	// good with a line break in it: base64's strict decoding skips CR and
	// LF, and a token has one spelling.
	bad := []string{"", "x", good[:len(good)-1], good + "A", other.Sign(token()), strings.Repeat("A", len(good)),
		good[:10] + "\n" + good[10:], good[:10] + "\r\n" + good[10:], good + "\n", "\r" + good}
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

// TestFreshKeyringWaitsForTheLoadInProgress: the first calls of a fresh
// process wait for the shared secret one of them is loading. Before, one
// call loaded and the others signed with the process's own secret (which
// the other processes refuse) or opened tokens as unavailable: 5 of 10
// concurrent settles on a fresh process were answered 503.
func TestFreshKeyringWaitsForTheLoadInProgress(t *testing.T) {
	shared := reservation.NewSecret()
	release := make(chan struct{})
	var loads atomic.Int64
	k := reservation.NewKeyring(func(context.Context) ([]byte, error) {
		loads.Add(1)
		<-release // a store that takes a while to answer
		return shared, nil
	}, slog.New(slog.DiscardHandler))
	other, _ := reservation.StaticKeyring(shared)
	issued := other.Sign(context.Background(), token())

	var wg sync.WaitGroup
	tokens := make([]string, 10)
	opened := make([]error, 10)
	for i := range 10 {
		wg.Go(func() {
			if i%2 == 0 {
				tokens[i] = k.Sign(context.Background(), token())
			} else {
				_, opened[i] = k.Open(context.Background(), issued)
			}
		})
	}
	time.Sleep(50 * time.Millisecond) // every call has begun
	close(release)
	wg.Wait()
	for i := range 10 {
		if i%2 == 0 {
			if _, err := other.Open(context.Background(), tokens[i]); err != nil {
				t.Errorf("call %d signed with a secret the other processes refuse: %v", i, err)
			}
		} else if opened[i] != nil {
			t.Errorf("call %d could not open another process's token: %v", i, opened[i])
		}
	}
	if loads.Load() != 1 {
		t.Fatalf("%d loads, want 1", loads.Load())
	}
}

// TestEarlierLeasesOpenExpired: a lease id signed before leases were
// counted by their expiry names the lease-long cell it was acquired in
// (unix ms / lease); read as a cell of its lease's grid, it ended before
// the lease was acquired, for every lease: such an id frees nothing and
// extends nothing, and its slots free themselves where they were counted.
func TestEarlierLeasesOpenExpired(t *testing.T) {
	for lease := int64(1); lease <= 3600; lease += 7 {
		for _, acquired := range []int64{1_700_000_000_000, 1_795_945_044_123, 4_102_444_800_000} {
			tok := reservation.Token{Kind: reservation.KindLease, Duration: time.Duration(lease) * time.Second,
				Sequence: acquired / (lease * 1000), IssuedAt: acquired}
			if end := tok.ExpiresAt().UnixMilli(); end > acquired {
				t.Fatalf("an earlier lease of %d s acquired at %d expires at %d, after it was acquired", lease, acquired, end)
			}
		}
	}
}
