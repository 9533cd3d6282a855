// Package store is the contract between package audit and the stores that
// keep its entries: [Log], the [Entry] it keeps and the [Filter] it lists
// by. Package storetest holds the suite every store runs; memstore and
// mysqlstore implement it.
package store

import (
	"context"
	"time"
)

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
	// audit.OverrideTarget(namespace, identifier).
	Target string
	// Before and After are the target's values as JSON, "" where there
	// was none (before a creation, after a deletion).
	Before, After string
	RequestID     string
	// Time is when the store recorded the change, by its clock.
	Time time.Time
}

// Filter selects entries; a zero field selects any.
type Filter struct {
	Action, Target, Actor string
	// Since and Until bound Time to [Since, Until).
	Since, Until time.Time
}

// Log keeps entries. Its methods are safe for concurrent use.
type Log interface {
	// Record stores e, stamping its ID and Time.
	Record(ctx context.Context, e Entry) error
	// List returns up to limit entries of workspace matching f, newest
	// first, with an ID smaller than before (0: from the newest).
	List(ctx context.Context, workspace string, f Filter, before int64, limit int) ([]Entry, error)
}

// Matches reports whether e passes f: for a store that filters in memory.
func (f Filter) Matches(e Entry) bool {
	return (f.Action == "" || e.Action == f.Action) && (f.Target == "" || e.Target == f.Target) &&
		(f.Actor == "" || e.Actor == f.Actor) && (f.Since.IsZero() || !e.Time.Before(f.Since)) &&
		(f.Until.IsZero() || e.Time.Before(f.Until))
}
