package keys

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/access"
	"github.com/unkeyed/ratelimit/services/audit"
	auditstore "github.com/unkeyed/ratelimit/services/audit/store"
	"github.com/unkeyed/ratelimit/services/keys/store"
)

// MaxLivePerWorkspace caps a workspace's keys that are not revoked: a bound
// on what one workspace costs every process's memory. MaxPerWorkspace caps
// its rows, revoked ones included (they stay, so that every process's poll
// sees a key go), which every process holds in memory and reads all of
// again when a change of them is not found by revision.
// Like the override caps, they hold for the creations of one process;
// processes creating keys in one workspace at the same moment may pass
// them by those in flight.
const (
	MaxLivePerWorkspace = 1000
	MaxPerWorkspace     = 5000
)

// MaxListLimit is the largest page of ListKeys.
const MaxListLimit = 1000

// CapacityError is a key refused because its workspace has
// MaxLivePerWorkspace live keys.
type CapacityError struct {
	Max int
	// Revoked: the cap is the one on every row, revoked ones included.
	Revoked bool
}

// Exhausted makes e a resource_exhausted failure (failure.Exhausted).
func (e *CapacityError) Exhausted() bool { return true }

func (e *CapacityError) Error() string {
	if e.Revoked {
		return fmt.Sprintf("key limit reached: a workspace may have at most %d keys, revoked ones included", e.Max)
	}
	return fmt.Sprintf("key limit reached: a workspace may have at most %d live keys; revoke one first", e.Max)
}

// Manager creates, changes and revokes the keys of a Store on behalf of a
// principal, and records every change in the audit log. A principal may
// give a key only permissions it holds itself, and change or revoke only a
// key whose permissions it holds all of, so that keys.manage alone can
// neither mint a key that does more than its holder nor demote or revoke
// one that does more.
type Manager struct {
	store   store.Store
	audit   *audit.Writer
	now     func() time.Time
	applied func(Key) // see WithApplied
}

// Actor is who makes a change: the principal whose workspace it is in and
// whose permissions bound it, and the request that carries it, which the
// audit log records.
type Actor struct {
	Principal access.Principal
	RequestID string
}

// A ManagerOption configures a Manager.
type ManagerOption func(*Manager)

// WithApplied has the manager hand every key it created, changed or
// revoked to apply once the store holds it: [Table.Apply], so that the
// process that made a change is the first to enforce it.
func WithApplied(apply func(Key)) ManagerOption { return func(m *Manager) { m.applied = apply } }

// NewManager returns the manager of the keys st keeps, recording changes
// with w.
func NewManager(st store.Store, w *audit.Writer, opts ...ManagerOption) *Manager {
	m := &Manager{store: st, audit: w, now: time.Now, applied: func(Key) {}}
	for _, o := range opts {
		o(m)
	}
	return m
}

// Create creates a key in the actor's workspace and returns it with
// its secret: the only time the secret exists outside its holder.
func (m *Manager) Create(ctx context.Context, by Actor, name string, permissions []string, expiresAt time.Time) (Key, string, error) {
	pr := by.Principal
	if err := authorize(pr); err != nil {
		return Key{}, "", err
	}
	if err := Validate(name, permissions, expiresAt, m.now()); err != nil {
		return Key{}, "", err
	}
	if err := grantable(pr, permissions); err != nil {
		return Key{}, "", err
	}
	total, live, err := m.store.Count(ctx, pr.Workspace)
	if err != nil {
		return Key{}, "", err
	}
	switch {
	case live >= MaxLivePerWorkspace:
		return Key{}, "", &CapacityError{Max: MaxLivePerWorkspace}
	case total >= MaxPerWorkspace:
		return Key{}, "", &CapacityError{Max: MaxPerWorkspace, Revoked: true}
	}
	// A key made by one that expires expires with it at the latest: an
	// expiring key cannot make its access permanent.
	if !pr.ExpiresAt.IsZero() && (expiresAt.IsZero() || expiresAt.After(pr.ExpiresAt)) {
		expiresAt = pr.ExpiresAt
	}
	if err := m.audit.Admit(pr.Workspace); err != nil {
		return Key{}, "", err
	}
	secret, digest := Generate()
	k, err := m.store.Create(ctx, Key{ID: NewID(), Workspace: pr.Workspace, Name: name, Digest: digest,
		Permissions: dedupe(permissions), ExpiresAt: expiresAt.UTC().Truncate(time.Millisecond)})
	if err != nil {
		return Key{}, "", err
	}
	m.applied(k)
	m.record(ctx, by, audit.KeyCreate, Key{}, k)
	return k, secret, nil
}

// List returns a page of up to limit (1 to MaxListLimit, 0 for 100) keys of
// the actor's workspace after the id after, and whether more follow.
func (m *Manager) List(ctx context.Context, by Actor, after string, limit int) ([]Key, bool, error) {
	pr := by.Principal
	if err := authorize(pr); err != nil {
		return nil, false, err
	}
	if limit == 0 {
		limit = 100
	}
	if limit < 1 || limit > MaxListLimit {
		return nil, false, &invalid.Error{Field: "limit", Rule: fmt.Sprintf("must be between 1 and %d", MaxListLimit)}
	}
	page, err := m.store.List(ctx, pr.Workspace, after, limit+1)
	if err != nil {
		return nil, false, err
	}
	return page[:min(len(page), limit)], len(page) > limit, nil
}

