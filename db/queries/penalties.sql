-- updated_at is the database's clock in unix ms, FLOOR(UNIX_TIMESTAMP(NOW(3))
-- * 1000): the poll's order, whatever the processes' clocks say.

-- name: PenaltyMerge :exec
-- PenaltyMerge merges a state into the row of its identifier: the later
-- of the two in the order (cleared_at, until_at, started_at) wins whole (a
-- lift beats every block written without it; of two blocks after one
-- lift, the one that ends later). Assignments run left to right, each
-- after the ones before: started_at is decided on the old row; until_at
-- needs no started_at (of two equal ends either is the same value);
-- cleared_at is the greater. Replayed, it changes nothing.
INSERT INTO ratelimit_penalties (
    workspace_id, namespace, identifier, started_at, until_at, cleared_at, expires_at, updated_at
) VALUES (
    ?, ?, ?, ?, ?, ?, ?, FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000)
)
ON DUPLICATE KEY UPDATE
    started_at = IF(VALUES(cleared_at) > cleared_at
        OR (VALUES(cleared_at) = cleared_at AND (VALUES(until_at) > until_at
            OR (VALUES(until_at) = until_at AND VALUES(started_at) > started_at))),
        VALUES(started_at), started_at),
    until_at = IF(VALUES(cleared_at) > cleared_at OR (VALUES(cleared_at) = cleared_at AND VALUES(until_at) > until_at),
        VALUES(until_at), until_at),
    cleared_at = GREATEST(cleared_at, VALUES(cleared_at)),
    expires_at = GREATEST(expires_at, VALUES(expires_at)),
    updated_at = VALUES(updated_at);

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
-- PenaltyChanges returns the rows written at or after since (the
-- database's clock) that still matter at now: what a process's poll
-- merges into its memory, and, from 0, its start-up load.
SELECT workspace_id, namespace, identifier, started_at, until_at, cleared_at, expires_at
FROM ratelimit_penalties
WHERE updated_at >= sqlc.arg(since) AND expires_at > sqlc.arg(now);

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
