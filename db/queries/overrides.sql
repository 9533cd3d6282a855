-- The database's clock, never a writer's, stamps every change: in unix µs
-- for revision, UNIX_TIMESTAMP(NOW(6)) * 1000000, and in unix ms for
-- updated_at and deleted_at. NOW is the statement's start. (The processes
-- set their sessions' time zone to UTC, so that UNIX_TIMESTAMP never meets
-- the hour a daylight-saving change repeats.)

-- name: OverrideUpsert :exec
-- OverrideUpsert sets the override of an identifier (or pattern) of a
-- namespace. An override that exists keeps its id; one that was deleted is
-- revived with the id given. (Assignments run left to right: id is decided
-- before deleted_at is cleared.) The revision grows by at least one whatever
-- the clock does, so that the row's later state always has the larger one.
INSERT INTO ratelimit_overrides (
    id, workspace_id, namespace, identifier, limit_value, duration_ms, burst, shadow, updated_at, deleted_at, revision
) VALUES (
    ?, ?, ?, ?, ?, ?, ?, ?,
    FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    0,
    UNIX_TIMESTAMP(NOW(6)) * 1000000
)
ON DUPLICATE KEY UPDATE
    id = IF(deleted_at = 0, id, VALUES(id)),
    limit_value = VALUES(limit_value),
    duration_ms = VALUES(duration_ms),
    burst = VALUES(burst),
    shadow = VALUES(shadow),
    updated_at = VALUES(updated_at),
    deleted_at = 0,
    revision = GREATEST(revision + 1, VALUES(revision));

-- name: OverrideGet :one
-- OverrideGet returns the live override of an identifier (or pattern).
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, burst, shadow, updated_at, deleted_at, revision
FROM ratelimit_overrides
WHERE workspace_id = ? AND namespace = ? AND identifier = ? AND deleted_at = 0;

-- name: OverrideRow :one
-- OverrideRow returns the row of an identifier (or pattern), live or
-- deleted: what a write reads back to apply the state it left.
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, burst, shadow, updated_at, deleted_at, revision
FROM ratelimit_overrides
WHERE workspace_id = ? AND namespace = ? AND identifier = ?;

-- name: OverrideList :many
-- OverrideList returns up to limit live overrides of a namespace whose
-- identifier sorts after the given one ('' for the first page), in
-- identifier order: the cursor of a page is its last identifier.
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, burst, shadow, updated_at, deleted_at, revision
FROM ratelimit_overrides
WHERE workspace_id = sqlc.arg(workspace_id) AND namespace = sqlc.arg(namespace)
    AND identifier > sqlc.arg(after) AND deleted_at = 0
ORDER BY identifier
LIMIT ?;

-- name: OverrideDelete :execrows
-- OverrideDelete marks the live override of an identifier (or pattern)
-- deleted, so that every process's poll sees it go.
UPDATE ratelimit_overrides
SET deleted_at = FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    updated_at = FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    revision = GREATEST(revision + 1, UNIX_TIMESTAMP(NOW(6)) * 1000000)
WHERE workspace_id = ? AND namespace = ? AND identifier = ? AND deleted_at = 0;

-- name: OverrideRevisionNow :one
-- OverrideRevisionNow returns the database's clock in unix µs: no change
-- that commits later gets a smaller revision, but for one whose statement
-- began before and commits after (which a poll's look-back covers).
SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us;

-- name: OverrideChanges :many
-- OverrideChanges returns every override, deleted ones included, whose
-- revision is at least since: what a process's poll applies to its copy.
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, burst, shadow, updated_at, deleted_at, revision
FROM ratelimit_overrides FORCE INDEX (overrides_revision_idx)
WHERE revision >= ?;

-- name: OverrideLoadPage :many
-- OverrideLoadPage returns up to limit live overrides after the row pk, in
-- pk order: a process's start-up load reads them all in pages, each one
-- index range of the primary key however large the table.
SELECT pk, id, workspace_id, namespace, identifier, limit_value, duration_ms, burst, shadow, updated_at, deleted_at, revision
FROM ratelimit_overrides
WHERE pk > sqlc.arg(after) AND deleted_at = 0
ORDER BY pk
LIMIT ?;

-- name: OverridePurgeBatch :one
-- OverridePurgeBatch counts the first limit tombstones, by primary key, of
-- overrides deleted before cutoff (unix ms by the database's clock: its
-- now less the retention), and returns the last one's key: the batch
-- OverridePurgeDeleted removes, counted once however often it runs. A
-- process whose poll has not run for the retention (a day) reads
-- everything again instead.
SELECT CAST(COUNT(*) AS SIGNED) AS rows_in_batch, CAST(COALESCE(MAX(pk), 0) AS UNSIGNED) AS last_pk
FROM (
    SELECT pk FROM ratelimit_overrides
    WHERE deleted_at > 0 AND deleted_at < sqlc.arg(cutoff)
    ORDER BY pk
    LIMIT ?
) batch;

-- name: OverridePurgeDeleted :execrows
-- OverridePurgeDeleted removes the batch OverridePurgeBatch counted; a
-- tombstone set again in between (its deleted_at back to 0) stays.
DELETE FROM ratelimit_overrides
WHERE pk <= sqlc.arg(last_pk) AND deleted_at > 0 AND deleted_at < sqlc.arg(cutoff);
