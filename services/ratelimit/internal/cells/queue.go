package cells

import "sync"

// maxQueued bounds the cells waiting for replay or for a prompt
// global flush, and the windows waiting for a refresh. A cell is in each
// cell queue at most once at a time, and a window is queued for refresh
// about once per freshness interval, so the queues hold about the active
// cells; the bound only matters past a million of them.
const maxQueued = 1 << 20

// Queue collects work for a background loop: producers push one item at a
// time, the loop takes everything at once. Producers take the lock only when
// they have new work (a cell's first accepted request in a replay interval),
// never on every request.
type Queue[T any] struct {
	mu    sync.Mutex
	items []T
}

// Push appends v and reports whether it fit under maxQueued.
func (q *Queue[T]) Push(v T) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) >= maxQueued {
		return false
	}
	q.items = append(q.items, v)
	return true
}

// Take returns every queued item, leaving the queue empty.
func (q *Queue[T]) Take() []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	items := q.items
	q.items = nil
	return items
}

// Len returns the number of queued items.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Ref is one cell of a window, as the cell queues hold it: a cell with
// increments to replay to the regional store, or one grown since the last global
// flush.
type Ref struct {
	W *Window
	C *Cell
}
