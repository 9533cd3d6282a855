// Package reservation issues and settles reservations: a Limit with
// reserve counts an estimate and answers a signed token naming the cell it
// was counted in; Settle gives back what was not spent, or counts what was
// spent beyond it, once, whatever process or region is asked.
package reservation

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Token is what a reservation token carries: the cell the estimate was
// counted in and how much. It is signed, never encrypted: a caller may read
// it, and any change to it fails verification.
type Token struct {
	// ID is random: the key of the settle-once record.
	ID         [16]byte
	Workspace  string
	Namespace  string
	Identifier string // the counter identifier
	Duration   time.Duration
	Limit      int64
	// Sequence is the fixed window the estimate was counted in.
	Sequence int64
	// Reserved is the estimate counted.
	Reserved int64
	// IssuedAt is when the reservation was made, in unix ms.
	IssuedAt int64
	// Scope names where its settlement can be recorded once (see
	// Ledger): "" for every region (MySQL), a region, or one process.
	Scope string
	// Kind is what the token names: a reservation, or a lease (Reserved
	// slots of a concurrency limit of Limit slots, held for a lease of
	// Duration, counted in cell Sequence of the lease's grid, which a
	// release or an extension frees once). A lease never settles as a
	// reservation, nor a reservation releases as a lease: the kind is
	// signed with the rest.
	Kind Kind
}

// Kind is what a token names.
type Kind uint8

// The kinds of token.
const (
	// KindReservation: an estimate counted, which a settle gives back
	// or adds to once.
	KindReservation Kind = iota
	// KindLease: slots held, which a release or an extension frees once.
	KindLease
)

// versions holds each kind's first byte of a payload: a reservation's
// and a lease's payloads are alike, and the byte tells them apart. A
// lease signed by a version before leases were counted by their expiry
// opens with its cell read as one of a lease's grid, which ended before
// it was acquired: it is expired, and frees nothing.
var versions = [...]byte{KindReservation: 2, KindLease: 3}

// ExpiresAt is when t can no longer be settled: an hour after its cell
// stopped counting in any decision (the end of the window after its own),
// so that an LLM call longer than its window still settles what it spent,
// and a day after it was made at the latest, so that the record that it was
// settled, kept until then, does not outlive any call by long.
//
// A lease expires when its slots free themselves, the end of its cell on
// its lease's grid (see the limiter's pools): a release after that frees
// nothing.
func (t *Token) ExpiresAt() time.Time {
	ms := t.Duration.Milliseconds()
	if t.Kind == KindLease {
		return time.UnixMilli(store.PoolCellEnd(store.PoolShift(ms), t.Sequence))
	}
	return time.UnixMilli(min((t.Sequence+2)*ms+settleGrace.Milliseconds(), t.IssuedAt+MaxLife.Milliseconds()))
}

// settleGrace is how long past its cell's last window a reservation still
// settles; MaxLife how long after it was made at most.
const (
	settleGrace = time.Hour
	MaxLife     = 24 * time.Hour
)

// macSize is how many bytes of HMAC-SHA256 a token carries: 128 bits, past
// any forgery by guessing.
const macSize = 16

// ErrInvalid is returned for a token this service did not issue or that was
// changed: its signature does not verify, or it does not decode.
var ErrInvalid = errors.New("not a reservation this service issued, or one that was changed")

// Signer signs and verifies tokens with a secret every process that
// settles them shares.
type Signer struct{ secret []byte }

// MinSecretLength is the shortest secret a Signer takes, in bytes.
const MinSecretLength = 32

// NewSigner returns a signer with secret, at least MinSecretLength bytes.
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretLength {
		return nil, errors.New("reservation secret: must be at least 32 bytes")
	}
	return &Signer{secret: append([]byte(nil), secret...)}, nil
}

// NewSecret returns MinSecretLength random bytes.
func NewSecret() []byte {
	b := make([]byte, MinSecretLength)
	_, _ = rand.Read(b)
	return b
}

// NewID returns a random reservation id.
func NewID() [16]byte {
	var id [16]byte
	_, _ = rand.Read(id[:])
	return id
}

// Sign returns t as a token: its payload and its signature, base64url.
func (s *Signer) Sign(t *Token) string {
	b := make([]byte, 0, 64+len(t.Workspace)+len(t.Namespace)+len(t.Identifier))
	b = append(b, versions[t.Kind])
	b = append(b, t.ID[:]...)
	for _, part := range [...]string{t.Workspace, t.Namespace, t.Identifier, t.Scope} {
		b = binary.AppendUvarint(b, uint64(len(part)))
		b = append(b, part...)
	}
	for _, n := range [...]int64{t.Duration.Milliseconds(), t.Limit, t.Sequence, t.Reserved, t.IssuedAt} {
		b = binary.AppendVarint(b, n)
	}
	b = append(b, s.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Open verifies token and returns what it carries, or ErrInvalid.
func (s *Signer) Open(token string) (Token, error) {
	// Strict: a token has one spelling, so no changed one opens. Strict
	// decoding still skips CR and LF, which no token holds: refused.
	if strings.ContainsAny(token, "\r\n") {
		return Token{}, ErrInvalid
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(raw) < 1+16+macSize {
		return Token{}, ErrInvalid
	}
	payload, sig := raw[:len(raw)-macSize], raw[len(raw)-macSize:]
	kind := slices.Index(versions[:], payload[0])
	if !hmac.Equal(sig, s.mac(payload)) || kind < 0 {
		return Token{}, ErrInvalid
	}
	t := Token{Kind: Kind(kind)}
	rest := payload[1:]
	copy(t.ID[:], rest)
	rest = rest[16:]
	var parts [4]string
	for i := range parts {
		n, size := binary.Uvarint(rest)
		if size <= 0 || n > uint64(len(rest)-size) {
			return Token{}, ErrInvalid
		}
		parts[i], rest = string(rest[size:size+int(n)]), rest[size+int(n):]
	}
	var nums [5]int64
	for i := range nums {
		n, size := binary.Varint(rest)
		if size <= 0 {
			return Token{}, ErrInvalid
		}
		nums[i], rest = n, rest[size:]
	}
	if len(rest) != 0 || nums[0] <= 0 {
		return Token{}, ErrInvalid
	}
	t.Workspace, t.Namespace, t.Identifier, t.Scope = parts[0], parts[1], parts[2], parts[3]
	t.Duration, t.Limit, t.Sequence, t.Reserved = time.Duration(nums[0])*time.Millisecond, nums[1], nums[2], nums[3]
	t.IssuedAt = nums[4]
	return t, nil
}

func (s *Signer) mac(payload []byte) []byte {
	h := hmac.New(sha256.New, s.secret)
	h.Write(payload)
	return h.Sum(nil)[:macSize]
}
