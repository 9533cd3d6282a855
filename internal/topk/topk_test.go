package topk_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/unkeyed/ratelimit/internal/topk"
)

// zipf returns n keys drawn from a Zipf distribution over m identifiers
// (s = 1.1): a few hot identifiers and a long tail, as traffic is.
func zipf(seed uint64, n, m int) []string {
	r := rand.New(rand.NewPCG(seed, seed))
	z := rand.NewZipf(r, 1.1, 1, uint64(m-1))
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user_%d", z.Uint64())
	}
	return out
}

// exact counts every key.
func exact(keys []string) map[string]uint64 {
	c := map[string]uint64{}
	for _, k := range keys {
		c[k]++
	}
	return c
}

// trueTop returns the n heaviest keys of counts.
func trueTop(counts map[string]uint64, n int) []string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int {
		if counts[a] != counts[b] {
			if counts[a] > counts[b] {
				return -1
			}
			return 1
		}
		return 0
	})
	return keys[:n]
}

// TestZipfTopTen: under Zipf-distributed identifiers (100,000 events over
// 50,000 identifiers) a sketch of 256 names the true top 10 among its top
// 20 (what the analytics answer), every kept count is within its error of
// the truth, and every identifier above N/K is kept. Over 20 seeds.
func TestZipfTopTen(t *testing.T) {
	const k, n, m = 256, 100_000, 50_000
	for seed := range uint64(20) {
		keys := zipf(seed+1, n, m)
		s := topk.New(k)
		for _, key := range keys {
			s.Add(key, 1)
		}
		counts := exact(keys)
		if s.Total() != n {
			t.Fatalf("seed %d: total %d, want %d", seed, s.Total(), n)
		}
		top := s.Top(20)
		var named []string
		for _, it := range top {
			named = append(named, it.Key)
		}
		for _, want := range trueTop(counts, 10) {
			if !slices.Contains(named, want) {
				t.Fatalf("seed %d: true top-10 %s (%d) not in the sketch's top 20 %v", seed, want, counts[want], top)
			}
		}
		for _, it := range s.Top(k) {
			if c := counts[it.Key]; it.Count < c || it.Count-it.Error > c || it.Error > n/k {
				t.Fatalf("seed %d: %s: count %d error %d, true %d (bound %d)", seed, it.Key, it.Count, it.Error, c, n/k)
			}
		}
		kept := map[string]bool{}
		for _, it := range s.Top(k) {
			kept[it.Key] = true
		}
		for key, c := range counts {
			if c > n/k && !kept[key] {
				t.Fatalf("seed %d: %s has %d > N/K and is not kept", seed, key, c)
			}
		}
	}
}

// TestMerge: two sketches of two halves, merged, name the true top 10 of
// the whole stream, within the merged bound (N/K over both halves).
func TestMerge(t *testing.T) {
	const k = 256
	keys := zipf(7, 100_000, 50_000)
	a, b := topk.New(k), topk.New(k)
	for i, key := range keys {
		if i%2 == 0 {
			a.Add(key, 1)
		} else {
			b.Add(key, 1)
		}
	}
	a.Merge(b)
	counts := exact(keys)
	top := a.Top(20)
	for _, want := range trueTop(counts, 10) {
		if !slices.ContainsFunc(top, func(it topk.Item) bool { return it.Key == want }) {
			t.Fatalf("merged: true top-10 %s (%d) not in %v", want, counts[want], top)
		}
	}
	for _, it := range a.Top(k) {
		if c := counts[it.Key]; it.Count < c || it.Count-it.Error > c {
			t.Fatalf("merged %s: count %d error %d, true %d", it.Key, it.Count, it.Error, c)
		}
	}
	if a.Total() != uint64(len(keys)) {
		t.Fatalf("merged total %d, want %d", a.Total(), len(keys))
	}
}

// TestWeights: weighted adds (a cost) count by weight, and a key is copied
// (the caller's buffer may be reused).
func TestWeights(t *testing.T) {
	s := topk.New(2)
	buf := []byte("aaaa")
	s.Add(string(buf), 5)
	buf[0] = 'z'
	s.Add("b", 3)
	s.Add("c", 1) // replaces b: error 3
	top := s.Top(3)
	if len(top) != 2 || top[0] != (topk.Item{Key: "aaaa", Count: 5}) || top[1] != (topk.Item{Key: "c", Count: 4, Error: 3}) {
		t.Fatalf("top %v", top)
	}
}

func ExampleSketch() {
	s := topk.New(3)
	for _, id := range []string{"alice", "bob", "alice", "carol", "alice", "dave", "bob"} {
		s.Add(id, 1)
	}
	for _, it := range s.Top(2) {
		fmt.Printf("%s %d (at most %d too many)\n", it.Key, it.Count, it.Error)
	}
	// Output:
	// alice 3 (at most 0 too many)
	// bob 2 (at most 1 too many)
}

func BenchmarkAdd(b *testing.B) {
	keys := zipf(1, 1<<16, 50_000)
	s := topk.New(64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		s.Add(keys[i&(1<<16-1)], 1)
		i++
	}
}
