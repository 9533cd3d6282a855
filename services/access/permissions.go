// Package access says what a key may do: a set of permissions named as Unkey
// names its root keys' permissions, checked without allocating on every
// request.
//
// A permission is either per namespace, "ratelimit.<namespace>.<action>"
// (the namespace "*" standing for every namespace), or one of the
// workspace-wide [ManageKeys] and [ReadAudit], or the operator's
// [ReadStatus]. An Envoy domain D is the
// namespace "envoy:D". Namespaces may hold dots ("api.requests"): the action
// is what follows the last one.
package access

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/unkeyed/ratelimit/internal/invalid"
	"github.com/unkeyed/ratelimit/services/ratelimit"
)

// Action is what a namespace permission allows.
type Action uint8

// The actions of namespace permissions.
const (
	// Limit: Limit, MultiLimit, BatchLimit, v2 limit and multiLimit, Envoy's
	// ShouldRateLimit.
	Limit Action = 1 << iota
	// ReadOverride: GetOverride, ListOverrides, GetPenalty, ListPenalties.
	ReadOverride
	// SetOverride: SetOverride, DeletePenalty.
	SetOverride
	// DeleteOverride: DeleteOverride.
	DeleteOverride
	// ReadAnalytics: who is being limited.
	ReadAnalytics

	allActions = Limit | ReadOverride | SetOverride | DeleteOverride | ReadAnalytics
)

// actionNames are the names of the actions in permission strings, in the
// order of their bits.
var actionNames = [...]string{"limit", "read_override", "set_override", "delete_override", "read_analytics"}

