-- name: OverrideUpsert :exec
-- OverrideUpsert sets the override of an identifier (or pattern) of a
-- namespace. An override that exists keeps its id; one that was deleted is
-- revived with the id given. (Assignments run left to right: id is decided
-- before deleted_at is cleared.)
INSERT INTO ratelimit_overrides (
    id, workspace_id, namespace, identifier, limit_value, duration_ms, updated_at, deleted_at
) VALUES (?, ?, ?, ?, ?, ?, ?, 0)
ON DUPLICATE KEY UPDATE
    id = IF(deleted_at = 0, id, VALUES(id)),
    limit_value = VALUES(limit_value),
    duration_ms = VALUES(duration_ms),
    updated_at = VALUES(updated_at),
    deleted_at = 0;

-- name: OverrideGet :one
-- OverrideGet returns the live override of an identifier (or pattern).
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, updated_at, deleted_at
FROM ratelimit_overrides
WHERE workspace_id = ? AND namespace = ? AND identifier = ? AND deleted_at = 0;

-- name: OverrideList :many
-- OverrideList returns up to limit live overrides of a namespace whose
-- identifier sorts after the given one ('' for the first page), in
-- identifier order: the cursor of a page is its last identifier.
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, updated_at, deleted_at
FROM ratelimit_overrides
WHERE workspace_id = sqlc.arg(workspace_id) AND namespace = sqlc.arg(namespace)
    AND identifier > sqlc.arg(after) AND deleted_at = 0
ORDER BY identifier
LIMIT ?;

-- name: OverrideDelete :execrows
-- OverrideDelete marks the live override of an identifier (or pattern)
-- deleted at now, so that every process's poll sees it go.
UPDATE ratelimit_overrides
SET deleted_at = sqlc.arg(now), updated_at = sqlc.arg(now)
WHERE workspace_id = ? AND namespace = ? AND identifier = ? AND deleted_at = 0;

-- name: OverrideChanges :many
-- OverrideChanges returns every override, deleted ones included, changed at
-- or after since (unix ms): what a process's poll applies to its copy.
SELECT id, workspace_id, namespace, identifier, limit_value, duration_ms, updated_at, deleted_at
FROM ratelimit_overrides
WHERE updated_at >= ?;
