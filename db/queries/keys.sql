-- The database's clock stamps every change: unix ms for times, unix µs for
-- revision (see the schema).

-- name: KeyInsert :exec
-- KeyInsert stores a new key. Its secret is not here: only its digest.
INSERT INTO ratelimit_keys (
    id, workspace_id, name, digest, permissions, expires_at, revoked_at, created_at, updated_at, revision
) VALUES (
    ?, ?, ?, ?, ?, ?, 0,
    FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    UNIX_TIMESTAMP(NOW(6)) * 1000000
);

-- name: KeyGet :one
-- KeyGet returns a key of a workspace, revoked or not.
SELECT id, workspace_id, name, digest, permissions, expires_at, revoked_at, created_at, updated_at, revision
FROM ratelimit_keys
WHERE workspace_id = ? AND id = ?;

-- name: KeyList :many
-- KeyList returns up to limit keys of a workspace whose id sorts after the
-- given one ('' for the first page), in id order: a page's cursor is its
-- last id.
SELECT id, workspace_id, name, digest, permissions, expires_at, revoked_at, created_at, updated_at, revision
FROM ratelimit_keys
WHERE workspace_id = sqlc.arg(workspace_id) AND id > sqlc.arg(after)
ORDER BY id
LIMIT ?;

-- name: KeyCount :one
-- KeyCount counts a workspace's keys, all of them and those not revoked:
-- what its caps bound (revoked rows stay, so that polls see them go).
SELECT CAST(COUNT(*) AS SIGNED) AS total, CAST(COALESCE(SUM(revoked_at = 0), 0) AS SIGNED) AS live
FROM ratelimit_keys
WHERE workspace_id = ?;

-- name: KeyUpdatePermissions :execrows
-- KeyUpdatePermissions replaces the permissions of a key that is not
-- revoked.
UPDATE ratelimit_keys
SET permissions = ?,
    updated_at = FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    revision = GREATEST(revision + 1, UNIX_TIMESTAMP(NOW(6)) * 1000000)
WHERE workspace_id = ? AND id = ? AND revoked_at = 0;

-- name: KeyRevoke :execrows
-- KeyRevoke revokes a key that is not revoked yet. The row stays, so that
-- every process's poll sees the key go.
UPDATE ratelimit_keys
SET revoked_at = FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    updated_at = FLOOR(UNIX_TIMESTAMP(NOW(6)) * 1000),
    revision = GREATEST(revision + 1, UNIX_TIMESTAMP(NOW(6)) * 1000000)
WHERE workspace_id = ? AND id = ? AND revoked_at = 0;

-- name: KeySummary :one
-- KeySummary sums up the whole table from the revision index alone: a
-- change of any row changes its revision, so the exclusive-or of the
-- revisions (and the count, for a new row) changes with it, even for a
-- change that waited on a lock and committed with an older revision than
-- one already read. A poll reads anything (KeyChanges) only then.
SELECT CAST(COUNT(*) AS SIGNED) AS row_count, CAST(COALESCE(BIT_XOR(revision), 0) AS UNSIGNED) AS revisions
FROM ratelimit_keys FORCE INDEX (keys_revision_idx);

-- name: KeyAll :many
-- KeyAll returns every key, revoked ones included, in primary key order:
-- what a process holds in memory.
SELECT id, workspace_id, name, digest, permissions, expires_at, revoked_at, created_at, updated_at, revision
FROM ratelimit_keys
ORDER BY pk;

-- name: KeyChanges :many
-- KeyChanges returns every key, revoked ones included, whose revision is at
-- least since: what a poll reads when the summary changed. A change that
-- committed later than its revision says (behind a lock) may be older than
-- since; the poller finds out by the summary and reads everything then.
SELECT id, workspace_id, name, digest, permissions, expires_at, revoked_at, created_at, updated_at, revision
FROM ratelimit_keys FORCE INDEX (keys_revision_idx)
WHERE revision >= ?;
