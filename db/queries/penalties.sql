-- updated_at is the database's clock in unix ms, FLOOR(UNIX_TIMESTAMP(NOW(3))
-- * 1000): the poll's order, whatever the processes' clocks say.

-- name: PenaltyEnsure :exec
-- PenaltyEnsure makes the row of an identifier if it has none, empty (no
-- block, no lift: the least state of a box), so that a merge can lock it.
INSERT IGNORE INTO ratelimit_penalties (
    workspace_id, namespace, identifier, started_at, until_at, cleared_at, expires_at, updated_at
) VALUES (?, ?, ?, 0, 0, 0, 0, 0);

-- name: PenaltyLock :one
-- PenaltyLock reads the row of an identifier and locks it until the
-- transaction ends: a merge's read, its decision made in Go (the later
-- state in store.Merge's order), its write.
SELECT started_at, until_at, cleared_at, expires_at
FROM ratelimit_penalties
WHERE workspace_id = ? AND namespace = ? AND identifier = ?
FOR UPDATE;

-- name: PenaltyWrite :exec
-- PenaltyWrite writes a merge's state to the row it locked, stamped with
-- the database's clock so that every poll reads it.
UPDATE ratelimit_penalties
SET started_at = ?, until_at = ?, cleared_at = ?, expires_at = ?,
    updated_at = FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)
WHERE workspace_id = ? AND namespace = ? AND identifier = ?;

-- name: PenaltyGet :one
-- PenaltyGet returns the row of an identifier.
SELECT workspace_id, namespace, identifier, started_at, until_at, cleared_at, expires_at
FROM ratelimit_penalties
WHERE workspace_id = ? AND namespace = ? AND identifier = ?;

-- name: PenaltyList :many
-- PenaltyList returns up to limit rows of a namespace whose identifier
-- sorts after the given one and whose block has not ended at now, in
-- identifier order (lifted ones included: the caller skips them).
SELECT workspace_id, namespace, identifier, started_at, until_at, cleared_at, expires_at
FROM ratelimit_penalties
WHERE workspace_id = sqlc.arg(workspace_id) AND namespace = sqlc.arg(namespace)
    AND identifier > sqlc.arg(after) AND until_at > sqlc.arg(now)
ORDER BY identifier
LIMIT ?;

-- name: PenaltyChanges :many
-- PenaltyChanges returns up to limit rows written at or after since (the
-- database's clock) that still matter at now, the latest first: what a
-- process's poll merges into its memory, and, from 0, its start-up load
-- (limit: what its memory holds).
SELECT workspace_id, namespace, identifier, started_at, until_at, cleared_at, expires_at
FROM ratelimit_penalties
WHERE updated_at >= sqlc.arg(since) AND expires_at > sqlc.arg(now)
ORDER BY updated_at DESC
LIMIT ?;

-- name: PenaltyClock :one
-- PenaltyClock returns the database's clock in unix ms: a row written
-- after it reads it has an updated_at at least this large, but for a
-- statement under way (which a poll's look-back covers).
SELECT CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED) AS now_ms;

-- name: PenaltiesPurge :execrows
-- PenaltiesPurge deletes up to limit rows that stopped mattering before
-- cutoff (unix ms): the worker's cleanup.
DELETE FROM ratelimit_penalties
WHERE expires_at < ?
ORDER BY expires_at
LIMIT ?;
