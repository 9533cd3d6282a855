package cleanup

import (
	"time"

	restate "github.com/restatedev/sdk-go"
)

// Run is one run of a schedule, each of its deletions in bounded batches
// of durable steps (see purge.go), in this order, every cutoff by the
// database's clock read once at the start (one clock whichever worker runs
// it): the window counts that expired, then each purge of the table purges
// holds (override tombstones, audit entries, settlements), then the
// analytics roll-up (rollup.go) and the analytics past their retention
// with the roll call. A run interrupted by a crash resumes after its last
// finished step. Then it sends the next run to itself: after the interval,
// or at once when a deletion left rows waiting.
//
// The order and names of its steps are its journal: a run of an older
// worker, replayed by a newer one, must find the same steps in the same
// order. So a new deletion goes at the end of Run, after the analytics'
// purge; never into the table of purges (purge.go), whose steps come
// before the roll-up.
func (c *Cleanup) Run(ctx restate.ObjectContext, req RunRequest) error {
	chain, err := restate.Get[string](ctx, stateChain)
	if err != nil {
		return err
	}
	if chain == "" || chain != req.Chain {
		return nil // a run of a stopped or replaced chain
	}
	st, err := restate.Get[Status](ctx, stateStatus)
	if err != nil {
		return err
	}
	now, nowErr := restate.Run(ctx, func(rc restate.RunContext) (int64, error) { return c.store.WindowCountsNow(rc) },
		restate.WithName("the database's clock"))
	if nowErr != nil {
		return nowErr
	}
	deleted, batches, full, countsErr := c.deleteExpiredCounts(ctx, now)
	if countsErr != nil {
		return countsErr
	}
	st.LastRunDeleted, st.LastRunBatches = deleted, batches
	st.TotalDeleted += deleted
	for _, p := range c.purges(now) {
		n, more, purgeErr := c.purge(ctx, p.what, p.count, p.remove)
		if purgeErr != nil {
			return purgeErr
		}
		p.record(&st, n)
		full = full || more
	}
	if err := c.rollUp(ctx, now); err != nil {
		return err
	}
	analyticsPurged, moreAnalytics, analyticsErr := c.purgeAnalytics(ctx, now)
	if analyticsErr != nil {
		return analyticsErr
	}
	st.LastRunAnalyticsPurged = analyticsPurged
	st.TotalAnalyticsPurged += analyticsPurged
	// Last, as a purge added later goes: earlier steps keep their places
	// in the journals of runs in flight.
	penaltiesPurged, morePenalties, penaltiesErr := c.purgePenalties(ctx, now)
	if penaltiesErr != nil {
		return penaltiesErr
	}
	st.LastRunPenaltiesPurged = penaltiesPurged
	st.TotalPenaltiesPurged += penaltiesPurged
	delay := time.Duration(st.IntervalSeconds) * time.Second
	if full || moreAnalytics || morePenalties {
		delay = backlogDelay // more rows are waiting
	}
	st.Runs++
	st.LastRun = time.UnixMilli(now).UTC()
	st.NextRun = st.LastRun.Add(delay)
	restate.Set(ctx, stateStatus, st)
	schedule(ctx, chain, delay)
	return nil
}
