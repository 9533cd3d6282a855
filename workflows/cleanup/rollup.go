package cleanup

import (
	restate "github.com/restatedev/sdk-go"

	"fmt"
	"time"

	"github.com/unkeyed/ratelimit/db"
	"github.com/unkeyed/ratelimit/services/analytics"
)

// Analytics roll-ups: each run recomputes, from the finer buckets, the
// hours and days that ended a while ago (late flushes have landed) and
// recently (the minutes and hours they are made of are still kept), so a
// run missed, or one that saw a late flush, is made good by the next.
const (
	hourSettle      = 5 * time.Minute // an hour is rolled up this long after it ended
	hoursRecomputed = 3
	daySettle       = time.Hour
	daysRecomputed  = 2
	// topPerBucket is how many identifiers of a namespace an hour or a
	// day keeps.
	topPerBucket = 100
)

// rollUp rolls minutes up into hours and hours into days, each bucket in
// durable steps that write the same however often they run.
func (c *Cleanup) rollUp(ctx restate.ObjectContext, now int64) error {
	type level struct {
		coarse, fine analytics.Granularity
		settle       time.Duration
		count        int
	}
	for _, l := range []level{{analytics.Hour, analytics.Minute, hourSettle, hoursRecomputed},
		{analytics.Day, analytics.Hour, daySettle, daysRecomputed}} {
		size := l.coarse.Duration().Milliseconds()
		last := (now-l.settle.Milliseconds())/size*size - size // the latest bucket that ended settle ago
		for i := range l.count {
			bucket := last - int64(i)*size
			coarse, fine := uint8(l.coarse), uint8(l.fine)
			if _, err := restate.Run(ctx, func(rc restate.RunContext) (restate.Void, error) {
				return restate.Void{}, c.store.AnalyticsRollup(rc, db.AnalyticsRollupParams{Coarse: coarse, Bucket: bucket,
					Fine: fine, BucketEnd: bucket + size})
			}, restate.WithName(fmt.Sprintf("roll up the %s of %d", l.coarse, bucket))); err != nil {
				return err
			}
			if _, err := restate.Run(ctx, func(rc restate.RunContext) (restate.Void, error) {
				if err := c.store.AnalyticsTopClear(rc, db.AnalyticsTopClearParams{Granularity: coarse, Bucket: bucket}); err != nil {
					return restate.Void{}, err
				}
				return restate.Void{}, c.store.AnalyticsTopRollup(rc, coarse, fine, bucket, bucket+size, topPerBucket)
			}, restate.WithName(fmt.Sprintf("roll up the identifiers of the %s of %d", l.coarse, bucket))); err != nil {
				return err
			}
		}
	}
	return nil
}
