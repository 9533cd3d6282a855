// Package topk finds the heaviest items of a stream in bounded memory: a
// Space-Saving sketch (Metwally, Agrawal and El Abbadi, "Efficient
// computation of frequent and top-k elements in data streams", 2005).
//
// A sketch of capacity K keeps K counters. An item it keeps has its count
// raised; an item it does not keep takes the counter with the smallest
// count, and that count (which it may or may not have earned) as its
// error. So, after items of a total weight N were added:
//   - every item whose true weight is above N/K is kept;
//   - a kept item's Count is at least its true weight and at most
//     Count - Error below it, and Error is at most N/K.
//
// Package analytics keeps, for who is limited, a sketch of denials and one
// of traffic per namespace and flush interval, with K = 64: any identifier
// with more than 1/64 of an interval's denials is named, its count off by
// at most that. Under Zipf-distributed traffic the true top 10 are among a
// sketch's top 20 (TestZipfTopTen, at K = 256).
package topk

import (
	"container/heap"
	"slices"
	"strings"
)

// Item is a kept item: its key, its estimated weight, and how much of that
// estimate it may not have earned.
type Item struct {
	Key string
	// Count is at least the item's true weight.
	Count uint64
	// Error bounds the overestimate: the true weight is at least
	// Count - Error.
	Error uint64
}

// Sketch is a Space-Saving sketch. It is not safe for concurrent use.
type Sketch struct {
	k     int
	total uint64
	items map[string]*entry
	byMin minHeap
}

type entry struct {
	Item
	index int // in byMin
}

// New returns an empty sketch of capacity k (at least 1).
func New(k int) *Sketch {
	k = max(k, 1)
	// Not presized: most sketches of a namespace's interval keep a few
	// items, and thousands of them may be live at once.
	return &Sketch{k: k, items: map[string]*entry{}}
}

// Total returns the weight of every item added, kept or not.
func (s *Sketch) Total() uint64 { return s.total }

// Add adds n to key's weight.
func (s *Sketch) Add(key string, n uint64) {
	if n == 0 {
		return
	}
	s.total += n
	if e, ok := s.items[key]; ok {
		e.Count += n
		heap.Fix(&s.byMin, e.index)
		return
	}
	if len(s.items) < s.k {
		// A new key is copied: the sketch outlives the request that
		// carried it.
		e := &entry{Item: Item{Key: strings.Clone(key), Count: n}}
		s.items[e.Key] = e
		heap.Push(&s.byMin, e)
		return
	}
	// Replace the smallest: its count becomes the newcomer's error.
	e := s.byMin[0]
	delete(s.items, e.Key)
	e.Key, e.Error, e.Count = strings.Clone(key), e.Count, e.Count+n
	s.items[e.Key] = e
	heap.Fix(&s.byMin, 0)
}

// Top returns up to n kept items, heaviest first (by Count, then key).
func (s *Sketch) Top(n int) []Item {
	out := make([]Item, 0, len(s.items))
	for _, e := range s.items {
		out = append(out, e.Item)
	}
	slices.SortFunc(out, func(a, b Item) int {
		if a.Count != b.Count {
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	return out[:min(n, len(out))]
}

// Merge adds o's items to s, so that s sketches both streams: each kept
// item of o is added with its count and carries its error. (A sketch's
// counts sum to its total, so nothing of o's weight is lost.) The bounds
// hold for the merged stream with N the sum of both totals
// (Agarwal et al., "Mergeable summaries", 2012).
func (s *Sketch) Merge(o *Sketch) {
	for _, it := range o.Top(o.k) {
		s.Add(it.Key, it.Count)
		s.items[it.Key].Error += it.Error
	}
}

// minHeap orders entries by Count, smallest first.
type minHeap []*entry

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return h[i].Count < h[j].Count }
func (h minHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *minHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *minHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// Get returns key's kept item, and false if the sketch does not keep key
// (its weight is then at most the smallest kept count).
func (s *Sketch) Get(key string) (Item, bool) {
	e, ok := s.items[key]
	if !ok {
		return Item{}, false
	}
	return e.Item, true
}
