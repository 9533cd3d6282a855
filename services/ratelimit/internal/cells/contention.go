package cells

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
// decision that loses FastCASAttempts races in a row takes the key's lock
// (one of contentionStripes, chosen by the cell) and flags the cell
// contended, and a decision that finds the flag set queues on the lock
// before its first try. The holder then races only the decisions that were
// already trying when it took the lock, each of which tries at most
// FastCASAttempts times before it queues too: it is counted after a bounded
// number of lost races, and no decision is ever refused because of
// contention. Uncontended, a decision pays nothing but a test of the flag
// in the cell's word, which a window's decision loads anyway (a bucket's
// loads it for this).

// FastCASAttempts is how many races a decision loses before it takes the
// key's lock: a few is the norm on a hot key with many cores, and each
// further try costs the whole read-and-decide again.
const FastCASAttempts = 4

// contentionStripes is how many locks the contended keys of a process
// share. Two keys contended at once in the same stripe wait for each other;
// 64 keeps that rare and costs 4 KiB.
const contentionStripes = 64

// Contention holds the locks that decisions on contended keys take.
type Contention struct {
	taken   prometheus.Counter // unkey_ratelimit_contended_decisions_total
	seed    maphash.Seed
	stripes [contentionStripes]struct {
		mu sync.Mutex
		_  [64 - 8]byte // a cache line each: keys in different stripes do not contend
	}
}

// NewContention returns the locks of a process's contended keys, counting
// each decision that takes one in taken.
func NewContention(taken prometheus.Counter) *Contention {
	return &Contention{taken: taken, seed: maphash.MakeSeed()}
}

// Lock takes the lock of c's key and flags c contended, so that decisions
// arriving on it queue instead of racing the holder.
func (k *Contention) Lock(c *Cell) *sync.Mutex {
	mu := k.Stripe(c)
	k.taken.Inc()
	mu.Lock()
	c.Flags.Or(Contended)
	return mu
}

// AfterLost returns the lock a decision holds once it lost its attempt-th
// race (from 0) on c: held, or from the FastCASAttempts-th lost race on,
// the lock of c's key, taken.
func (k *Contention) AfterLost(held *sync.Mutex, c *Cell, attempt int) *sync.Mutex {
	if held == nil && attempt >= FastCASAttempts-1 {
		return k.Lock(c)
	}
	return held
}

// Stripe returns the lock of c's key, one that other keys share.
func (k *Contention) Stripe(c *Cell) *sync.Mutex {
	return &k.stripes[maphash.Comparable(k.seed, c)%contentionStripes].mu
}

// Unlock releases mu, taken by Lock for c, if a decision took it: kept
// small enough to inline, so that a decision that took no lock pays a
// test. A decision still queued on mu flags c again when it gets it.
func Unlock(mu *sync.Mutex, c *Cell) {
	if mu != nil {
		release(mu, c)
	}
}

func release(mu *sync.Mutex, c *Cell) {
	c.Flags.And(^Contended)
	mu.Unlock()
}
