// Package store defines what package overrides needs of the store that
// holds every override where the whole fleet reads it ([Overrides]; MySQL in
// package mysqlstore; this process's memory in package memstore), and the
// values they exchange. Package storetest has the contract suite a store
// runs.
package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Overrides keeps overrides where every process of the fleet can read them. It
// orders the changes of each override by revision (see [Change]), by its
// own clock, never its callers'.
type Overrides interface {
	// Set creates or replaces the override of o's identifier and returns
	// the row as the store then holds it: an existing override keeps its
	// id, a new one (or one deleted before) takes o.ID, which must be
	// unique in the store (callers draw it at random).
	Set(ctx context.Context, o Override) (Change, error)
	// Get returns the live override of an identifier or pattern, or
	// ErrNotFound.
	Get(ctx context.Context, workspace, namespace, identifier string) (Override, error)
	// List returns up to limit live overrides of a namespace whose
	// identifier sorts after the given one, in identifier order.
	List(ctx context.Context, workspace, namespace, after string, limit int) ([]Override, error)
	// Delete deletes the live override of an identifier or pattern and
	// returns the row as the store then holds it, or ErrNotFound.
	Delete(ctx context.Context, workspace, namespace, identifier string) (Change, error)
	// Revision returns the store's clock in revisions: a change that
	// commits after Revision returns gets a revision at least this large,
	// but for one already under way (which a poll's look-back covers).
	Revision(ctx context.Context) (int64, error)
	// Changes returns every override, deleted ones included (until they
	// are purged), whose revision is at least since.
	Changes(ctx context.Context, since int64) ([]Change, error)
	// Page returns up to limit live overrides after the position after (0
	// for the first page), in a stable order, and the position of the last
	// one: the start-up load reads every override this way.
	Page(ctx context.Context, after int64, limit int) (changes []Change, last int64, err error)
}

// Override replaces the limit and duration of the requests whose identifier
// it matches.
type Override struct {
	// ID names the override in answers (the overrideId of a decision).
	ID        string
	Workspace string
	Namespace string
	// Identifier is an identifier, or a pattern where * matches any run of
	// characters.
	Identifier string
	// Limit replaces the request's limit; 0 blocks the identifiers the
	// override matches (every request denied, nothing counted).
	Limit int64
	// Duration replaces the request's window.
	Duration time.Duration
	// Burst replaces a token bucket's burst; 0 keeps the request's.
	// Other models have none.
	Burst int64
	// Shadow decides the requests the override matches as shadow calls:
	// decided and counted as usual, admitted, and marked where their limit
	// would have refused them. A shadow override of Duration 0 (and Limit
	// and Burst 0) keeps the requests' own limits: it only switches them to
	// shadow; with Identifier "*" it switches its whole namespace, whatever
	// other override matches an identifier.
	Shadow bool
	// UpdatedAt is when the override last changed, in unix ms, by the
	// store's clock.
	UpdatedAt int64
}

// KeepsLimit reports whether o leaves the requests' own limits as they are
// (a shadow override without a limit of its own: Duration 0).
func (o *Override) KeepsLimit() bool { return o.Duration == 0 }

// NamespaceSwitch is the identifier of the override that switches a whole
// namespace (a shadow override that keeps the requests' limits; no other
// override may have "*" alone).
const NamespaceSwitch = "*"

// Scope is a workspace's namespace: what overrides are filed under, and
// what a pattern is matched within.
type Scope struct {
	Workspace string
	Namespace string
}

// Change is a state of an override as a store holds it: set, or deleted.
type Change struct {
	Override
	// Deleted marks a tombstone: the override was deleted, and the row is
	// kept (until the worker's cleanup purges it) so that every process's
	// poll sees it go.
	Deleted bool
	// Revision orders the states of one override: it grows with every
	// change, in the order the store made them, whatever the clocks of the
	// processes that asked for them. Memory applies a state only over one
	// with a smaller revision, so an older state read late never undoes a
	// newer one.
	Revision int64
}

// ErrNotFound is returned for an override that does not exist.
var ErrNotFound = errors.New("override not found")

// String describes o for logs.
func (o Override) String() string {
	mode := ""
	if o.Shadow {
		mode = " (shadow)"
	}
	if o.KeepsLimit() {
		return fmt.Sprintf("%s %s/%s/%s: the requests' own limits%s", o.ID, o.Workspace, o.Namespace, o.Identifier, mode)
	}
	return fmt.Sprintf("%s %s/%s/%s: %d per %s%s", o.ID, o.Workspace, o.Namespace, o.Identifier, o.Limit, o.Duration, mode)
}
