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

// Block is a penalty box's state: its latest block, or its latest lift.
// Times are unix ms.
type Block struct {
	Key
	// Start and Until span the block: every decision of the identifier in
	// the namespace is denied from Start until Until. Its length, Until -
	// Start, is what a repeat offence doubles. Both 0: no block.
	Start, Until int64
	// Cleared is when the box was last emptied (DeletePenalty): a block
	// that started at or before it is void.
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

// Merge returns the later of two states of one box: the one whose latest
// event (its block's start, or its lift) is later, so that a lift beats
// every block that began before it and loses to every block that began
// after it, whichever process wrote them and whatever it had read. Of two
// states of one instant, the lift wins, then the block that ends later.
// The order is total, so merging is taking a maximum: commutative,
// associative and idempotent, and a write replayed, duplicated or read
// late never undoes a newer one whatever order the store and each process
// apply them in. Two blocks started within a poll of each other by
// processes that had not read each other's keep the later-started one:
// at least its penalty, from its offence on.
func Merge(a, b Block) Block {
	if Later(b, a) {
		b.Key = a.Key
		return b
	}
	return a
}

// Later reports whether b comes after a in Merge's order.
func Later(b, a Block) bool {
	if tb, ta := b.event(), a.event(); tb != ta {
		return tb > ta
	}
	if b.Cleared != a.Cleared {
		return b.Cleared > a.Cleared
	}
	if b.Until != a.Until {
		return b.Until > a.Until
	}
	return b.Start > a.Start
}

// event is the time of b's latest event: its block's start or its lift.
func (b Block) event() int64 { return max(b.Start, b.Cleared) }

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
	// Changes returns up to limit of the boxes written at or after since,
	// by the store's clock, that still matter at now (their Expires after
	// it), the latest written first, and the store's clock as the read
	// began: the since of the next poll, less a look-back for writes
	// under way.
	Changes(ctx context.Context, since, now int64, limit int) (changes []Block, clock int64, err error)
}

// ErrNotFound is returned for a box that does not exist.
var ErrNotFound = errors.New("no penalty")