// Update replaces the permissions of a live key of the actor's
// workspace.
func (m *Manager) Update(ctx context.Context, by Actor, id string, permissions []string) (Key, error) {
	pr := by.Principal
	if err := authorize(pr); err != nil {
		return Key{}, err
	}
	if err := checkID(id); err != nil {
		return Key{}, err
	}
	if err := ValidatePermissions(permissions); err != nil {
		return Key{}, err
	}
	if err := grantable(pr, permissions); err != nil {
		return Key{}, err
	}
	before, err := m.target(ctx, pr, id)
	if err != nil {
		return Key{}, err
	}
	if err := widenable(pr, before, permissions); err != nil {
		return Key{}, err
	}
	if slices.Equal(before.Permissions, dedupe(permissions)) {
		return before, nil // nothing changes, and nothing is recorded
	}
	if err := m.audit.Admit(pr.Workspace); err != nil {
		return Key{}, err
	}
	after, err := m.store.SetPermissions(ctx, pr.Workspace, id, dedupe(permissions))
	if err != nil {
		return Key{}, err
	}
	m.applied(after)
	m.record(ctx, by, audit.KeyUpdate, before, after)
	return after, nil
}

// Revoke revokes a live key of the actor's workspace. Every process
// refuses it within its poll interval.
func (m *Manager) Revoke(ctx context.Context, by Actor, id string) (Key, error) {
	pr := by.Principal
	if err := authorize(pr); err != nil {
		return Key{}, err
	}
	if err := checkID(id); err != nil {
		return Key{}, err
	}
	before, err := m.target(ctx, pr, id)
	if err != nil {
		return Key{}, err
	}
	if err := m.audit.Admit(pr.Workspace); err != nil {
		return Key{}, err
	}
	after, err := m.store.Revoke(ctx, pr.Workspace, id)
	if err != nil {
		return Key{}, err
	}
	m.applied(after)
	m.record(ctx, by, audit.KeyRevoke, before, after)
	return after, nil
}

// target returns the key id of the actor's workspace that a change
// is about, if the principal holds every permission it has.
func (m *Manager) target(ctx context.Context, pr access.Principal, id string) (Key, error) {
	k, err := m.store.Get(ctx, pr.Workspace, id)
	if err != nil {
		return Key{}, err
	}
	if err := grantable(pr, k.Permissions); err != nil {
		return Key{}, err
	}
	return k, nil
}

// record writes the audit entry of a change from before to after.
func (m *Manager) record(ctx context.Context, by Actor, action string, before, after Key) {
	m.audit.Write(ctx, auditstore.Entry{Workspace: by.Principal.Workspace, Actor: by.Principal.KeyID, Action: action,
		Target: after.ID, Before: auditValue(before), After: auditValue(after), RequestID: by.RequestID})
}

// auditValue is what the audit log shows of a key: never its digest.
func auditValue(k Key) string {
	if k.ID == "" {
		return ""
	}
	v := map[string]any{"id": k.ID, "name": k.Name, "permissions": k.Permissions}
	if !k.ExpiresAt.IsZero() {
		v["expiresAt"] = k.ExpiresAt
	}
	if !k.RevokedAt.IsZero() {
		v["revokedAt"] = k.RevokedAt
	}
	return audit.JSON(v)
}

// authorize requires keys.manage, of a key: on an open server (no key
// configured anywhere) every caller holds every permission, and the first
// key is the operator's to create (api keys create), not any caller's.
func authorize(pr access.Principal) error {
	if pr.KeyID == access.OpenKeyID {
		return &access.DeniedError{Permission: access.ManageKeys,
			Reason: "an open server manages no keys: create the first with api keys create, which writes it to the database"}
	}
	if !pr.Permissions.Has(access.ManageKeys) {
		return &access.DeniedError{Permission: access.ManageKeys}
	}
	return nil
}

// grantable requires pr to hold every permission it gives (or every one of
// a key it changes).
func grantable(pr access.Principal, permissions []string) error {
	for _, p := range permissions {
		if !pr.Permissions.Grants(p) {
			return &access.DeniedError{Permission: p}
		}
	}
	return nil
}

// widenable refuses an expiring principal adding a permission to a key
// that outlives it: the key would carry the access past the principal's
// expiry, as a key it created cannot (Create caps the expiry). Taking
// permissions away, or changing a key that expires no later, is allowed.
func widenable(pr access.Principal, target Key, permissions []string) error {
	if pr.ExpiresAt.IsZero() || (!target.ExpiresAt.IsZero() && !target.ExpiresAt.After(pr.ExpiresAt)) {
		return nil
	}
	has, err := access.Parse(target.Permissions)
	if err != nil {
		return err
	}
	for _, p := range permissions {
		if !has.Grants(p) {
			return &access.DeniedError{Permission: p, Reason: "an expiring key cannot add a permission to a key that outlives it: " +
				"create a key instead (it expires with this one at the latest)"}
		}
	}
	return nil
}

// checkID refuses an id no key could have.
func checkID(id string) error {
	if id == "" || len(id) > MaxIDLength || !access.Printable(id) {
		return &invalid.Error{Field: "key_id", Rule: fmt.Sprintf("must be 1 to %d printable characters", MaxIDLength)}
	}
	return nil
}

// dedupe returns permissions sorted, each once.
func dedupe(permissions []string) []string {
	out := slices.Clone(permissions)
	slices.Sort(out)
	return slices.Compact(out)
}
