package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/puzpuzpuz/xsync/v4"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"golang.org/x/time/rate"

	"github.com/unkeyed/ratelimit/services/ratelimit/store"
)

// Tuning of the per-node circuit breakers.
const (
	// breakerFailures consecutive failed calls to a node open its breaker;
	// while open, the node's keys are answered as unavailable without a
	// round trip, and after breakerOpenFor one call probes it again.
	breakerFailures = 5
	breakerOpenFor  = time.Second
	// reloadEvery bounds how often trouble with a node makes a cluster
	// client reload its slot map: about as often as a failover can
	// complete, so that once a replica has taken over, the keys of its
	// slots reach it within a second, but never a CLUSTER SLOTS a call.
	reloadEvery = 500 * time.Millisecond
	// logEvery bounds how often one node's breaker opening is logged: a
	// dead node's breaker opens again after every failed probe, once a
	// second.
	logEvery = 10 * time.Second
	// forgetAfter is how long a node no key was routed to keeps its
	// breaker and metric: after a failover the old master serves no slot,
	// and its open breaker must not read as an outage forever.
	forgetAfter = time.Minute
)

// node is one Redis server the store sends commands to, with its circuit
// breaker.
type node struct {
	addr    string
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	// lastErr is the latest failure of a call to the node: what the log
	// says when its breaker opens.
	lastErr atomic.Pointer[string]
	// used is when a key was last routed to the node, in unix ns.
	used atomic.Int64
	// openLog rate-limits the log of the breaker opening; suppressed counts
	// the openings it left out.
	openLog    rate.Sometimes
	suppressed atomic.Int64
}

// nodes holds the breakers of the store's nodes: one for a single server,
// one per master a key was routed to for a cluster. Accounting for failures
// per node is what keeps one master's trouble with its own keys: the keys
// of the healthy masters keep converging while a dead one's are decided
// locally.
type nodes struct {
	byAddr *xsync.Map[string, *node]
	logger *slog.Logger
	state  *prometheus.GaugeVec
	// reload asks a cluster client to refresh its slot map; nil for one
	// server.
	reload     func()
	lastReload atomic.Int64 // unix ns
	lastSweep  atomic.Int64 // unix ns
}

func newNodes(logger *slog.Logger, state *prometheus.GaugeVec, reload func()) *nodes {
	return &nodes{byAddr: xsync.NewMap[string, *node](), logger: logger, state: state, reload: reload}
}

// get returns the node at addr, creating it (breaker closed) on first use.
func (ns *nodes) get(addr string) *node {
	n, _ := ns.byAddr.LoadOrCompute(addr, func() (*node, bool) {
		n := &node{addr: addr, openLog: rate.Sometimes{Interval: logEvery}}
		n.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
			Name:          addr,
			MaxRequests:   1,
			Timeout:       breakerOpenFor,
			ReadyToTrip:   func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= breakerFailures },
			OnStateChange: func(_ string, _, to gobreaker.State) { ns.changed(n, to) },
			// A caller that went away is not the node's fault, and a
			// reply error about one key (a value INCRBY cannot add to)
			// comes from a node that answered.
			IsExcluded:   func(err error) bool { return errors.Is(err, context.Canceled) },
			IsSuccessful: func(err error) bool { return !nodeFailure(err) },
		})
		ns.state.WithLabelValues(addr).Set(float64(gobreaker.StateClosed))
		return n, false
	})
	n.used.Store(time.Now().UnixNano())
	return n
}

// changed records a node's breaker moving to state to, and logs why it
// opened: at most once per logEvery per node, with the error of the call
// that tripped it.
func (ns *nodes) changed(n *node, to gobreaker.State) {
	ns.state.WithLabelValues(n.addr).Set(float64(to))
	switch to {
	case gobreaker.StateOpen:
		logged := false
		n.openLog.Do(func() {
			logged = true
			reason := "unknown"
			if e := n.lastErr.Load(); e != nil {
				reason = *e
			}
			ns.logger.Warn("redis node unavailable: its keys are decided locally until it answers again",
				"node", n.addr, "error", reason, "consecutive_failures", breakerFailures,
				"probe_every", breakerOpenFor, "openings_not_logged", n.suppressed.Swap(0))
		})
		if !logged {
			n.suppressed.Add(1)
		}
	case gobreaker.StateClosed:
		ns.logger.Info("redis node available again", "node", n.addr)
	}
}

