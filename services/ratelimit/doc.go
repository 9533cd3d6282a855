// Package ratelimit decides whether a caller may spend cost units of a limit
// per duration, from local memory, in well under a microsecond.
//
// Each process keeps fixed window cells in memory and evaluates the current
// and the previous cell as a sliding window. For server time t in
// milliseconds and a window of d milliseconds:
//
//	seq       = t / d
//	elapsed   = (t - seq*d) / d
//	effective = (cur + curGlobal) + trunc((prev + prevGlobal) * (1 - elapsed)) + cost
//	success   = cost <= limit && effective <= limit
//
// cur and prev are this region's counts for cells seq and seq-1; curGlobal and
// prevGlobal are the counts imported from other regions. A successful request
// adds cost to cur by compare-and-swap, so concurrent requests in one process
// never admit more than the limit.
//
// The request path never waits on the network for a warm counter, except
// that a key near or over its limit (strict) reads the regional origin first,
// at most once per short interval and at most 300 ms. Shared
// stores (a regional [Origin], a [GlobalStore]) are convergence accelerators
// that plug in behind small interfaces; without them a [Service] is an exact
// single-process limiter.
//
// A [Service] starts no goroutines of its own: call [Service.Run] to run its
// background loops (the janitor that evicts cells which can no longer affect a
// decision, and with the stores configured the replay and refresh loop of the
// regional origin and the flush and sync loop of the global counters), and
// cancel its context to stop them: it replays and flushes once more before it
// returns.
package ratelimit
