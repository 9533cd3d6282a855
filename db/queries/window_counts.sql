-- name: WindowCountsUpsert :exec
-- WindowCountsUpsert publishes one region's count and refunds for one
-- window cell. The GREATEST merge of each makes it idempotent and monotonic:
-- a delayed, older publish never lowers a component, and a publish of the
-- count alone (refunded 0) or of the refunds alone (count 0) leaves the other.
-- A publish that does not know the limit (0) leaves the one the row holds.
-- expires_at keeps the earliest any writer gave: every writer of one
-- version computes the same, and one of a version before calendar windows
-- computed none that a cleanup would ever reach. updated_at is the database's clock in unix ms
-- (NOW is the statement's start), never the writer's: a sync's since is the
-- database's clock too, so regions whose clocks disagree still see each
-- other's changes.
INSERT INTO ratelimit_window_counts (
    workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at, window_limit, refunded
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000), ?, ?)
ON DUPLICATE KEY UPDATE
    count = GREATEST(count, VALUES(count)),
    expires_at = LEAST(expires_at, VALUES(expires_at)),
    refunded = GREATEST(refunded, VALUES(refunded)),
    updated_at = VALUES(updated_at),
    window_limit = IF(VALUES(window_limit) = 0, window_limit, VALUES(window_limit));

-- name: WindowCountsNow :one
-- WindowCountsNow returns the database's clock in unix ms, as updated_at
-- holds it: where the next incremental sync starts after a full one.
SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED) AS now_ms;

-- name: WindowCountsSync :many
-- WindowCountsSync returns, per live window cell, the own region's count and
-- the sum of every other region's count, separately: the own row may only
-- raise the regional count, the foreign sum becomes the imported count.
-- imported_limit is the largest limit another region published with.
-- own_refunded and imported_refunded are the same split of the refunds.
SELECT
    workspace_id,
    namespace,
    identifier,
    duration_ms,
    sequence,
    CAST(SUM(CASE WHEN region = sqlc.arg(region) THEN count ELSE 0 END) AS SIGNED) AS own,
    CAST(SUM(CASE WHEN region <> sqlc.arg(region) THEN count ELSE 0 END) AS SIGNED) AS imported,
    CAST(MAX(CASE WHEN region <> sqlc.arg(region) THEN window_limit ELSE 0 END) AS SIGNED) AS imported_limit,
    CAST(SUM(CASE WHEN region = sqlc.arg(region) THEN refunded ELSE 0 END) AS SIGNED) AS own_refunded,
    CAST(SUM(CASE WHEN region <> sqlc.arg(region) THEN refunded ELSE 0 END) AS SIGNED) AS imported_refunded
FROM ratelimit_window_counts
WHERE expires_at > sqlc.arg(now)
GROUP BY workspace_id, namespace, identifier, duration_ms, sequence;

-- name: WindowCountsChangedCount :one
-- WindowCountsChangedCount counts the rows changed at or after since (unix
-- ms by the database's clock), expired ones included, from updated_at_idx
-- alone: how an incremental sync chooses between reading the changed cells
-- and reading everything, and how an idle one ends after one cheap
-- statement. now_ms is the database's clock when it ran: where the next
-- sync starts.
SELECT
    COUNT(*) AS changed,
    CAST(FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000) AS SIGNED) AS now_ms
FROM ratelimit_window_counts FORCE INDEX (updated_at_idx)
WHERE updated_at >= sqlc.arg(since);

-- name: WindowCountsSyncChanged :many
-- WindowCountsSyncChanged is WindowCountsSync for the cells of which any
-- row changed at or after since (unix ms). The inner query walks
-- updated_at_idx (forced: to skip the sort DISTINCT needs, the optimizer
-- would rather scan all of lookup_idx) into a temporary table of the changed
-- cells; the outer one then looks up every region's row of each through
-- unique_window_region. Both the join order and the index are forced: left
-- to itself, MariaDB 10.11 probes the unindexed temporary table once per row
-- of the table past a few thousand changed cells (36 s for 12,000 of 24,000
-- where this takes 0.14 s). About 11 µs a changed cell against 2 µs a cell
-- for WindowCountsSync, so past a fifth or so of the table changed, reading
-- everything is cheaper.
SELECT
    c.workspace_id,
    c.namespace,
    c.identifier,
    c.duration_ms,
    c.sequence,
    CAST(SUM(CASE WHEN c.region = sqlc.arg(region) THEN c.count ELSE 0 END) AS SIGNED) AS own,
    CAST(SUM(CASE WHEN c.region <> sqlc.arg(region) THEN c.count ELSE 0 END) AS SIGNED) AS imported,
    CAST(MAX(CASE WHEN c.region <> sqlc.arg(region) THEN c.window_limit ELSE 0 END) AS SIGNED) AS imported_limit,
    CAST(SUM(CASE WHEN c.region = sqlc.arg(region) THEN c.refunded ELSE 0 END) AS SIGNED) AS own_refunded,
    CAST(SUM(CASE WHEN c.region <> sqlc.arg(region) THEN c.refunded ELSE 0 END) AS SIGNED) AS imported_refunded
FROM (
    SELECT DISTINCT u.workspace_id, u.namespace, u.identifier, u.duration_ms, u.sequence
    FROM ratelimit_window_counts u FORCE INDEX (updated_at_idx)
    WHERE u.updated_at >= sqlc.arg(since) AND u.expires_at > sqlc.arg(now)
) changed
STRAIGHT_JOIN ratelimit_window_counts c FORCE INDEX (unique_window_region)
    ON c.workspace_id = changed.workspace_id
    AND c.namespace = changed.namespace
    AND c.identifier = changed.identifier
    AND c.duration_ms = changed.duration_ms
    AND c.sequence = changed.sequence
GROUP BY c.workspace_id, c.namespace, c.identifier, c.duration_ms, c.sequence;

-- name: WindowCountsExpiredBatch :one
-- WindowCountsExpiredBatch counts the first limit rows, by primary key,
-- that expired before cutoff, and returns the last one's key: the batch
-- WindowCountsDeleteBatch deletes. The count is what the batch deletes,
-- however often the delete runs (a run repeated after a crash deletes
-- nothing more), since no row below the last key can expire later with
-- the same cutoff. Run batches until one counts fewer than limit rows.
SELECT CAST(COUNT(*) AS SIGNED) AS rows_in_batch, CAST(COALESCE(MAX(pk), 0) AS UNSIGNED) AS last_pk
FROM (
    SELECT pk FROM ratelimit_window_counts
    WHERE expires_at < sqlc.arg(cutoff)
    ORDER BY pk
    LIMIT ?
) batch;

-- name: WindowCountsDeleteBatch :execrows
-- WindowCountsDeleteBatch deletes the batch WindowCountsExpiredBatch
-- counted: the rows that expired before cutoff up to its last key.
DELETE FROM ratelimit_window_counts
WHERE pk <= sqlc.arg(last_pk) AND expires_at < sqlc.arg(cutoff);
