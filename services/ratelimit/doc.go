// Package ratelimit decides whether a caller may spend cost units of a limit
// per duration, from local memory, in well under a microsecond.
//
// Each process keeps fixed window cells in memory and, for a sliding window
// (the default of the models in algorithm.go), evaluates the current and
// the previous cell. For server time t in
// milliseconds and a window of d milliseconds:
//
//	seq       = t / d
//	elapsed   = (t - seq*d) / d
//	effective = (cur + curGlobal) + trunc((prev + prevGlobal) * (1 - elapsed)) + cost
//	success   = cost <= limit && effective <= limit
//
// cur and prev are this region's counts for cells seq and seq-1;
// curGlobal and prevGlobal are the counts imported from other regions. A
// sliding window adds to cur + curGlobal what requests that wait booked
// into cell seq+1, every region's (see Request.MaxWait). A successful request adds cost to cur by
// compare-and-swap, so concurrent requests in one process
// never admit more than the limit, and, after a few races lost, under the
// key's lock, so that contention never refuses one (see cells.Contention).
//
// The request path never waits on the network for a warm counter, except
// that a key near or over its limit (strict) reads the regional store first,
// at most once per short interval. A cold cell, and a key whose copy of the
// region's counts has aged past a second, wait for one read too; every such
// wait lasts at most store.RequestTimeout, and never happens without a
// regional store. The
// stores that share counts (package store: a regional one, a global one)
// are convergence accelerators that plug in behind small interfaces; without
// them a [Service] is an exact single-process limiter.
//
// A [Service] starts no goroutines of its own: call [Service.Run] to run its
// background loops (the janitor that evicts windows which can no longer
// affect a decision, and with the stores configured the regional tier's
// replay and refresh loop and the global tier's flush and sync loops), and
// cancel its context to stop them: it replays and flushes once more before it
// returns.
//
// # Glossary
//
// One name per thing, in the code, the metrics' help and the docs:
//
//   - key: workspace, namespace, identifier and period: what one limit
//     counts (cells.Key).
//   - period: what a window's cells are, a value of package
//     internal/period (a length, a calendar, a token bucket's cells, the
//     tokens given back to a bucket, a concurrency limit's pool cell) with
//     each kind's arithmetic. The
//     stores name it by a number where a length would be; only
//     period.FromCode and Period.Code cross between the two.
//   - window: the window of one key, held in memory: its two most
//     recent cells, and one made ahead of its window for requests
//     booked into it (cells.Window), all of them in the service's cell
//     table (cells.Table), beside what the models keep of some
//     (model.Table) and what the regional tier writes of them.
//   - cell: one fixed window of one key: store.CellKey names it, cells.Cell holds
//     its counts in memory (this region's, the other regions', what is
//     still to replay).
//   - regional tier: the processes of one region sharing counts through the
//     regional store (store.Regional: Redis). Replay sends accepted
//     increments to it; refresh and hydrate read from it (hydrate: the first
//     read of a cold cell). Its Prometheus metrics keep their first name,
//     unkey_ratelimit_origin_*, so that dashboards keep working.
//   - global tier: the regions sharing counts through the global store
//     (store.Global: MySQL, a grow-only counter). Flush publishes this
//     region's counts to it; sync imports the other regions' counts.
//   - strict: a key that denied, or admitted leaving little of its limit,
//     within its last duration: it reads the regional store before deciding.
//   - floor: the share of a limit a region must have used in a cell before
//     it publishes it to the global store: the presence floor (a twentieth)
//     for windows of a minute or more, the utilization floor (half) for
//     shorter ones and for anything beyond a presence no other region
//     shares.
//   - prompt and full flush: a prompt flush publishes the cells requests
//     queued since the last one (those past their floor or grown by a flush
//     step); a full flush walks every window and publishes any growth.
//   - speculative and committed: a batch counts its entries speculatively
//     and commits them only if all admit; stores never see speculative
//     counts.
//
// # Where a change belongs
//
// This package is the limiter's public surface: requests and answers,
// the Service and its options, the validator, the errors, the metrics,
// and the routes of a decision, a batch, an acquisition and a give-back.
// What decides sits in rooms under internal/, each importing only the
// rooms below it: period (what a window's cells are), cells (the cell
// table, which knows no model and no tier), pool (a concurrency limit's
// pools, which answers whether a window is a pool's), regional and
// global (the tiers, which ask the models through small interfaces and
// the pool room, never a period's kind themselves), and model (the models and
// the table they decide in, which tell the tiers what they counted).
//
// A new store implements store.Regional or store.Global in a package of its
// own (as redisstore and mysqlstore do) and runs the contract suite of
// package storetest. A flush or sync schedule is the global tier's
// (internal/global; its defaults and options, tiers.go); how the processes of a region share counts, and
// take a concurrency limit's slots, is the regional tier's
// (internal/regional). The decision maths are each model's Count
// (internal/model: the windows' in window.go, with the sliding weight and
// the retry time in sliding.go; the token bucket's in bucket.go; a
// concurrency limit's Table.DecidePool in pool.go, or with Redis the
// regional tier's atomic take) over the
// window and its cells; an all-or-nothing MultiLimit's speculative counts
// are the cell table's batch protocol (cells.Window.ApplySpeculative).
// The stores hold fixed window cells and nothing else: a counter per key and
// sequence, summed with max or add. Every model decides from that shape:
// the windows: the sliding window above, the fixed window (the current
// cell alone) and the calendar window (cells that are a time zone's days,
// weeks, months or years: package calendar; what one zone's period
// counted is carried into another zone's: model's zones.go); the token
// bucket, whose one instant of state per identity the tiers feed with
// what they see counted elsewhere (they ask it to raise a count: see
// model.Table.Raise), and the concurrency limit, whose slots are counted
// in the cell of their expiry on a grid fitted to their lease, a window a
// cell, summed over the pool. A new model whose state derives from
// admitted counts per period is a new model.Model (Prepare, Count,
// TakeBack), registered in modelOf (model.go) with an Algorithm and its
// period in keyOf, not new stores. What a limit's identity is and what
// its parameters are is settled there: a window's length, a calendar's
// unit, a bucket's identity and a concurrency limit's name the state; a
// limit, a burst, a rate, a zone and a slot's lease change it and carry
// it over. The map of the whole repository is docs/ARCHITECTURE.md.
// Refunds reach the regional store as totals per process (see
// model.Table.WrittenAsTotals), so that a write applied twice gives back
// once; counts may be counted twice, which errs strict.
package ratelimit
