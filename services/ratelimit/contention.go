package ratelimit

import (
	"hash/maphash"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// A decision counts by compare-and-swap: it reads the count (a bucket's
// instant), decides, and writes the result only if no other decision wrote
// in between; a lost race means another decision on the key was counted,
// and the loser decides again from the new value. That is lock-free (every
// lost race is someone's progress) but not starvation-free: on a key hot
// enough, with enough cores, one decision can lose every race. So a
// decision that loses fastCASAttempts races in a row takes the key's lock
// (one of contentionStripes, chosen by the cell) and flags the cell
// contended, and a decision that finds the flag set queues on the lock
// before its first try. The holder then races only the decisions that were
// already trying when it took the lock, each of which tries at most
// fastCASAttempts times before it queues too: it is counted after a bounded
// number of lost races, and no decision is ever refused because of
// contention. Uncontended, a decision pays nothing but a test of the flag
// in the cell's word, which a window's decision loads anyway (a bucket's
// loads it for this).

// fastCASAttempts is how many races a decision loses before it takes the
// key's lock: a few is the norm on a hot key with many cores, and each
// further try costs the whole read-and-decide again.
const fastCASAttempts = 4

// contentionStripes is how many locks the contended keys of a process
// share. Two keys contended at once in the same stripe wait for each other;
// 64 keeps that rare and costs 4 KiB.
const contentionStripes = 64

// contention holds the locks that decisions on contended keys take.
type contention struct {
	taken   prometheus.Counter // unkey_ratelimit_contended_decisions_total
	seed    maphash.Seed
	stripes [contentionStripes]struct {
		mu sync.Mutex
		_  [64 - 8]byte // a cache line each: keys in different stripes do not contend
	}
}

// newContention returns the locks of a process's contended keys, counting
// each decision that takes one in taken.
func newContention(taken prometheus.Counter) *contention {
	return &contention{taken: taken, seed: maphash.MakeSeed()}
}

// lock takes the lock of c's key and flags c contended, so that decisions
// arriving on it queue instead of racing the holder.
func (k *contention) lock(c *cell) *sync.Mutex {
	mu := &k.stripes[lockIndex(k, c)].mu
	k.taken.Inc()
	mu.Lock()
	c.flags.Or(cellContended)
	return mu
}

// afterLost returns the lock a decision holds once it lost its attempt-th
// race (from 0) on c: held, or from the fastCASAttempts-th lost race on,
// the lock of c's key, taken.
func (k *contention) afterLost(held *sync.Mutex, c *cell, attempt int) *sync.Mutex {
	if held == nil && attempt >= fastCASAttempts-1 {
		return k.lock(c)
	}
	return held
}

// lockIndex returns the stripe of c's key.
func lockIndex(k *contention, c *cell) uint64 {
	return maphash.Comparable(k.seed, c) % contentionStripes
}

// unlock releases mu, taken by lock for c, if a decision took it: kept
// small enough to inline, so that a decision that took no lock pays a
// test. A decision still queued on mu flags c again when it gets it.
func unlock(mu *sync.Mutex, c *cell) {
	if mu != nil {
		release(mu, c)
	}
}

func release(mu *sync.Mutex, c *cell) {
	c.flags.And(^cellContended)
	mu.Unlock()
}
