// Package audit records every change of a key or an override: who made it
// (the acting key's id), what (an Action), to what (a target), the values
// before and after, when (the store's clock) and under which request id.
// A [Log] keeps the entries: MySQL's ratelimit_audit_log (package
// mysqlstore), or this process's memory ([Memory]) without MySQL.
package audit

import (
	"context"
	"strings"
	"time"
)

// The actions an entry records.
const (
	KeyCreate      = "key.create"
	KeyUpdate      = "key.update"
	KeyRevoke      = "key.revoke"
	OverrideCreate = "override.create"
	OverrideUpdate = "override.update"
	OverrideDelete = "override.delete"
)

// Actions are every action, for validating a filter.
var Actions = []string{KeyCreate, KeyUpdate, KeyRevoke, OverrideCreate, OverrideUpdate, OverrideDelete}

// Entry is one change.
type Entry struct {
	// ID orders the entries of a store: a later entry has a larger one.
	ID        int64
	Workspace string
	// Actor is the id of the key that made the change ("cli" for the api
	// keys command).
	Actor  string
	Action string
	// Target is what changed: a key's id, or an override's
	// OverrideTarget(namespace, identifier).
	Target string
	// Before and After are the target's values as JSON, "" where there
	// was none (before a creation, after a deletion).
	Before, After string
	RequestID     string
	// Time is when the store recorded the change, by its clock.
	Time time.Time
}

// OverrideTarget names an override as an entry's target:
// "<namespace>/<identifier>", the namespace's "%" and "/" escaped as %25 and
// %2F so that the first "/" always ends it (a namespace "a/b" with
// identifier "c" and a namespace "a" with identifier "b/c" are two
// targets).
func OverrideTarget(namespace, identifier string) string {
	return targetEscaper.Replace(namespace) + "/" + identifier
}

var targetEscaper = strings.NewReplacer("%", "%25", "/", "%2F")

// Filter selects entries; a zero field selects any.
type Filter struct {
	Action, Target, Actor string
	// Since and Until bound Time to [Since, Until).
	Since, Until time.Time
}

// Log keeps entries.
type Log interface {
	// Record stores e, stamping its ID and Time.
	Record(ctx context.Context, e Entry) error
	// List returns up to limit entries of workspace matching f, newest
	// first, with an ID smaller than before (0: from the newest).
	List(ctx context.Context, workspace string, f Filter, before int64, limit int) ([]Entry, error)
}