// String returns the action's name in a permission, e.g. "set_override".
func (a Action) String() string {
	for i, name := range actionNames {
		if a == 1<<i {
			return name
		}
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// The workspace-wide permissions.
const (
	// ManageKeys allows creating, listing, changing and revoking the
	// workspace's keys.
	ManageKeys = "keys.manage"
	// ReadAudit allows reading the workspace's audit log.
	ReadAudit = "audit.read"
	// ReadStatus allows reading the fleet's status (GetStatus): every
	// process, its region and its Redis nodes' addresses, which are the
	// operator's, not a tenant's.
	ReadStatus = "status.read"
)

// AnyNamespace is the namespace of a permission that holds in every
// namespace.
const AnyNamespace = "*"

// MaxPermissions is the most permissions one key may hold: a bound on what
// a key costs in every process's memory.
const MaxPermissions = 1000

// Permissions is an immutable set of permissions. The zero value allows
// nothing. It is safe for concurrent use.
type Permissions struct {
	all        bool              // every permission: a token of UNKEY_AUTH_TOKENS
	manageKeys bool              // ManageKeys
	readAudit  bool              // ReadAudit
	readStatus bool              // ReadStatus
	anyNS      Action            // actions in every namespace
	namespaces map[string]Action // actions in one namespace
}

// All returns the permissions of a key that may do everything in its
// workspace, as every token of UNKEY_AUTH_TOKENS may.
func All() Permissions { return Permissions{all: true} }

// Parse returns the set of the named permissions. It fails naming the first
// entry that is not a permission, and the rule it breaks. Repeats are
// allowed and count once.
func Parse(names []string) (Permissions, error) {
	if len(names) > MaxPermissions {
		return Permissions{}, fmt.Errorf("permissions: must be at most %d, got %d", MaxPermissions, len(names))
	}
	var p Permissions
	for i, name := range names {
		// A name holds no white space: stores write a key's permissions
		// separated by it, so one name must never read back as several.
		if strings.ContainsFunc(name, unicode.IsSpace) {
			return Permissions{}, fmt.Errorf("permissions[%d] %q: must not contain white space", i, name)
		}
		switch name {
		case ManageKeys:
			p.manageKeys = true
			continue
		case ReadAudit:
			p.readAudit = true
			continue
		case ReadStatus:
			p.readStatus = true
			continue
		}
		ns, action, err := parseNamespaced(name)
		if err != nil {
			return Permissions{}, fmt.Errorf("permissions[%d] %q: %w", i, name, err)
		}
		if ns == AnyNamespace {
			p.anyNS |= action
			continue
		}
		if p.namespaces == nil {
			p.namespaces = make(map[string]Action)
		}
		p.namespaces[ns] |= action
	}
	return p, nil
}

// parseNamespaced splits "ratelimit.<namespace>.<action>".
func parseNamespaced(name string) (string, Action, error) {
	rest, ok := strings.CutPrefix(name, "ratelimit.")
	cut := strings.LastIndexByte(rest, '.')
	if !ok || cut < 0 {
		return "", 0, fmt.Errorf("must be %q, %q, %q or ratelimit.<namespace>.<action>", ManageKeys, ReadAudit, ReadStatus)
	}
	ns, actionName := rest[:cut], rest[cut+1:]
	i := slices.Index(actionNames[:], actionName)
	if i < 0 {
		return "", 0, fmt.Errorf("action must be one of %s", strings.Join(actionNames[:], ", "))
	}
	// A namespace the limiter refuses could never be checked.
	var ve *invalid.Error
	if err := ratelimit.CheckName("namespace", ns, ratelimit.MaxNameLength); errors.As(err, &ve) {
		return "", 0, fmt.Errorf("namespace must be %q or %s", AnyNamespace, strings.TrimPrefix(ve.Rule, "must be "))
	}
	return ns, Action(1) << i, nil
}

// Allows reports whether p allows action in namespace.
func (p Permissions) Allows(action Action, namespace string) bool {
	if p.all || p.anyNS&action == action {
		return true
	}
	return p.namespaces[namespace]&action == action
}

// AllowsSome reports whether p allows action in at least one namespace:
// whether a call that lists what the key may see could show it anything.
func (p Permissions) AllowsSome(action Action) bool {
	if p.all || p.anyNS&action == action {
		return true
	}
	for _, actions := range p.namespaces {
		if actions&action == action {
			return true
		}
	}
	return false
}

// Has reports whether p holds the permission name that is not a
// namespace's ([ManageKeys], [ReadAudit] or [ReadStatus]).
func (p Permissions) Has(name string) bool {
	switch name {
	case ManageKeys:
		return p.all || p.manageKeys
	case ReadAudit:
		return p.all || p.readAudit
	case ReadStatus:
		return p.all || p.readStatus
	}
	return false
}

// Name returns the permission that allows action in namespace, as a denial
// names what the key lacks: "ratelimit.<namespace>.<action>".
func Name(action Action, namespace string) string {
	return "ratelimit." + namespace + "." + action.String()
}

// Names returns the permissions of p, sorted: what a key listing shows. A
// set from [All] lists every permission in every namespace.
func (p Permissions) Names() []string {
	if p.all {
		p = Permissions{manageKeys: true, readAudit: true, readStatus: true, anyNS: allActions}
	}
	var names []string
	if p.manageKeys {
		names = append(names, ManageKeys)
	}
	if p.readAudit {
		names = append(names, ReadAudit)
	}
	if p.readStatus {
		names = append(names, ReadStatus)
	}
	add := func(ns string, actions Action) {
		for i := range actionNames {
			if a := Action(1) << i; actions&a != 0 {
				names = append(names, Name(a, ns))
			}
		}
	}
	add(AnyNamespace, p.anyNS)
	for ns, actions := range p.namespaces {
		add(ns, actions&^p.anyNS)
	}
	slices.Sort(names)
	return names
}

// Grants reports whether p holds the permission name, as a key granting it
// to another must: "ratelimit.*.limit" only if p allows limit in every
// namespace, "ratelimit.api.limit" if p allows limit in api. A name that is
// not a permission is not held.
func (p Permissions) Grants(name string) bool {
	if name == ManageKeys || name == ReadAudit || name == ReadStatus {
		return p.Has(name)
	}
	ns, action, err := parseNamespaced(name)
	if err != nil {
		return false
	}
	if ns == AnyNamespace {
		return p.all || p.anyNS&action == action
	}
	return p.Allows(action, ns)
}
