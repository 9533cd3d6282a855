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
// last lifted. Times are unix ms.
type Block struct {
	Key
	// Start and Until span the latest block: every decision of the
	// identifier in the namespace is denied from Start until Until. Its
	// length, Until - Start, is what a repeat offence doubles. Both 0:
	// no block since the last lift.
	Start, Until int64
	// Cleared is when the box was last emptied (DeletePenalty), as the
	// writer knew it: a block is written with the clearance its process
	// had read, and loses to a later one (see Merge).
	Cleared int64
}

// Length is the block's length.
func (b Block) Length() int64 { return b.Until - b.Start }

// Void reports whether the box holds no block: never set, or lifted.
func (b Block) Void() bool { return b.Until == 0 || b.Start <= b.Cleared }

// InForce reports whether the block denies a decision at now.
func (b Block) InForce(now int64) bool { return !b.Void() && b.Start <= now && now < b.Until }

// Expires is when the box stops mattering: a repeat offence within one
// block's length after its end doubles the next one, after that nothing
// remembers it.
func (b Block) Expires() int64 { return b.Until + b.Length() }

// Merge returns the later of two states of one box, in the order
// (Cleared, Until, Start): a lift beats every block written by a process
// that had not read it (and resets the box: a lift carries no block), and
// of two blocks written after the same lift, the one that ends later wins
// (of two that end together, the later started). The order is total, so
// merging is taking a maximum: commutative, associative and idempotent,
// and a write replayed, duplicated or read late never undoes a newer one
// whatever order the store and each process apply them in.
func Merge(a, b Block) Block {
	if later(b, a) {
		b.Key = a.Key
		return b
	}
	return a
}

// later reports whether b comes after a in Merge's order.
func later(b, a Block) bool {
	if b.Cleared != a.Cleared {
		return b.Cleared > a.Cleared
	}
	if b.Until != a.Until {
		return b.Until > a.Until
	}
	return b.Start > a.Start
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