// after is called at the end of every call. After one in which a node
// failed or a node's open breaker turned keys away, a cluster client
// reloads its slot map (at most once per reloadEvery), so that the slots of
// a master that failed over reach the replica that took over. Every
// forgetAfter, nodes no key went to for that long are forgotten.
func (ns *nodes) after(trouble bool) {
	now := time.Now().UnixNano()
	if last := ns.lastReload.Load(); trouble && ns.reload != nil && now-last >= int64(reloadEvery) && ns.lastReload.CompareAndSwap(last, now) {
		ns.reload()
	}
	if last := ns.lastSweep.Load(); now-last >= int64(forgetAfter) && ns.lastSweep.CompareAndSwap(last, now) {
		ns.byAddr.Range(func(addr string, n *node) bool {
			if now-n.used.Load() > int64(forgetAfter) {
				ns.byAddr.Delete(addr)
				ns.state.DeleteLabelValues(addr)
			}
			return true
		})
	}
}

// nodeFailure reports whether err says a node is unavailable, as opposed to
// a reply about one key: a network error, a timeout, or a node that is
// loading, cut off from the cluster or without a master.
func nodeFailure(err error) bool {
	if err == nil {
		return false
	}
	var reply redis.Error
	if errors.As(err, &reply) {
		msg := reply.Error()
		for _, prefix := range []string{"CLUSTERDOWN", "LOADING", "MASTERDOWN"} {
			if strings.HasPrefix(msg, prefix) {
				return true
			}
		}
		return false
	}
	return true
}

// batch is one call's keys routed to their nodes: the keys whose node's
// breaker let them through, the outcome per key, and the outcome per node
// for its breaker.
type batch struct {
	ns   *nodes
	at   []int   // per key: its entry of sends, or -1 if it was not sent
	errs []error // per key: why it failed, nil if it did not
	// sends holds one entry per node the call reaches (a handful at most).
	sends []send
}

// send is the part of a call that goes to one node.
type send struct {
	n    *node
	done func(error)
	err  error // the first failure of this node in the call
}

// route finds each key's node and asks its breaker. nodeOf returns the
// address of the node serving a key.
func (ns *nodes) route(ctx context.Context, keys []string, nodeOf func(context.Context, string) (string, error)) *batch {
	b := &batch{ns: ns, at: make([]int, len(keys)), errs: make([]error, len(keys))}
	for i, key := range keys {
		b.at[i] = -1
		addr, err := nodeOf(ctx, key)
		if err != nil {
			b.errs[i] = fmt.Errorf("find the node of %s: %w", key, err)
			continue
		}
		j := b.find(addr)
		if j < 0 {
			n := ns.get(addr)
			done, err := n.breaker.Allow()
			if err != nil {
				// Open, or half-open with its probe under way.
				b.sends = append(b.sends, send{n: n, err: fmt.Errorf("node %s: %w", addr, store.ErrUnavailable)})
			} else {
				b.sends = append(b.sends, send{n: n, done: done})
			}
			j = len(b.sends) - 1
		}
		if b.sends[j].done == nil {
			b.errs[i] = b.sends[j].err
			continue
		}
		b.at[i] = j
	}
	return b
}

// find returns the entry of sends for the node at addr, or -1.
func (b *batch) find(addr string) int {
	for j := range b.sends {
		if b.sends[j].n.addr == addr {
			return j
		}
	}
	return -1
}

// sent reports whether key i goes to its node.
func (b *batch) sent(i int) bool { return b.at[i] >= 0 }

// fail records that key i failed with err; a node failure counts against its
// node.
func (b *batch) fail(i int, err error) {
	b.errs[i] = err
	if j := b.at[i]; j >= 0 && b.sends[j].err == nil && nodeFailure(err) {
		b.sends[j].err = err
	}
}

// finish reports each node's outcome to its breaker, and returns counts (-1
// for the keys that failed) with the call's error: nil, a
// *store.PartialError when some keys failed, or the error of the first
// when all did.
func (b *batch) finish(counts []int64) ([]int64, error) {
	trouble := false
	for _, s := range b.sends {
		if s.done == nil {
			trouble = true // its open breaker turned keys away
			continue
		}
		if s.err != nil {
			msg := s.err.Error()
			s.n.lastErr.Store(&msg)
			trouble = true
		}
		s.done(s.err)
	}
	b.ns.after(trouble)
	failed := 0
	var first error
	for i, err := range b.errs {
		if err == nil {
			continue
		}
		counts[i] = -1
		failed++
		// Name a real failure rather than a refusal when there are both.
		if first == nil || errors.Is(first, store.ErrUnavailable) && !errors.Is(err, store.ErrUnavailable) {
			first = err
		}
	}
	if failed == 0 {
		return counts, nil
	}
	err := fmt.Errorf("redis: %d of %d cells failed: %w", failed, len(counts), first)
	if failed < len(counts) {
		return counts, &store.PartialError{Err: err}
	}
	return counts, err
}
