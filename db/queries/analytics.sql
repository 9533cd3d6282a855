-- name: AnalyticsSeries :many
-- AnalyticsSeries returns a namespace's buckets of one granularity in
-- [from, to) (unix ms).
SELECT bucket, passed, denied, shadow_denied FROM ratelimit_analytics
WHERE workspace_id = ? AND namespace = ? AND granularity = ? AND bucket >= sqlc.arg(from_ms) AND bucket < sqlc.arg(to_ms)
ORDER BY bucket;

-- name: AnalyticsTop :many
-- AnalyticsTop sums a namespace's named identifiers over the buckets of one
-- granularity in [from, to) and returns the most denied, then the most
-- shadow-denied, then the busiest.
SELECT identifier, CAST(SUM(passed) AS SIGNED) AS passed, CAST(SUM(denied) AS SIGNED) AS denied,
    CAST(SUM(shadow_denied) AS SIGNED) AS shadow_denied
FROM ratelimit_analytics_top
WHERE workspace_id = ? AND namespace = ? AND granularity = ? AND bucket >= sqlc.arg(from_ms) AND bucket < sqlc.arg(to_ms)
GROUP BY identifier
ORDER BY SUM(denied) DESC, SUM(shadow_denied) DESC, SUM(passed) DESC, identifier
LIMIT ?;

-- name: AnalyticsRollup :exec
-- AnalyticsRollup replaces the counts of the coarser bucket that starts at
-- bucket (granularity coarse) by the sum of the finer buckets (granularity
-- fine) in [bucket, bucket_end): run again, it writes the same.
INSERT INTO ratelimit_analytics (workspace_id, namespace, granularity, bucket, passed, denied, shadow_denied)
SELECT src.workspace_id, src.namespace, sqlc.arg(coarse), sqlc.arg(bucket), SUM(src.passed), SUM(src.denied), SUM(src.shadow_denied)
FROM ratelimit_analytics src
WHERE src.granularity = sqlc.arg(fine) AND src.bucket >= sqlc.arg(bucket) AND src.bucket < sqlc.arg(bucket_end)
GROUP BY src.workspace_id, src.namespace
ON DUPLICATE KEY UPDATE passed = VALUES(passed), denied = VALUES(denied), shadow_denied = VALUES(shadow_denied);

-- name: AnalyticsTopClear :exec
-- AnalyticsTopClear deletes the named identifiers of one coarse bucket,
-- before AnalyticsTopRollup writes them again.
DELETE FROM ratelimit_analytics_top WHERE granularity = ? AND bucket = ?;

-- name: AnalyticsPurge :execrows
-- AnalyticsPurge deletes up to limit buckets of a granularity that start
-- before cutoff (unix ms).
DELETE FROM ratelimit_analytics WHERE granularity = ? AND bucket < sqlc.arg(cutoff) LIMIT ?;

-- name: AnalyticsTopPurge :execrows
-- AnalyticsTopPurge deletes up to limit named identifiers of a granularity
-- whose bucket starts before cutoff (unix ms).
DELETE FROM ratelimit_analytics_top WHERE granularity = ? AND bucket < sqlc.arg(cutoff) LIMIT ?;

-- name: ProcessSeen :exec
-- ProcessSeen records a process's roll call, at the database's time.
INSERT INTO ratelimit_processes (process_id, region, seen_at, last_sync_at, redis_nodes, flush_interval_ms)
VALUES (?, ?, FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000), ?, ?, ?)
ON DUPLICATE KEY UPDATE region = VALUES(region), seen_at = VALUES(seen_at),
    last_sync_at = VALUES(last_sync_at), redis_nodes = VALUES(redis_nodes),
    flush_interval_ms = VALUES(flush_interval_ms);

-- name: ProcessesSeenSince :many
-- ProcessesSeenSince returns the processes seen at or after since (unix ms
-- by the database's clock), with the database's time now.
SELECT process_id, region, seen_at, last_sync_at, redis_nodes, flush_interval_ms,
    CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED) AS now_ms
FROM ratelimit_processes WHERE seen_at >= ? ORDER BY region, process_id;

-- name: ProcessesPurge :execrows
-- ProcessesPurge deletes the processes not seen since cutoff (unix ms).
DELETE FROM ratelimit_processes WHERE seen_at < ?;

-- name: AnalyticsNamespaces :many
-- AnalyticsNamespaces returns a workspace's namespaces with decisions in
-- the buckets of one granularity in [from, to), with their totals, the
-- most denied first.
SELECT namespace, CAST(SUM(passed) AS SIGNED) AS passed, CAST(SUM(denied) AS SIGNED) AS denied,
    CAST(SUM(shadow_denied) AS SIGNED) AS shadow_denied
FROM ratelimit_analytics
WHERE workspace_id = ? AND granularity = ? AND bucket >= sqlc.arg(from_ms) AND bucket < sqlc.arg(to_ms)
GROUP BY namespace
ORDER BY SUM(denied) DESC, SUM(shadow_denied) DESC, SUM(passed) DESC, namespace
LIMIT ?;

-- name: AnalyticsBatchClaim :execrows
-- AnalyticsBatchClaim records batch id as added at created_at (unix ms):
-- one row affected the first time, none when it was added before.
INSERT IGNORE INTO ratelimit_analytics_batches (id, created_at) VALUES (?, ?);

-- name: AnalyticsBatchesPurge :exec
-- AnalyticsBatchesPurge deletes up to limit batch ids recorded before
-- cutoff (unix ms).
DELETE FROM ratelimit_analytics_batches WHERE created_at < sqlc.arg(cutoff) LIMIT ?;
