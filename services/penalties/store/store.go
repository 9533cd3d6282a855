// Package store defines what package penalties needs of the store that
// holds the penalty boxes where the whole fleet reads them ([Penalties]:
// MySQL in package mysqlstore; this process's memory in package
// memstore), and the values they exchange. Package storetest has the
// contract suite a store runs.
package store

import (
	"context"
	"errors"
)

// Key names one penalty box: an identifier of a workspace's namespace.
type Key struct {
	Workspace, Namespace, Identifier string
}

// Block is a penalty box's state: its latest block, and when it was
// lifted. Times are unix ms.
type Block struct {
	Key
	// Start and Until span the latest block: every decision of the
	// identifier in the namespace is denied from Start until Until. Its
	// length, Until - Start, is what a repeat offence doubles.
	Start, Until int64
	// Cleared is when the box was last emptied (DeletePenalty): a block
	// that started at or before it is void.
	Cleared int64
}

// Length is the block's length.
func (b Block) Length() int64 { return b.Until - b.Start }

// Void reports whether the block was lifted (or never set).
func (b Block) Void() bool { return b.Until == 0 || b.Start <= b.Cleared }

// InForce reports whether the block denies a decision at now.
func (b Block) InForce(now int64) bool { return !b.Void() && b.Start <= now && now < b.Until }

// Expires is when the box stops mattering: a repeat offence within one
// block's length after its end doubles the next one, after that nothing
// remembers it.
func (b Block) Expires() int64 { return b.Until + b.Length() }

// Merge returns the state that holds both a and b, whatever order they
// arrive in: the block with the later end (with its start), the later
// clearance. Merging is commutative, associative and idempotent, so a
// write replayed, duplicated or read late never undoes a newer one.
func Merge(a, b Block) Block {
	out := a
	if b.Until > a.Until || (b.Until == a.Until && b.Start > a.Start) {
		out.Start, out.Until = b.Start, b.Until
	}
	out.Cleared = max(a.Cleared, b.Cleared)
	return out
}

// Penalties keeps penalty boxes where every process of the fleet can read
// them.
type Penalties interface {
	// Merge merges b into the box of its key (see [Merge]).
	Merge(ctx context.Context, b Block) error
	// Get returns the box of a key, or ErrNotFound.
	Get(ctx context.Context, k Key) (Block, error)
	// List returns up to limit boxes of a namespace whose identifier
	// sorts after the given one and whose block has not ended at now, in
	// identifier order; lifted ones may be among them.
	List(ctx context.Context, workspace, namespace, after string, now int64, limit int) ([]Block, error)
	// Changes returns the boxes written at or after since, by the store's
	// clock, that still matter at now (their Expires after it), and the
	// store's clock as the read began: the since of the next poll, less a
	// look-back for writes under way.
	Changes(ctx context.Context, since, now int64) (changes []Block, clock int64, err error)
}

// ErrNotFound is returned for a box that does not exist.
var ErrNotFound = errors.New("no penalty")
