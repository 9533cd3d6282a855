package store

import (
	"math/rand/v2"
	"testing"
)

// TestMergeIsASemilattice: merging blocks in any order, any number of
// times, gives one state: the latest block and the latest clearance.
func TestMergeIsASemilattice(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		blocks := make([]Block, 1+rng.IntN(6))
		for i := range blocks {
			start := rng.Int64N(100)
			blocks[i] = Block{Start: start, Until: start + 1 + rng.Int64N(50), Cleared: rng.Int64N(100)}
		}
		var want Block
		for _, b := range blocks {
			want = Merge(want, b)
		}
		var got Block
		for range 3 * len(blocks) {
			got = Merge(got, blocks[rng.IntN(len(blocks))])
		}
		for _, b := range blocks {
			got = Merge(b, got)
		}
		if got != want {
			t.Fatalf("merging %v in another order: %+v, want %+v", blocks, got, want)
		}
		for _, b := range blocks {
			if Later(b, got) {
				t.Fatalf("the merge %+v lost the later %+v", got, b)
			}
		}
	}
}

func TestInForce(t *testing.T) {
	b := Block{Start: 10, Until: 20}
	for now, want := range map[int64]bool{9: false, 10: true, 19: true, 20: false} {
		if b.InForce(now) != want {
			t.Errorf("InForce(%d) = %v", now, !want)
		}
	}
	if b.Expires() != 30 {
		t.Errorf("Expires = %d, want 30", b.Expires())
	}
	lift := Block{Cleared: 12}
	if got := Merge(b, lift); got.InForce(15) || got.Cleared != 12 {
		t.Errorf("a block after a lift: %+v", got)
	}
	after := Block{Start: 13, Until: 14}
	if got := Merge(Merge(b, lift), after); !got.InForce(13) || got.Until != 14 {
		t.Errorf("a block started after the lift, shorter than the lifted one, by a process that had not read the lift: %+v", got)
	}
	if got := Merge(Merge(after, b), lift); !got.InForce(13) {
		t.Errorf("the same, merged in another order: %+v", got)
	}
}
