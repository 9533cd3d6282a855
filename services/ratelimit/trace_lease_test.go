package ratelimit

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// Seeded random traces of a concurrency limit against a semaphore with
// per-lease expiry written here: a slot is held from its acquisition until
// its release or its lease's end, whichever comes first; an extension
// holds it for a lease from then. Each holder picks its own lease, and a
// new one when it extends: one limit is one pool whatever the leases.
// Holders acquire, release (at any process of any region, as a load
// balancer sends them), extend, and crash (never release: the lease frees
// the slot). An acquisition is judged by the semaphore as it stands after
// everything the limiter did before it; an
// over-admission is one the semaphore refuses even granting the limiter
// what other processes acquired within the deployment's convergence lag
// (which it cannot have seen), an over-denial one it admits outright. The
// limiter holds a slot up to a second, or a tenth of its lease, past the
// lease's end (see [Concurrency]), so some over-denial is expected;
// over-admission is not.

// leaseHolder is a slot a trace's caller holds.
type leaseHolder struct {
	slot Slot
	// expires is when the semaphore frees the slot, in unix ms.
	expires int64
}

// leaseTrace runs one trace of n operations on one concurrency limit in
// deployment d.
func leaseTrace(t testing.TB, seed uint64, n int, d traceDeployment) traceCount {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(seed, uint64(d.procs)<<8|uint64(d.regions)))
	start := int64(1_700_000_000_000) + rng.Int64N(1<<40)
	clock := newFakeClock(start)
	ps, ticks, globals, region := d.start(t, clock, rng)
	loops := traceLoops{ticks: ticks, globals: globals, lastTick: start, lastGlobal: start}
	leases := []time.Duration{time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 25 * time.Second, time.Minute}
	// The leases holders of this trace choose from: one, or several.
	leases = leases[rng.IntN(len(leases)):]
	leases = leases[:1+rng.IntN(len(leases))]
	mean := leases[0] + (leases[len(leases)-1]-leases[0])/2
	limit := 1 + rng.Int64N(20)
	var holders []leaseHolder
	var recent []traceAdmission // admissions within the longest lag
	var c traceCount
	elapsed := 0.0
	for range n {
		elapsed += float64(mean.Milliseconds()) / float64(limit) / 4 * 2 * rng.Float64()
		lease := leases[rng.IntN(len(leases))]
		clock.Set(start + int64(elapsed))
		now := clock.ms.Load()
		loops.until(now)
		// The semaphore frees what expired; its holders know their leases
		// ran out and neither release nor extend them.
		live := holders[:0]
		held := int64(0)
		for _, h := range holders {
			if h.expires > now {
				live = append(live, h)
				held += h.slot.Cost
			}
		}
		holders = live
		recent = d.trimRecent(recent, now)
		proc := rng.IntN(len(ps))
		switch op := rng.IntN(20); {
		case op < 5 && len(holders) > 0:
			// A release, at the holder's process or anywhere.
			i := rng.IntN(len(holders))
			if _, err := ps[proc].Release(ctx, holders[i].slot); err != nil {
				t.Fatal(err)
			}
			holders = append(holders[:i], holders[i+1:]...)
		case op < 7 && len(holders) > 0:
			// An extension: a lease from now, maybe another.
			i := rng.IntN(len(holders))
			resp, err := ps[proc].Extend(ctx, holders[i].slot, lease)
			if err != nil {
				t.Fatal(err)
			}
			if !resp.Success {
				c.overDenied++ // a held slot, refused its extension
				holders = append(holders[:i], holders[i+1:]...)
				continue
			}
			holders[i].slot.Lease, holders[i].slot.Sequence = lease, LeaseCell(resp, lease)
			holders[i].expires = now + lease.Milliseconds()
			recent = append(recent, traceAdmission{at: now, proc: proc, cost: holders[i].slot.Cost})
		case op < 8 && len(holders) > 0:
			// A holder crashes: its slot is freed by its lease alone.
			i := rng.IntN(len(holders))
			holders = append(holders[:i], holders[i+1:]...)
		default:
			a := Acquisition{Workspace: "ws", Namespace: "ns", Identifier: "pool", Limit: limit, Lease: lease,
				Cost: traceCost(rng, limit)}
			// Slots are taken in the store, at once (a take that fails
			// makes the key strict): no copy's age to allow.
			unseen := d.unseen(recent, region, proc, now, 0)
			resp, err := ps[proc].Acquire(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			c.requests++
			switch {
			case resp.Success && held+a.Cost > limit+unseen:
				c.overAdmitted++
				c.overTokens += float64(min(held+a.Cost-limit-unseen, a.Cost))
			case !resp.Success && held+a.Cost <= limit:
				c.overDenied++
			}
			if resp.Success {
				c.admitted++
				c.tokens += a.Cost
				holders = append(holders, leaseHolder{expires: now + lease.Milliseconds(), slot: Slot{
					Workspace: a.Workspace, Namespace: a.Namespace, Identifier: a.Identifier, Limit: limit,
					Lease: lease, Sequence: LeaseCell(resp, lease), Cost: a.Cost}})
				if len(ps) > 1 {
					recent = append(recent, traceAdmission{at: now, proc: proc, cost: a.Cost})
				}
			}
		}
	}
	return c
}

// leaseDeployments are where the lease traces run, by name.
var leaseDeployments = []namedDeployment{
	{"one process", traceDeployment{procs: 1}},
	{"two processes, one regional store (in memory)", traceDeployment{procs: 2}},
	{"two processes, 1 regional write in 10 lost, late or twice", traceDeployment{procs: 2, faultEvery: 10}},
	{"two regions of two processes, global store (in memory)", traceDeployment{procs: 2, regions: 2}},
	{"two regions of two processes, 1 regional write in 10 faulted", traceDeployment{procs: 2, regions: 2, faultEvery: 10}},
}

// TestLeaseTraces: acquisitions, releases at any process, extensions and
// crashed holders of one concurrency limit, against a semaphore with
// per-lease expiry, in one process, in two processes of a region over a
// regional store that loses, delays and doubles writes, and in two regions
// of two processes each. Nothing is admitted past the semaphore beyond
// what the deployment's convergence lag allows.
func TestLeaseTraces(t *testing.T) {
	runTraces(t, leaseDeployments, 4, 0, func(seed uint64, d traceDeployment) traceCount {
		return leaseTrace(t, seed, *traceBudget/4, d)
	})
}

// TestLeaseTracesOnRealServers: the lease traces on two processes over a
// real Redis, with faults at the store seam, and on two regions of two
// processes, each region on its own Redis, over a real MariaDB. A short
// budget: each request is a round trip or more (make accuracy runs long
// ones).
func TestLeaseTracesOnRealServers(t *testing.T) {
	runTraces(t, realDeployments(t), 2, 0, func(seed uint64, d traceDeployment) traceCount {
		return leaseTrace(t, seed, *traceBudget/40, d)
	})
}
