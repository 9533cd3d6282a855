-- name: BulkInsertBlocklist :exec
-- BulkInsertBlocklist is the legacy writer of the blocklist. No code calls it
-- any more; it stays until the table is dropped.
INSERT IGNORE INTO ratelimit_blocklist (
    workspace_id, namespace, identifier, duration_ms, sequence, expires_at, created_at
) VALUES (?, ?, ?, ?, ?, ?, ?);

-- name: BlocklistListActive :many
-- BlocklistListActive lists the rows that have not expired at now.
SELECT workspace_id, namespace, identifier, duration_ms, sequence, expires_at
FROM ratelimit_blocklist
WHERE expires_at > ?;

-- name: BlocklistExpiredBatch :one
-- BlocklistExpiredBatch counts the first limit rows, by primary key, that
-- expired before cutoff, and returns the last one's key: the batch
-- BlocklistDeleteBatch deletes, counted once however often it runs.
SELECT CAST(COUNT(*) AS SIGNED) AS rows_in_batch, CAST(COALESCE(MAX(pk), 0) AS UNSIGNED) AS last_pk
FROM (
    SELECT pk FROM ratelimit_blocklist
    WHERE expires_at < sqlc.arg(cutoff)
    ORDER BY pk
    LIMIT ?
) batch;

-- name: BlocklistDeleteBatch :execrows
-- BlocklistDeleteBatch deletes the batch BlocklistExpiredBatch counted.
DELETE FROM ratelimit_blocklist
WHERE pk <= sqlc.arg(last_pk) AND expires_at < sqlc.arg(cutoff);

-- name: BlocklistStats :one
-- BlocklistStats returns the number of rows, the latest expiry and the latest
-- creation time (0 when the table is empty): what the retirement workflow
-- checks before each stage.
SELECT
    CAST(COUNT(*) AS SIGNED) AS row_count,
    CAST(COALESCE(MAX(expires_at), 0) AS SIGNED) AS latest_expires_at,
    CAST(COALESCE(MAX(created_at), 0) AS SIGNED) AS latest_created_at
FROM ratelimit_blocklist;

-- name: BlocklistDropTable :exec
-- BlocklistDropTable drops the legacy table: the last stage of its
-- retirement. IF EXISTS makes a repeated drop harmless.
DROP TABLE IF EXISTS ratelimit_blocklist;
