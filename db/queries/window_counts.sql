-- name: WindowCountsUpsert :exec
-- WindowCountsUpsert publishes one region's count for one window cell. The
-- GREATEST merge makes it idempotent and monotonic: a delayed, older publish
-- never lowers the component.
INSERT INTO ratelimit_window_counts (
    workspace_id, namespace, identifier, duration_ms, sequence, region, count, expires_at, updated_at
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON DUPLICATE KEY UPDATE
    count = GREATEST(count, VALUES(count)),
    updated_at = VALUES(updated_at);

-- name: WindowCountsSync :many
-- WindowCountsSync returns, per live window cell, the own region's count and
-- the sum of every other region's count, separately: the own row may only
-- raise the regional count, the foreign sum becomes the imported count.
SELECT
    workspace_id,
    namespace,
    identifier,
    duration_ms,
    sequence,
    CAST(SUM(CASE WHEN region = sqlc.arg(region) THEN count ELSE 0 END) AS SIGNED) AS own,
    CAST(SUM(CASE WHEN region <> sqlc.arg(region) THEN count ELSE 0 END) AS SIGNED) AS imported
FROM ratelimit_window_counts
WHERE expires_at > sqlc.arg(now)
GROUP BY workspace_id, namespace, identifier, duration_ms, sequence;

-- name: WindowCountsDeleteExpired :execrows
-- WindowCountsDeleteExpired deletes at most limit rows that expired
-- before cutoff. Run it until it deletes fewer than limit rows.
DELETE FROM ratelimit_window_counts
WHERE expires_at < sqlc.arg(cutoff)
LIMIT ?;
