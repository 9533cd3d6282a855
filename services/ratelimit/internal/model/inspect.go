package model

import "github.com/unkeyed/ratelimit/services/ratelimit/internal/cells"

// What the limiter's tests read and do to the models' state beside the
// windows: a rival decision's take, a bucket that owes, the sizes of the
// maps the janitor must empty.

// BucketCounts returns how many windows hold a token bucket, and of how
// many identities.
func (t *Table) BucketCounts() (windows, identities int) {
	return t.buckets.Size(), t.bucketIDs.Size()
}

// TakeTokens takes n tokens from w's bucket, if it has one, as if they
// arrived at atNs (unix ns): what another decision's admission does.
func (t *Table) TakeTokens(w *cells.Window, n, atNs int64) {
	if b, ok := t.buckets.Load(w); ok {
		b.take(n, atNs)
	}
}

// OweUntil makes w's bucket of sp, made at now (unix ms) if w has none,
// owe tokens until untilNs (unix ns).
func (t *Table) OweUntil(w *cells.Window, sp Spec, now, untilNs int64) {
	b, _ := t.bucketOf(w, sp, now)
	b.tat.Store(untilNs)
}

// ZoneCounts returns how many identities the table holds calendar
// windows of in several time zones, and how many groups of zones.
func (t *Table) ZoneCounts() (multi int64, groups int) {
	return t.zones.multi.Load(), t.zones.groups.Size()
}
