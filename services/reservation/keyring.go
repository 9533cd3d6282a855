package reservation

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Keyring signs and opens tokens with the secret the processes that settle
// them share, which it loads on first use (from MySQL, which every region
// shares, or from the region's Redis). Until that secret can be loaded it
// signs with a secret of this process's own, so a reservation is never
// refused for a store that is down: such a token settles in this process
// only. It opens tokens signed with either.
type Keyring struct {
	load   func(context.Context) ([]byte, error)
	now    func() time.Time
	logger *slog.Logger
	local  *Signer

	shared atomic.Pointer[Signer]
	mu     sync.Mutex
	// loading is closed when the load in progress ends; nil when none is.
	loading chan struct{}
	next    time.Time // the next load may start then
}

// Load timing: a request waits at most loadTimeout for the shared secret,
// and asks again at most every retryInterval while it cannot be read.
const (
	loadTimeout   = time.Second
	retryInterval = 5 * time.Second
)

// NewKeyring returns a keyring that loads the shared secret with load
// (nil: there is none to share; the process's own secret signs), logging a
// failure with logger.
func NewKeyring(load func(context.Context) ([]byte, error), logger *slog.Logger) *Keyring {
	local, _ := NewSigner(NewSecret())
	return &Keyring{load: load, now: time.Now, logger: logger, local: local}
}

// StaticKeyring returns a keyring whose shared secret is secret, at least
// MinSecretLength bytes: every process configured with it shares it.
func StaticKeyring(secret []byte) (*Keyring, error) {
	s, err := NewSigner(secret)
	if err != nil {
		return nil, err
	}
	k := NewKeyring(nil, slog.New(slog.DiscardHandler))
	k.shared.Store(s)
	return k, nil
}

// signer returns the shared signer, loading it if it is not loaded yet
// and no load failed within retryInterval, or nil. A call that finds a
// load in progress waits for it (within loadTimeout): on a fresh process,
// concurrent first calls would otherwise sign with the process's own
// secret, whose tokens the other processes refuse, and open theirs as
// unavailable.
func (k *Keyring) signer(ctx context.Context) *Signer {
	if s := k.shared.Load(); s != nil || k.load == nil {
		return s
	}
	k.mu.Lock()
	if s := k.shared.Load(); s != nil {
		k.mu.Unlock()
		return s
	}
	if ch := k.loading; ch != nil {
		k.mu.Unlock()
		wait := time.NewTimer(loadTimeout)
		defer wait.Stop()
		select {
		case <-ch:
		case <-wait.C:
		case <-ctx.Done():
		}
		return k.shared.Load()
	}
	if k.now().Before(k.next) {
		k.mu.Unlock()
		return nil
	}
	done := make(chan struct{})
	k.loading = done
	k.mu.Unlock()

	err := errors.New("the load panicked")
	defer func() {
		// Whatever happened (a load that panics too), the waiters are let
		// go and a failure waits retryInterval.
		k.mu.Lock()
		k.loading = nil
		if err != nil {
			k.next = k.now().Add(retryInterval)
		}
		k.mu.Unlock()
		close(done)
	}()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), loadTimeout)
	defer cancel()
	var secret []byte
	secret, err = k.load(ctx)
	var s *Signer
	if err == nil {
		if s, err = NewSigner(secret); err == nil {
			k.shared.Store(s)
		}
	}
	if err != nil {
		k.logger.WarnContext(ctx, "load the shared reservation secret: reservations are signed with this process's own until it loads", "error", err)
		return nil
	}
	return s
}

// Sign returns t as a token, signed with the shared secret if it can be
// had, else with the process's own.
func (k *Keyring) Sign(ctx context.Context, t *Token) string {
	if s := k.signer(ctx); s != nil {
		return s.Sign(t)
	}
	return k.local.Sign(t)
}

// Open verifies token with the shared secret, then the process's own, and
// returns what it carries; ErrInvalid if neither verifies it, or
// ErrSecretUnavailable if the shared secret could not be loaded and the
// process's own does not verify it (it may be another process's, valid).
func (k *Keyring) Open(ctx context.Context, token string) (Token, error) {
	s := k.signer(ctx)
	if s != nil {
		if t, err := s.Open(token); err == nil {
			return t, nil
		}
	}
	t, err := k.local.Open(token)
	if err != nil && s == nil && k.load != nil {
		return Token{}, ErrSecretUnavailable
	}
	return t, err
}

// ErrSecretUnavailable is returned by Open for a token it cannot verify yet:
// the shared secret could not be loaded.
var ErrSecretUnavailable = errors.New("reservation secret unavailable: the store that shares it cannot be reached; try again")
